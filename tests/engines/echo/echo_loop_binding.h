#ifndef WSYNC_TESTS_ENGINES_ECHO_ECHO_LOOP_BINDING_H_
#define WSYNC_TESTS_ENGINES_ECHO_ECHO_LOOP_BINDING_H_

#include <string>

#include "tests/transport/loop/loop_binding.h"

namespace wsync {

// The echo engine kind on the loop transport's path: it greets the loop with its group's
// greeting.
class EchoLoopBinding final : public LoopBinding {
 public:
  explicit EchoLoopBinding(std::string greeting) : greeting_(std::move(greeting)) {}
  std::string Hello() const override { return greeting_; }

 private:
  const std::string greeting_;
};

}  // namespace wsync

#endif  // WSYNC_TESTS_ENGINES_ECHO_ECHO_LOOP_BINDING_H_

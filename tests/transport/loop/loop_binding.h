#ifndef WSYNC_TESTS_TRANSPORT_LOOP_LOOP_BINDING_H_
#define WSYNC_TESTS_TRANSPORT_LOOP_LOOP_BINDING_H_

#include <string>

#include "absl/strings/string_view.h"
#include "daemon/core/engine_adapter.h"

namespace wsync {

// The "loop" data path of the test-only loop transport: the whole contract between it and the
// engines that speak it. An engine greets the loop once per formation.
inline constexpr absl::string_view kLoopDataPath = "loop";

class LoopBinding : public DataPathBinding {
 public:
  absl::string_view data_path() const final { return kLoopDataPath; }
  // What the engine says when the loop forms over it.
  virtual std::string Hello() const = 0;
};

}  // namespace wsync

#endif  // WSYNC_TESTS_TRANSPORT_LOOP_LOOP_BINDING_H_

#ifndef WSYNC_COMMON_SECRET_FILE_H_
#define WSYNC_COMMON_SECRET_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace wsync {

// The contents of a token, key or certificate file without surrounding whitespace (an editor's
// final newline is not part of a token). An empty file is an error naming `what` and the path:
// an empty token would match a caller that sends none.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path, const char* what);

}  // namespace wsync

#endif  // WSYNC_COMMON_SECRET_FILE_H_

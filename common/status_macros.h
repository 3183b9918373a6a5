#ifndef WSYNC_COMMON_STATUS_MACROS_H_
#define WSYNC_COMMON_STATUS_MACROS_H_

// Debian's abseil (20220623) ships absl::Status but no status macros, so wsync keeps its own.
#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define WSYNC_CONCAT_INNER_(a, b) a##b
#define WSYNC_CONCAT_(a, b) WSYNC_CONCAT_INNER_(a, b)

#define WSYNC_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::absl::Status wsync_status_ = (expr);         \
    if (!wsync_status_.ok()) return wsync_status_; \
  } while (0)

#define WSYNC_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(*tmp)

#define WSYNC_ASSIGN_OR_RETURN(lhs, expr) \
  WSYNC_ASSIGN_OR_RETURN_IMPL_(WSYNC_CONCAT_(wsync_statusor_, __LINE__), lhs, expr)

#endif  // WSYNC_COMMON_STATUS_MACROS_H_

#ifndef WSYNC_COMMON_DTYPE_H_
#define WSYNC_COMMON_DTYPE_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace wsync {

// The tensor element types wsync moves. Names are torch attribute names (getattr(torch, name)),
// which is what every engine's JSON carries.
enum class DType {
  kBool,
  kUint8,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kFloat16,
  kBfloat16,
  kFloat32,
  kFloat64,
  kFloat8E4m3fn,
  kFloat8E5m2,
};

absl::StatusOr<DType> ParseDType(absl::string_view name);
absl::string_view DTypeName(DType dtype);
size_t DTypeSize(DType dtype);

}  // namespace wsync

#endif  // WSYNC_COMMON_DTYPE_H_

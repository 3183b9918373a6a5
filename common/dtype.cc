#include "common/dtype.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace wsync {
namespace {

struct DTypeEntry {
  DType dtype;
  absl::string_view name;
  size_t size;
};

constexpr std::array<DTypeEntry, 12> kDTypes = {{
    {DType::kBool, "bool", 1},
    {DType::kUint8, "uint8", 1},
    {DType::kInt8, "int8", 1},
    {DType::kInt16, "int16", 2},
    {DType::kInt32, "int32", 4},
    {DType::kInt64, "int64", 8},
    {DType::kFloat16, "float16", 2},
    {DType::kBfloat16, "bfloat16", 2},
    {DType::kFloat32, "float32", 4},
    {DType::kFloat64, "float64", 8},
    {DType::kFloat8E4m3fn, "float8_e4m3fn", 1},
    {DType::kFloat8E5m2, "float8_e5m2", 1},
}};

}  // namespace

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.name == name) return e.dtype;
  }
  std::string known = absl::StrJoin(
      kDTypes, ", ", [](std::string* out, const DTypeEntry& e) { absl::StrAppend(out, e.name); });
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "'; known dtypes: ", known));
}

absl::string_view DTypeName(DType dtype) { return kDTypes[static_cast<size_t>(dtype)].name; }

size_t DTypeSize(DType dtype) { return kDTypes[static_cast<size_t>(dtype)].size; }

}  // namespace wsync

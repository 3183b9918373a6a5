#include "common/cuda/nccl_dtype.h"

#include "absl/strings/str_cat.h"

namespace wsync::cuda {

absl::StatusOr<ncclDataType_t> NcclTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kBool:
    case DType::kUint8:
    case DType::kFloat8E4m3fn:
    case DType::kFloat8E5m2:
      return ncclUint8;
    case DType::kInt8:
      return ncclInt8;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBfloat16:
      return ncclBfloat16;
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kInt16:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("torch's NCCL backend cannot broadcast ",
                                                 DTypeName(dtype), " tensors one by one"));
}

}  // namespace wsync::cuda

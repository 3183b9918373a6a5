#ifndef WSYNC_TESTS_RELIABILITY_TEST_MODELS_H_
#define WSYNC_TESTS_RELIABILITY_TEST_MODELS_H_

// The soak's and the fault matrix's model: the service tests' small model (mixed dtypes, odd
// sizes, ~2.3 MiB: several buckets in 1 MiB slots) and one tensor larger than a slot, which
// travels alone through the oversize slot wsyncd makes on first need and keeps.

#include <vector>

#include "tests/service/service_fixture.h"

namespace wsync {

inline std::vector<OwnedTensor> ModelWithOversizeTensor(uint32_t version) {
  std::vector<OwnedTensor> model = SmallModel(version);
  OwnedTensor big{"model.big.weight", DType::kBfloat16, {768, 1024}, {}};
  big.data.resize(768 * 1024 * 2);  // 1.5 MiB
  for (size_t i = 0; i < big.data.size(); ++i) {
    big.data[i] = static_cast<uint8_t>(i * 13 + version);
  }
  model.push_back(std::move(big));
  return model;
}

}  // namespace wsync

#endif  // WSYNC_TESTS_RELIABILITY_TEST_MODELS_H_

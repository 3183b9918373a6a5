#ifndef WSYNC_CLIENT_PUSH_SYNTHETIC_MODEL_H_
#define WSYNC_CLIENT_PUSH_SYNTHETIC_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace wsync {

struct SyntheticTensor {
  std::string name;
  DType dtype = DType::kBfloat16;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

// A decoder-only model with Qwen2-style tensor names in bf16, fp32 norms and an int64 tensor per
// layer, of about target_bytes. The embedding is larger than half a slot (so a bucket holds it
// alone), and odd-sized bf16 biases followed by fp32 norms exercise the planner's alignment rule.
// Contents are a deterministic function of (version, tensor index).
std::vector<SyntheticTensor> MakeSyntheticModel(uint64_t target_bytes, uint64_t slot_bytes,
                                                uint32_t version);
// Rewrites a model made by MakeSyntheticModel with the contents of `version`, in place: the bytes
// MakeSyntheticModel would make for that version, without allocating (and faulting in) them again.
void FillSyntheticModel(std::vector<SyntheticTensor>& model, uint32_t version);
// Changes `fraction` (0 to 1) of every tensor's elements in place, at positions and to values
// that depend on (version, tensor index), each changed element to other bits: the next version
// of a model as an RL step makes it, where few elements move.
void ChangeSyntheticModel(std::vector<SyntheticTensor>& model, uint32_t version, double fraction);

}  // namespace wsync

#endif  // WSYNC_CLIENT_PUSH_SYNTHETIC_MODEL_H_

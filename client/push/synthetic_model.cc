#include "client/push/synthetic_model.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace wsync {
namespace {

void Fill(std::vector<uint8_t>& data, uint64_t seed) {
  // splitmix64: fast and different for every (version, tensor).
  uint64_t x = seed;
  size_t i = 0;
  for (; i + 8 <= data.size(); i += 8) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(&data[i], &z, 8);
  }
  for (; i < data.size(); ++i) data[i] = static_cast<uint8_t>(x >> (8 * (i % 8)));
}

uint64_t Seed(uint32_t version, size_t index) {
  return (static_cast<uint64_t>(version) << 32) ^ (index * 0x100000001B3ull);
}

void Add(std::vector<SyntheticTensor>& out, std::string name, DType dtype,
         std::vector<int64_t> shape, uint32_t version) {
  uint64_t n = DTypeSize(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  SyntheticTensor t{std::move(name), dtype, std::move(shape), std::vector<uint8_t>(n)};
  Fill(t.data, Seed(version, out.size()));
  out.push_back(std::move(t));
}

}  // namespace

std::vector<SyntheticTensor> MakeSyntheticModel(uint64_t target_bytes, uint64_t slot_bytes,
                                                uint32_t version) {
  std::vector<SyntheticTensor> out;
  const int64_t hidden = 1024;
  // Embedding: a little over half a slot.
  const int64_t vocab = static_cast<int64_t>((slot_bytes * 6 / 10) / (hidden * 2));
  Add(out, "model.embed_tokens.weight", DType::kBfloat16, {vocab, hidden}, version);
  const uint64_t per_layer = (4 * hidden * hidden + 3 * hidden * 2816) * 2;
  uint64_t used = out[0].data.size() * 2;  // embedding and lm_head
  int layers = 0;
  while (used + per_layer <= target_bytes || layers == 0) {
    const std::string p = absl::StrCat("model.layers.", layers, ".");
    Add(out, p + "self_attn.q_proj.weight", DType::kBfloat16, {hidden, hidden}, version);
    Add(out, p + "self_attn.q_proj.bias", DType::kBfloat16, {hidden + 1}, version);  // odd size
    Add(out, p + "self_attn.k_proj.weight", DType::kBfloat16, {hidden, hidden}, version);
    Add(out, p + "self_attn.k_proj.bias", DType::kBfloat16, {hidden}, version);
    Add(out, p + "self_attn.v_proj.weight", DType::kBfloat16, {hidden, hidden}, version);
    Add(out, p + "self_attn.v_proj.bias", DType::kBfloat16, {hidden - 1}, version);  // odd size
    Add(out, p + "input_layernorm.weight", DType::kFloat32, {hidden}, version);
    Add(out, p + "self_attn.o_proj.weight", DType::kBfloat16, {hidden, hidden}, version);
    Add(out, p + "mlp.gate_proj.weight", DType::kBfloat16, {2816, hidden}, version);
    Add(out, p + "mlp.up_proj.weight", DType::kBfloat16, {2816, hidden}, version);
    Add(out, p + "mlp.down_proj.weight", DType::kBfloat16, {hidden, 2816}, version);
    Add(out, p + "post_attention_layernorm.weight", DType::kFloat32, {hidden}, version);
    Add(out, p + "self_attn.rotary_emb.inv_freq_steps", DType::kInt64, {hidden / 2}, version);
    used += per_layer;
    ++layers;
  }
  Add(out, "model.norm.weight", DType::kFloat32, {hidden}, version);
  Add(out, "lm_head.weight", DType::kBfloat16, {vocab, hidden}, version);
  return out;
}

void ChangeSyntheticModel(std::vector<SyntheticTensor>& model, uint32_t version, double fraction) {
  for (size_t i = 0; i < model.size(); ++i) {
    SyntheticTensor& t = model[i];
    const uint64_t width = DTypeSize(t.dtype);
    const uint64_t n = t.data.size() / width;
    const auto changed = static_cast<uint64_t>(static_cast<double>(n) * fraction);
    if (changed == 0) continue;
    // Evenly spread, each shifted by a pseudo-random amount inside its stride: distinct
    // positions, not a regular pattern.
    const uint64_t stride = n / changed;
    uint64_t x = Seed(version, i) | 1;
    for (uint64_t k = 0; k < changed; ++k) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      uint8_t* element = &t.data[(k * stride + x % stride) * width];
      element[0] ^= static_cast<uint8_t>((x >> 24) | 1);  // never 0: the bits change
    }
  }
}

void FillSyntheticModel(std::vector<SyntheticTensor>& model, uint32_t version) {
  for (size_t i = 0; i < model.size(); ++i) Fill(model[i].data, Seed(version, i));
}

}  // namespace wsync

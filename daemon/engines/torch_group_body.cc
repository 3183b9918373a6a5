#include "daemon/engines/torch_group_body.h"

#include <string>

namespace wsync {

nlohmann::json TorchGroupInitBody(const Rendezvous& rendezvous, uint32_t rank_offset) {
  return {{"master_address", rendezvous.master_address},
          {"master_port", rendezvous.master_port},
          {"rank_offset", rank_offset},
          {"world_size", rendezvous.world_size},
          {"group_name", rendezvous.group_name},
          {"backend", "nccl"}};
}

nlohmann::json BucketTensorLists(const BucketManifest& manifest) {
  nlohmann::json names = nlohmann::json::array();
  nlohmann::json dtypes = nlohmann::json::array();
  nlohmann::json shapes = nlohmann::json::array();
  for (const TensorEntry& t : manifest.tensors) {
    names.push_back(t.name);
    dtypes.push_back(std::string(DTypeName(t.dtype)));
    shapes.push_back(t.shape);
  }
  return {
      {"names", std::move(names)}, {"dtypes", std::move(dtypes)}, {"shapes", std::move(shapes)}};
}

}  // namespace wsync

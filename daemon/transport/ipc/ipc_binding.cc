#include "daemon/transport/ipc/ipc_binding.h"

#include "absl/strings/str_cat.h"

namespace wsync {
namespace {

template <typename Binding>
absl::StatusOr<Binding*> BindingOf(EngineAdapter& adapter, absl::string_view path) {
  auto* binding = dynamic_cast<Binding*>(adapter.Binding(path));
  if (binding == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "engine ", adapter.endpoint().url, " cannot receive over the ", path, " data path"));
  }
  return binding;
}

}  // namespace

absl::StatusOr<IpcBinding*> IpcBindingOf(EngineAdapter& adapter) {
  return BindingOf<IpcBinding>(adapter, kCudaIpcDataPath);
}

absl::StatusOr<IpcStreamBinding*> IpcStreamBindingOf(EngineAdapter& adapter) {
  return BindingOf<IpcStreamBinding>(adapter, kCudaIpcStreamDataPath);
}

}  // namespace wsync

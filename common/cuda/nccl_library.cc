#include "common/cuda/nccl_library.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace wsync::cuda {

absl::StatusOr<std::unique_ptr<NcclLibrary>> NcclLibrary::Load(const std::string& path) {
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot load NCCL from '", path, "': ", ::dlerror(),
        "; pass --nccl-lib with the libnccl.so.2 your engines' torch uses (site-packages/"
        "nvidia/nccl/lib)"));
  }
  auto lib = std::unique_ptr<NcclLibrary>(new NcclLibrary(handle, path));
  auto resolve = [&](auto& fn, const char* name) -> bool {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(handle, name));
    return fn != nullptr;
  };
  decltype(&::ncclGetVersion) get_version = nullptr;
  const bool ok =
      resolve(get_version, "ncclGetVersion") && resolve(lib->GetUniqueId, "ncclGetUniqueId") &&
      resolve(lib->CommInitRankConfig, "ncclCommInitRankConfig") &&
      resolve(lib->CommGetAsyncError, "ncclCommGetAsyncError") &&
      resolve(lib->Broadcast, "ncclBroadcast") && resolve(lib->AllReduce, "ncclAllReduce") &&
      resolve(lib->CommAbort, "ncclCommAbort") && resolve(lib->CommDestroy, "ncclCommDestroy") &&
      resolve(lib->CommFinalize, "ncclCommFinalize") &&
      resolve(lib->GetErrorString, "ncclGetErrorString") &&
      resolve(lib->GetLastError, "ncclGetLastError");
  if (!ok) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "' lacks NCCL symbols (too old? wsync needs NCCL >= 2.18)"));
  }
  if (get_version(&lib->version_) != ncclSuccess) {
    return absl::InternalError(absl::StrCat("ncclGetVersion failed in ", path));
  }
  return lib;
}

NcclLibrary::~NcclLibrary() {
  // NCCL keeps background threads and static state; unloading it is not safe.
}

std::string NcclLibrary::version_string() const {
  return absl::StrFormat("%d.%d.%d", version_ / 10000, (version_ / 100) % 100, version_ % 100);
}

absl::Status NcclLibrary::Check(ncclResult_t result, const char* call) const {
  if (result == ncclSuccess || result == ncclInProgress) return absl::OkStatus();
  std::string text = absl::StrCat(call, " failed: ", GetErrorString(result), " (NCCL ",
                                  version_string(), " from ", path_, ")");
  if (const char* last = GetLastError(nullptr); last != nullptr && *last != '\0') {
    absl::StrAppend(&text, ": ", last);
  }
  if (result == ncclInvalidUsage || result == ncclSystemError || result == ncclRemoteError) {
    absl::StrAppend(&text,
                    ". If the engines run another NCCL version, NCCL refuses to connect: start "
                    "wsyncd with --nccl-lib pointing at the engines' libnccl.so.2");
  }
  return absl::InternalError(text);
}

absl::StatusOr<std::unique_ptr<NcclLibraries>> NcclLibraries::Create(
    const std::string& default_library) {
  auto loaded = NcclLibrary::Load(default_library);
  if (!loaded.ok()) return loaded.status();
  return std::unique_ptr<NcclLibraries>(new NcclLibraries(std::move(*loaded)));
}

NcclLibraries::NcclLibraries(std::unique_ptr<NcclLibrary> default_library)
    : default_(default_library.get()) {
  loaded_[default_library->path()] = std::move(default_library);
}

std::vector<std::pair<std::string, std::string>> NcclLibraries::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [path, library] : loaded_) out.emplace_back(path, library->version_string());
  return out;
}

absl::StatusOr<const NcclLibrary*> NcclLibraries::Get(const std::string& path) {
  if (path.empty()) return default_;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = loaded_.find(path);
  if (it != loaded_.end()) return it->second.get();
  auto loaded = NcclLibrary::Load(path);
  if (!loaded.ok()) return loaded.status();
  const NcclLibrary* library = loaded->get();
  loaded_[path] = std::move(*loaded);
  return library;
}

}  // namespace wsync::cuda

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

}  // namespace wsync::cuda

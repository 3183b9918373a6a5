#ifndef WSYNC_COMMON_CUDA_NCCL_LIBRARY_H_
#define WSYNC_COMMON_CUDA_NCCL_LIBRARY_H_

// NCCL loaded at run time: NCCL refuses peers of another version, and engines bring their own
// (torch's bundled libnccl), so the daemon must load the very library the engines use.

#include <nccl.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace wsync::cuda {

class NcclLibrary {
 public:
  // path: a file or a soname ("libnccl.so.2" searches LD_LIBRARY_PATH).
  static absl::StatusOr<std::unique_ptr<NcclLibrary>> Load(const std::string& path);
  ~NcclLibrary();

  int version() const { return version_; }  // e.g. 22809 for 2.28.9
  std::string version_string() const;
  const std::string& path() const { return path_; }
  absl::Status Check(ncclResult_t result, const char* call) const;

  decltype(&::ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&::ncclCommInitRankConfig) CommInitRankConfig = nullptr;
  decltype(&::ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&::ncclBroadcast) Broadcast = nullptr;
  decltype(&::ncclAllReduce) AllReduce = nullptr;
  decltype(&::ncclCommAbort) CommAbort = nullptr;
  decltype(&::ncclCommDestroy) CommDestroy = nullptr;
  decltype(&::ncclCommFinalize) CommFinalize = nullptr;
  decltype(&::ncclGetErrorString) GetErrorString = nullptr;
  decltype(&::ncclGetLastError) GetLastError = nullptr;

 private:
  NcclLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  void* handle_;
  std::string path_;
  int version_ = 0;
};

// Every NCCL library the daemon's groups asked for, each loaded once (by the exact path or soname
// given) and kept for the life of the process, since unloading NCCL is not safe. Two libraries of
// different versions live side by side (RTLD_LOCAL), each with its own communicators. Thread-safe.
class NcclLibraries {
 public:
  // `default_library` is loaded at once; Get("") returns it.
  static absl::StatusOr<std::unique_ptr<NcclLibraries>> Create(const std::string& default_library);

  // The library at `path` ("" for the default), loaded on first use; a path that fails to load
  // is tried again on the next call (the operator may install it meanwhile).
  absl::StatusOr<const NcclLibrary*> Get(const std::string& path);
  const NcclLibrary& default_library() const { return *default_; }
  // Each library loaded, by the path or soname it was asked by, with its version ("2.28.9").
  std::vector<std::pair<std::string, std::string>> List() const;

 private:
  explicit NcclLibraries(std::unique_ptr<NcclLibrary> default_library);
  const NcclLibrary* default_;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<NcclLibrary>> loaded_;
};

}  // namespace wsync::cuda

#endif  // WSYNC_COMMON_CUDA_NCCL_LIBRARY_H_

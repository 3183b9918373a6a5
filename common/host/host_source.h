#ifndef WSYNC_COMMON_HOST_HOST_SOURCE_H_
#define WSYNC_COMMON_HOST_HOST_SOURCE_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/gpu_seam.h"

namespace wsync {

// Host mode's stand-in for a trainer's GPU allocation in pull mode: a shared-memory segment the
// trainer puts tensors in and wsyncd maps by name. It is made for one session, whose tag (from the
// OpenSession reply, Client::NewSourceArena) its name carries (shm_names.h): wsyncd maps it for
// that session only. Segments register themselves so the host exporter can find the one holding a
// tensor.
class HostSourceArena {
 public:
  static absl::StatusOr<std::unique_ptr<HostSourceArena>> Create(const std::string& session_tag,
                                                                 uint64_t bytes);
  ~HostSourceArena();
  HostSourceArena(const HostSourceArena&) = delete;
  HostSourceArena& operator=(const HostSourceArena&) = delete;
  void* data() const { return data_; }
  uint64_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }

 private:
  HostSourceArena(std::string name, void* data, uint64_t bytes)
      : name_(std::move(name)), data_(data), bytes_(bytes) {}
  std::string name_;
  void* data_;
  uint64_t bytes_;
};

// Finds the live HostSourceArena of the session tagged `session_tag` holding a tensor; NOT_FOUND
// for any other memory (another session's arena included: wsyncd would refuse it), which the
// client then copies itself.
class HostSourceExporter final : public SourceExporter {
 public:
  explicit HostSourceExporter(std::string session_tag) : session_tag_(std::move(session_tag)) {}
  void BeginUpdate() override {}
  absl::StatusOr<ExportedSource> Export(const void* data, uint64_t bytes) override;
  absl::StatusOr<uintptr_t> AllocationStart(const void* data, uint64_t bytes) override;

 private:
  std::string session_tag_;
};

// wsyncd's read-only mapping of a HostSourceArena, for the session tagged `session_tag`.
// PERMISSION_DENIED, naming the source, unless the name is one of that session's arenas
// (IsSourceShmNameOf) and the segment passes OpenTrainerShm's checks (a regular file of wsyncd's
// uid with one name): a session may only have wsyncd read memory its own client made.
absl::StatusOr<std::unique_ptr<SourceMemory>> MapHostSource(const std::string& name, uint64_t bytes,
                                                            const std::string& session_tag);

}  // namespace wsync

#endif  // WSYNC_COMMON_HOST_HOST_SOURCE_H_

#ifndef WSYNC_COMMON_HOST_HOST_SOURCE_H_
#define WSYNC_COMMON_HOST_HOST_SOURCE_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/gpu_seam.h"

namespace wsync {

// Host mode's stand-in for a trainer's GPU allocation in pull mode: a shared-memory segment the
// trainer puts tensors in and wsyncd maps by name. Segments register themselves so the host
// exporter can find the one holding a tensor.
class HostSourceArena {
 public:
  static absl::StatusOr<std::unique_ptr<HostSourceArena>> Create(uint64_t bytes);
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

// Finds the live HostSourceArena holding a tensor; NOT_FOUND for any other memory.
class HostSourceExporter final : public SourceExporter {
 public:
  void BeginUpdate() override {}
  absl::StatusOr<ExportedSource> Export(const void* data, uint64_t bytes) override;
};

// wsyncd's read-only mapping of a HostSourceArena.
absl::StatusOr<std::unique_ptr<SourceMemory>> MapHostSource(const std::string& name,
                                                            uint64_t bytes);

}  // namespace wsync

#endif  // WSYNC_COMMON_HOST_HOST_SOURCE_H_

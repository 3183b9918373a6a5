#ifndef WSYNC_TESTS_SERVICE_RECORDING_PLATFORM_H_
#define WSYNC_TESTS_SERVICE_RECORDING_PLATFORM_H_

// The host platform, with a log of every broadcast handed to its communicators: when, and whether
// it went out of the slot or straight out of a trainer allocation (pull mode, no copy). A test may
// also hold every broadcast's completion back (BroadcastLog::set_hold), as a slow wire would, so
// that a slot is not reusable before then. Each communicator's aborts are logged with their reason.

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/host/host_platform.h"

namespace wsync {

struct BroadcastRecord {
  absl::Time at;
  bool from_slot;
  uint64_t bytes = 0;
};

class BroadcastLog {
 public:
  void Add(BroadcastRecord r) {
    std::lock_guard<std::mutex> lock(mu_);
    records_.push_back(r);
  }
  std::vector<BroadcastRecord> records() const {
    std::lock_guard<std::mutex> lock(mu_);
    return records_;
  }
  void AddAbort(std::string reason) {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.push_back(std::move(reason));
  }
  // Why each communicator was aborted, in order.
  std::vector<std::string> aborts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return aborts_;
  }
  // A broadcast completes no sooner than `hold` after it started.
  void set_hold(absl::Duration hold) {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = hold;
  }
  absl::Duration hold() const {
    std::lock_guard<std::mutex> lock(mu_);
    return hold_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<BroadcastRecord> records_;
  std::vector<std::string> aborts_;
  absl::Duration hold_ = absl::ZeroDuration();
};

class RecordingPlatform final : public Platform {
 public:
  explicit RecordingPlatform(BroadcastLog* log) : inner_("127.0.0.1", "127.0.0.1"), log_(log) {}
  absl::string_view name() const override { return inner_.name(); }
  absl::StatusOr<std::unique_ptr<SlotMemory>> AllocateSlot(int device, uint64_t bytes) override {
    return inner_.AllocateSlot(device, bytes);
  }
  absl::StatusOr<std::vector<std::unique_ptr<SlotMemory>>> AllocateSlots(int device, uint32_t count,
                                                                         uint64_t bytes) override {
    return inner_.AllocateSlots(device, count, bytes);
  }
  absl::StatusOr<std::unique_ptr<RootCommunicator>> CreateRootCommunicator(
      int device, int world_size, const std::string& nccl_library) override {
    auto comm = inner_.CreateRootCommunicator(device, world_size, nccl_library);
    if (!comm.ok()) return comm.status();
    return std::unique_ptr<RootCommunicator>(new Recorded(std::move(*comm), log_));
  }
  absl::StatusOr<std::unique_ptr<SourceMemory>> MapSource(int device, const std::string& handle,
                                                          uint64_t bytes,
                                                          const std::string& session_tag) override {
    return inner_.MapSource(device, handle, bytes, session_tag);
  }
  absl::StatusOr<std::vector<std::string>> DeviceUuids() const override {
    return inner_.DeviceUuids();
  }

 private:
  class Recorded final : public RootCommunicator {
   public:
    Recorded(std::unique_ptr<RootCommunicator> inner, BroadcastLog* log)
        : inner_(std::move(inner)), log_(log) {}
    const std::string& unique_id() const override { return inner_->unique_id(); }
    int world_size() const override { return inner_->world_size(); }
    absl::StatusOr<uint64_t> StartBroadcastFrom(SlotMemory& slot, const void* base,
                                                const std::vector<BroadcastPiece>& pieces,
                                                absl::Time deadline) override {
      uint64_t bytes = 0;
      for (const BroadcastPiece& p : pieces) bytes += p.bytes();
      const absl::Time now = absl::Now();
      log_->Add(BroadcastRecord{now, base == slot.data(), bytes});
      auto ticket = inner_->StartBroadcastFrom(slot, base, pieces, deadline);
      if (ticket.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        started_[*ticket] = now;
      }
      return ticket;
    }
    absl::StatusOr<WireTiming> WaitBroadcast(uint64_t ticket, absl::Time deadline) override {
      auto done = inner_->WaitBroadcast(ticket, deadline);
      absl::Time started;
      {
        std::lock_guard<std::mutex> lock(mu_);
        started = started_[ticket];
        started_.erase(ticket);
      }
      if (done.ok()) absl::SleepFor(started + log_->hold() - absl::Now());
      return done;
    }
    absl::Status WarmUpAllReduce(absl::Time deadline) override {
      return inner_->WarmUpAllReduce(deadline);
    }
    void Abort(absl::string_view reason) override {
      log_->AddAbort(std::string(reason));
      inner_->Abort(reason);
    }
    std::string Describe() const override { return inner_->Describe(); }

   private:
    std::unique_ptr<RootCommunicator> inner_;
    BroadcastLog* log_;
    std::mutex mu_;
    std::map<uint64_t, absl::Time> started_;  // ticket -> when it was handed over
  };
  HostPlatform inner_;
  BroadcastLog* log_;
};

}  // namespace wsync

#endif  // WSYNC_TESTS_SERVICE_RECORDING_PLATFORM_H_

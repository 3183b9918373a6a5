#include "daemon/relay/ordered_receiver.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace wsync {

OrderedReceiver::OrderedReceiver(size_t streams) {
  for (size_t i = 0; i < streams; ++i) workers_.push_back(std::make_unique<Worker>());
  for (size_t i = 0; i < streams; ++i) {
    workers_[i]->thread = std::thread([this, i] { Work(i); });
  }
}

OrderedReceiver::~OrderedReceiver() {
  Drain();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w->thread.join();
}

absl::Status OrderedReceiver::Reset(uint64_t first_index) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_ != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(pending_, " bucket(s) of the last update not handed on yet"));
  }
  next_hand_on_ = first_index;
  next_add_ = first_index;
  return absl::OkStatus();
}

absl::Status OrderedReceiver::Add(Job job) {
  std::lock_guard<std::mutex> lock(mu_);
  if (job.stream >= workers_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("stream ", job.stream, " of ", workers_.size(), " stream(s)"));
  }
  // Indexes are handed on without gaps: exactly the next one is due.
  if (job.index != next_add_) {
    return absl::InvalidArgumentError(
        absl::StrCat("bucket ", job.index, " came where bucket ", next_add_, " was due"));
  }
  next_add_ = job.index + 1;
  ++pending_;
  workers_[job.stream]->queue.push_back(std::move(job));
  cv_.notify_all();
  return absl::OkStatus();
}

void OrderedReceiver::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return pending_ == 0; });
}

void OrderedReceiver::Work(size_t stream) {
  Worker& w = *workers_[stream];
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !w.queue.empty(); });
      if (w.queue.empty()) return;
      job = std::move(w.queue.front());
      w.queue.pop_front();
    }
    const absl::Status received = job.receive();
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return next_hand_on_ == job.index; });
    }
    job.hand_on(received);
    // What the job holds (the update it belongs to) goes before it counts as handed on: whoever
    // drains may then end that update's session.
    job = Job();
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++next_hand_on_;
      --pending_;
    }
    cv_.notify_all();
  }
}

}  // namespace wsync

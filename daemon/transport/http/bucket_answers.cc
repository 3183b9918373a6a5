#include "daemon/transport/http/bucket_answers.h"

#include <algorithm>

#include "absl/strings/str_join.h"
#include "daemon/core/engine_group_name.h"

namespace wsync {

absl::Status ReadEngineAnswer(const EngineAdapter& adapter,
                              const absl::StatusOr<HttpReply>& reply) {
  absl::Status s = reply.ok() ? adapter.CheckBucketReply(*reply) : reply.status();
  if (s.ok()) return s;
  return absl::Status(s.code(), RedactEngineGroupTokens(s.message()));
}

EngineAnswer WaitEngineAnswer(const EngineAdapter& adapter, ChannelCall& call,
                              UpdateChannel& channel, absl::Time deadline) {
  absl::StatusOr<HttpReply> reply = call.Wait(deadline);
  if (!reply.ok() && reply.status().code() == absl::StatusCode::kDeadlineExceeded &&
      call.ended_at() == absl::InfinitePast()) {
    channel.Cancel("the engine did not answer before the bucket deadline");
    return EngineAnswer{
        absl::DeadlineExceededError(
            "no answer to the update request before the bucket deadline (engine hung?)"),
        deadline};
  }
  absl::Status status = ReadEngineAnswer(adapter, reply);
  return EngineAnswer{status, status.ok() ? absl::InfinitePast() : call.ended_at()};
}

void BucketFailures::Add(absl::Time at, absl::Status status, std::string text) {
  causes_.push_back(Cause{at, std::move(status), std::move(text)});
}

void BucketFailures::Note(std::string text) { notes_.push_back(std::move(text)); }

absl::Status BucketFailures::Combined(const absl::Status& without_cause) const {
  if (empty()) return absl::OkStatus();
  std::vector<Cause> causes = causes_;
  std::stable_sort(causes.begin(), causes.end(),
                   [](const Cause& a, const Cause& b) { return a.at < b.at; });
  std::vector<std::string> texts;
  for (const Cause& c : causes) texts.push_back(c.text);
  texts.insert(texts.end(), notes_.begin(), notes_.end());
  const absl::StatusCode code =
      causes.empty() ? without_cause.code() : causes.front().status.code();
  return absl::Status(code, absl::StrJoin(texts, "; "));
}

}  // namespace wsync

#include "daemon/transport/relay/relay_transport.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "daemon/core/trainer_feeds.h"
#include "daemon/transport/relay/relay_binding.h"
#include "daemon/wire/manifest_proto.h"

namespace wsync {
namespace {

// One bucket on its way to every member: announced on each member's stream, broadcast on each
// member's pair, answered by each member once its bytes landed.
class RelayBucket final : public BucketHandle {
 public:
  struct Leg {
    size_t index = 0;  // the member's, in the group
    std::shared_ptr<RelayTransport::Member> member;
    RootCommunicator* pair = nullptr;  // the member's pair of the bucket's stream
    uint64_t request = 0;              // 0: nothing was sent
    uint64_t ticket = 0;
    absl::Status status;    // its first failure
    bool dropped = false;   // the quorum went on without it
    bool answered = false;  // its reply was taken (or given up on)
  };

  RelayBucket(std::vector<Leg> legs, std::shared_ptr<EngineDrops> drops,
              std::function<void(const absl::Status&)> on_failure, absl::Time deadline,
              bool launched)
      : legs_(std::move(legs)),
        drops_(std::move(drops)),
        on_failure_(std::move(on_failure)),
        deadline_(deadline),
        launched_(launched) {
    if (launched_) requests_written_at_ = absl::Now();
  }

  // A reply no one waits for is not kept for the rest of the subscription.
  ~RelayBucket() override {
    for (Leg& leg : legs_) {
      if (leg.request != 0 && !leg.answered) leg.member->channel->Forget(leg.request);
    }
  }

  bool launched() const override { return launched_; }
  std::optional<WireVolume> volume() const override { return volume_; }
  // Where the group may send deltas: what the bucket's legs sent against their dense bytes.
  void set_volume(WireVolume volume) { volume_ = volume; }

  absl::StatusOr<WireTiming> WaitReusable() override {
    WireTiming slowest;
    for (Leg& leg : legs_) {
      if (!leg.status.ok()) continue;
      absl::StatusOr<WireTiming> sent = leg.pair->WaitBroadcast(leg.ticket, deadline_);
      if (!sent.ok()) {
        Fail(leg, sent.status());
        continue;
      }
      slowest.wire_seconds = std::max(slowest.wire_seconds, sent->wire_seconds);
      slowest.idle_seconds = std::max(slowest.idle_seconds, sent->idle_seconds);
    }
    if (absl::Status s = Settle(); !s.ok()) return s;
    return slowest;
  }

  absl::Status WaitAnswered(std::vector<EngineOutcome>* outcomes) override {
    for (Leg& leg : legs_) {
      if (!leg.status.ok()) continue;
      leg.answered = true;
      absl::StatusOr<v1::RelayReply> reply = leg.member->channel->Await(leg.request, deadline_);
      absl::Status answered =
          reply.ok() ? ReplyStatus(*reply, absl::StrCat(leg.member->channel->Describe(),
                                                        " refused the bucket"))
                     : reply.status();
      if (!answered.ok()) Fail(leg, answered);
    }
    answered_at_ = absl::Now();
    absl::Status settled = Settle();
    // A member left out keeps its failure in the outcome: the group marks it as needing a
    // whole version.
    for (const Leg& leg : legs_) outcomes->push_back(EngineOutcome{leg.member->url, leg.status});
    return settled;
  }

  absl::Time requests_written_at() const override { return requests_written_at_; }
  absl::Time answered_at() const override { return answered_at_; }

 private:
  // The member's pair carries no more of this update: its next receive would pair with the
  // wrong broadcast. The group forms again before the next update (CheckFormed).
  void Fail(Leg& leg, absl::Status why) {
    leg.status = absl::Status(why.code(), absl::StrCat(leg.member->url, ": ", why.message()));
    leg.member->Break(leg.status.message());
  }

  // OK while every member that failed could be left out (the quorum still holds); else the
  // bucket's failure, reported once. Called after each wait, so a member that fails after
  // another was left out is counted too.
  absl::Status Settle() {
    if (!combined_.ok()) return combined_;
    std::map<size_t, absl::Status> failed;
    std::vector<std::string> why;
    for (const Leg& leg : legs_) {
      if (leg.status.ok() || leg.dropped) continue;
      failed.emplace(leg.index, leg.status);
      why.push_back(std::string(leg.status.message()));
    }
    if (failed.empty()) return absl::OkStatus();
    if (drops_ != nullptr && drops_->TryDrop(failed)) {
      for (Leg& leg : legs_) {
        if (leg.status.ok() || leg.dropped) continue;
        leg.dropped = true;
        WSYNC_LOG(Warning, "relay bucket: ", leg.status.message(),
                  "; the update goes on without it");
      }
      return absl::OkStatus();
    }
    combined_ = absl::UnavailableError(absl::StrJoin(why, "; "));
    if (on_failure_) on_failure_(combined_);
    return combined_;
  }

  std::vector<Leg> legs_;
  std::shared_ptr<EngineDrops> drops_;
  std::function<void(const absl::Status&)> on_failure_;
  const absl::Time deadline_;
  std::optional<WireVolume> volume_;
  const bool launched_;
  absl::Time requests_written_at_ = absl::InfinitePast();
  absl::Time answered_at_ = absl::InfinitePast();
  absl::Status combined_;  // the bucket's failure, once it failed
};

}  // namespace

void RelayTransport::Member::Break(absl::string_view why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.empty()) broken_ = why.empty() ? "broken" : std::string(why);
  }
  for (const auto& pair : pairs) pair->Abort(why);
}

std::string RelayTransport::Member::broken() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

RelayTransport::RelayTransport(TransportEnv env)
    : env_(std::move(env)), streams_([this] {
        // The devices the update's feeds are on (FeedsOf: the stream devices, or the group's),
        // so that each bucket goes out from the device it was pushed to.
        std::vector<int> devices;
        absl::StatusOr<std::vector<TrainerFeed>> feeds = FeedsOf(env_.spec, env_.platform);
        if (feeds.ok()) {
          for (const TrainerFeed& f : *feeds) devices.push_back(f.device);
        }
        if (devices.empty()) devices.push_back(env_.spec.device);
        return devices;
      }()) {}

RelayTransport::~RelayTransport() { Release("the transport was destroyed"); }

absl::StatusOr<std::shared_ptr<RelayTransport::Member>> RelayTransport::Join(
    EngineAdapter& adapter) {
  const std::string& url = adapter.endpoint().url;
  auto* binding = dynamic_cast<RelayBinding*>(adapter.used_binding());
  if (binding == nullptr) {
    return absl::InternalError(absl::StrCat(url, " speaks no relay data path"));
  }
  absl::StatusOr<std::shared_ptr<RelayChannel>> channel = binding->Channel();
  if (!channel.ok()) return channel.status();
  auto member = std::make_shared<Member>();
  member->url = url;
  member->channel = *channel;
  member->channel->ClearPairsLost();
  // The pairs one after another: the downstream takes the subscription's requests in order and
  // answers a join once it joined.
  for (size_t stream = 0; stream < streams_.size(); ++stream) {
    const int device = streams_[stream];
    absl::StatusOr<std::unique_ptr<RootCommunicator>> pair =
        env_.platform->CreateRootCommunicator(device, 2, env_.spec.nccl_library);
    if (!pair.ok()) {
      member->Break(pair.status().message());
      return absl::Status(pair.status().code(),
                          absl::StrCat("cannot make the pair for ", url, " on device ", device,
                                       ": ", pair.status().message()));
    }
    v1::RelayRequest join;
    join.mutable_join()->set_unique_id((*pair)->unique_id());
    join.mutable_join()->set_upstream_note(
        absl::StrCat(env_.spec.nccl_library.empty() ? "default NCCL" : env_.spec.nccl_library,
                     ", device ", device));
    join.mutable_join()->set_stream(static_cast<uint32_t>(stream));
    join.mutable_join()->set_streams(static_cast<uint32_t>(streams_.size()));
    absl::StatusOr<v1::RelayReply> reply =
        (*channel)->Call(std::move(join), absl::Now() + env_.options.registration_timeout);
    absl::Status joined =
        reply.ok()
            ? ReplyStatus(*reply, absl::StrCat((*channel)->Describe(),
                                               " could not join its pair of device ", device))
            : reply.status();
    if (!joined.ok()) {
      (*pair)->Abort(joined.message());
      member->Break(joined.message());
      // The downstream may still be joining: the stream's end tells it the pair is gone.
      return joined;
    }
    member->pairs.push_back(*std::move(pair));
  }
  return member;
}

// What the upstream may hold of the base and the version being staged, in host memory.
constexpr uint64_t kDeltaBaseCapBytes = uint64_t{64} << 30;

absl::Status RelayTransport::Form() {
  Release("forming again");
  if (deltas_ == nullptr && !env_.adapters.empty()) {
    auto* binding = dynamic_cast<RelayBinding*>(env_.adapters[0]->used_binding());
    std::lock_guard<std::mutex> lock(mu_);
    deltas_ = std::make_shared<RelayDeltas>(env_.platform, binding != nullptr && binding->deltas(),
                                            kDeltaBaseCapBytes);
  }
  const size_t n = env_.adapters.size();
  std::vector<absl::StatusOr<std::shared_ptr<Member>>> joined(n, absl::UnknownError("not joined"));
  {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < n; ++i) {
      threads.emplace_back([&, i] { joined[i] = Join(*env_.adapters[i]); });
    }
    for (std::thread& t : threads) t.join();
  }
  std::vector<std::string> failed, why;
  std::vector<std::shared_ptr<Member>> formed;
  for (size_t i = 0; i < n; ++i) {
    if (joined[i].ok()) {
      formed.push_back(*joined[i]);
    } else {
      failed.push_back(env_.adapters[i]->endpoint().url);
      why.push_back(std::string(joined[i].status().message()));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  failed_to_join_ = failed;
  if (!failed.empty()) {
    for (const auto& m : formed) m->Break("another member failed to join");
    return absl::UnavailableError(
        absl::StrCat("relay group '", env_.spec.name, "': ", absl::StrJoin(why, "; ")));
  }
  members_ = std::move(formed);
  return absl::OkStatus();
}

void RelayTransport::Release(absl::string_view why) {
  std::vector<std::shared_ptr<Member>> members;
  {
    std::lock_guard<std::mutex> lock(mu_);
    members.swap(members_);
    drops_.reset();
  }
  // A downstream joins a new pair when the group forms again; its old one is broken here.
  for (const auto& m : members) m->Break(why);
}

std::vector<absl::Status> RelayTransport::LeaveStale(const std::string& engine_group) {
  return std::vector<absl::Status>(env_.adapters.size(), absl::OkStatus());
}

absl::Status RelayTransport::CheckFormed() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& m : members_) {
    if (absl::Status open = m->channel->open(); !open.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("member ", m->url, " lost its pair: ", open.message()));
    }
    if (std::string why = m->broken(); !why.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("member ", m->url, "'s pair was broken: ", why));
    }
    if (std::string why = m->channel->pairs_lost(); !why.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("member ", m->url, " lost its pairs: ", why));
    }
  }
  return absl::OkStatus();
}

absl::Status RelayTransport::BeginUpdate(const UpdateInfo& update) {
  std::lock_guard<std::mutex> lock(mu_);
  if (deltas_ != nullptr) deltas_->Begin(update.version);
  drops_ = env_.engines_needed > 0
               ? std::make_shared<EngineDrops>(members_.size(), env_.engines_needed)
               : nullptr;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BucketHandle>> RelayTransport::StartBucket(
    const std::vector<BucketSource>& sources, const BucketManifest& manifest,
    const BucketContext& context, absl::Time deadline) {
  if (sources.size() != 1) {
    return absl::FailedPreconditionError(absl::StrCat("relay group '", env_.spec.name,
                                                      "': a bucket comes from one device, not ",
                                                      sources.size()));
  }
  const BucketSource& source = sources[0];
  const auto device_at = std::find(streams_.begin(), streams_.end(), source.device);
  if (device_at == streams_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("relay group '", env_.spec.name, "' sends from devices ",
                     absl::StrJoin(streams_, ", "), ", not device ", source.device));
  }
  const size_t stream = static_cast<size_t>(device_at - streams_.begin());
  const uint64_t span = manifest.span_bytes();
  // The downstream's local update verifies the bytes that landed against the trainer's CRC-32;
  // where the trainer sent none (pull mode) it is computed here, from the slot.
  uint32_t crc = context.checksum;
  if (context.checksum_kind != ChecksumKind::kCrc32) {
    if (source.base != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("relay group '", env_.spec.name,
                       "': a bucket read in place carries no CRC-32 for the downstreams to "
                       "check; push it (the relay's default) or copy it into a slot"));
    }
    absl::StatusOr<uint32_t> computed = source.slot->Checksum(span);
    if (!computed.ok()) return computed.status();
    crc = *computed;
  }
  v1::RelayRequest request;
  v1::RelayBucket* bucket = request.mutable_bucket();
  bucket->set_index(context.index);
  bucket->set_last(context.last);
  ManifestToTensorSpecs(manifest, bucket->mutable_tensors());
  bucket->set_checksum(crc);
  bucket->set_stream(static_cast<uint32_t>(stream));

  std::vector<std::shared_ptr<Member>> members;
  std::shared_ptr<EngineDrops> drops;
  std::shared_ptr<RelayDeltas> deltas;
  {
    std::lock_guard<std::mutex> lock(mu_);
    members = members_;
    drops = drops_;
    deltas = deltas_;
  }
  if (members.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("relay group '", env_.spec.name, "' is not formed"));
  }
  const void* base = source.base != nullptr ? source.base : source.slot->data();
  const std::vector<BroadcastPiece> pieces = {BroadcastPiece{0, span, DType::kUint8}};
  // The bucket as a delta, for the members whose resident copy holds the base (docs/DELTA.md).
  std::vector<std::string> held;
  for (const auto& m : members) held.push_back(m->channel->resident_version());
  RelayDeltas::Frame frame;
  if (deltas != nullptr) frame = deltas->Encode(source, manifest, span, context.index, crc, held);
  v1::RelayRequest delta_request;
  if (frame.slot != nullptr) {
    delta_request = request;
    delta_request.mutable_bucket()->set_delta_base(frame.base);
    delta_request.mutable_bucket()->set_delta_bytes(frame.bytes);
  }
  const std::vector<BroadcastPiece> frame_pieces = {BroadcastPiece{0, frame.bytes, DType::kUint8}};
  std::vector<RelayBucket::Leg> legs;
  WireVolume volume;
  volume.elements_compared = frame.elements_compared;
  volume.elements_changed = frame.elements_changed;
  bool any_sent = false;
  for (size_t i = 0; i < members.size(); ++i) {
    RelayBucket::Leg leg;
    leg.index = i;
    leg.member = members[i];
    leg.pair = leg.member->pairs.at(stream).get();
    if (drops != nullptr && !drops->WhyDropped(i).ok()) continue;  // left out earlier
    const bool as_delta = frame.slot != nullptr && held[i] == frame.base;
    absl::StatusOr<uint64_t> sent = leg.member->channel->Send(as_delta ? delta_request : request);
    if (!sent.ok()) {
      leg.status = absl::Status(sent.status().code(),
                                absl::StrCat(leg.member->url, ": ", sent.status().message()));
      leg.member->Break(leg.status.message());
      legs.push_back(std::move(leg));
      continue;
    }
    any_sent = true;
    leg.request = *sent;
    absl::StatusOr<uint64_t> ticket =
        as_delta
            ? leg.pair->StartBroadcastFrom(*frame.slot, frame.slot->data(), frame_pieces, deadline)
            : leg.pair->StartBroadcastFrom(*source.slot, base, pieces, deadline);
    if (!ticket.ok()) {
      leg.status = absl::Status(ticket.status().code(),
                                absl::StrCat(leg.member->url, ": ", ticket.status().message()));
      leg.member->Break(leg.status.message());
    } else {
      leg.ticket = *ticket;
      // Only a leg whose bytes went out counts.
      if (deltas != nullptr) deltas->Count(span, as_delta ? frame.bytes : span);
      volume.dense_bytes += span;
      volume.sent_bytes += as_delta ? frame.bytes : span;
    }
    legs.push_back(std::move(leg));
  }
  if (!any_sent) {
    std::vector<std::string> why;
    for (const auto& leg : legs) why.push_back(std::string(leg.status.message()));
    return absl::UnavailableError(
        absl::StrCat("relay group '", env_.spec.name,
                     "': no member took the bucket: ", absl::StrJoin(why, "; ")));
  }
  auto handle = std::make_unique<RelayBucket>(std::move(legs), std::move(drops),
                                              env_.on_bucket_failed, deadline, /*launched=*/true);
  if (deltas != nullptr && deltas->enabled()) handle->set_volume(volume);
  return handle;
}

void RelayTransport::EndUpdate(absl::string_view why) {
  std::shared_ptr<RelayDeltas> deltas;
  {
    std::lock_guard<std::mutex> lock(mu_);
    deltas = deltas_;
  }
  if (deltas == nullptr) return;
  if (std::string summary = deltas->Summary(); !summary.empty()) {
    WSYNC_LOG(Info, "relay group '", env_.spec.name, "' (", why, "): ", summary);
  }
}

uint32_t RelayTransport::world_size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<uint32_t>(members_.size()) + 1;
}

std::vector<std::string> RelayTransport::EnginesFailedToJoin() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_to_join_;
}

std::map<std::string, absl::Status> RelayTransport::DroppedEngines() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, absl::Status> out;
  if (drops_ == nullptr) return out;
  for (const auto& [i, why] : drops_->all()) {
    if (i < members_.size()) out.emplace(members_[i]->url, why);
  }
  return out;
}

std::string RelayTransport::Describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> members;
  for (const auto& m : members_) members.push_back(m->channel->Describe());
  return absl::StrCat("relay to ", members.size(), " downstream(s) (", absl::StrJoin(members, ", "),
                      ") from device", streams_.size() > 1 ? "s " : " ",
                      absl::StrJoin(streams_, ", "));
}

}  // namespace wsync

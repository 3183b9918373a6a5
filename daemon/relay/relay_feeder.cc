#include "daemon/relay/relay_feeder.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "daemon/core/peer_text.h"
#include "daemon/core/trainer_feeds.h"
#include "daemon/relay/relay_channel.h"
#include "daemon/relay/relay_frames.h"
#include "daemon/relay/subscription.h"
#include "daemon/wire/manifest_proto.h"
#include "grpcpp/grpcpp.h"
#include "wsync/v1/relay.grpc.pb.h"

namespace wsync {
namespace {

absl::StatusOr<std::string> ReadWhole(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the ", what, " ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

v1::RelayReply ReplyOf(const absl::Status& s) {
  v1::RelayReply reply;
  reply.set_code(static_cast<int>(s.code()));
  reply.set_message(std::string(s.message()));
  return reply;
}

}  // namespace

absl::Status ValidateRelayFeed(const RelayFeedOptions& o) {
  if (o.upstream.empty() || o.upstream.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("relay feed: upstream must be the upstream wsyncd's --listen host:port, not '",
                     o.upstream, "'"));
  }
  if (o.group.empty()) return absl::InvalidArgumentError("relay feed: no upstream group named");
  if (o.token_file.empty() || o.ca_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("relay feed from ", o.upstream,
                     ": a relay subscription needs TLS and a relay token "
                     "(token_file and ca_file)"));
  }
  if (!o.node.empty()) WSYNC_RETURN_IF_ERROR(CheckRelayNodeName(o.node));
  return absl::OkStatus();
}

absl::Status SetRelayFeedKey(const std::string& key, const std::string& value,
                             RelayFeedOptions* o) {
  std::string* fields[] = {&o->upstream,   &o->group,   &o->local_group, &o->node,
                           &o->token_file, &o->ca_file, &o->server_name};
  const char* names[] = {"upstream",   "group",   "local_group", "node",
                         "token_file", "ca_file", "server_name"};
  for (size_t i = 0; i < std::size(names); ++i) {
    if (key == names[i]) {
      *fields[i] = value;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown relay feed key \"", key,
                                                 "\" (known: upstream, group, local_group, node, "
                                                 "token_file, ca_file, server_name)"));
}

absl::StatusOr<RelayFeedOptions> ParseRelayFeedFlag(const std::string& text) {
  RelayFeedOptions o;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    const size_t eq = part.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--relay-feed ", text, ": '", part, "' is not KEY=VALUE"));
    }
    if (absl::Status s =
            SetRelayFeedKey(std::string(part.substr(0, eq)), std::string(part.substr(eq + 1)), &o);
        !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--relay-feed ", text, ": ", s.message()));
    }
  }
  if (absl::Status s = ValidateRelayFeed(o); !s.ok()) return s;
  return o;
}

// One subscription: its stream, its pair with the upstream and the update it feeds.
class RelayFeeder::Subscription final : public UpdateEvents {
 public:
  Subscription(DaemonCore* core, const RelayFeedOptions& options, std::string node)
      : core_(core), options_(options), node_(std::move(node)) {}
  ~Subscription() override { EndUpdate(absl::UnavailableError("the subscription ended")); }

  // Serves the stream until it ends; returns why.
  absl::Status Serve(grpc::ClientReaderWriter<v1::RelayUp, v1::RelayDown>* stream,
                     RelayFeeder* feeder);

  // UpdateEvents, from the local update's threads.
  void BucketDone(uint64_t, uint64_t, uint32_t, const BucketTiming&) override {}
  void SourcesRead(uint64_t) override {}
  void SlotFree(uint32_t slot) override {
    std::lock_guard<std::mutex> lock(mu_);
    free_.insert(slot);
    cv_.notify_all();
  }
  void Failed(const UpdateOutcome& outcome) override {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = outcome.status.ok() ? absl::AbortedError("the local update failed") : outcome.status;
    cv_.notify_all();
  }

 private:
  absl::StatusOr<int> LocalDevice() const;
  v1::RelayReply Handle(const v1::RelayRequest& request, RelayFeeder* feeder);
  absl::Status Join(const v1::RelayJoin& join);
  absl::Status Begin(const v1::RelayBegin& begin);
  absl::Status Bucket(const v1::RelayBucket& bucket);
  v1::RelayReply Commit(RelayFeeder* feeder);
  // Ends the open update, if any, without its commit.
  void EndUpdate(const absl::Status& why);
  // The pair no longer matches the upstream's broadcasts: dropped, so that the next update
  // forms a new one.
  void BreakPair(absl::string_view why);

  DaemonCore* const core_;
  const RelayFeedOptions& options_;
  const std::string node_;
  std::unique_ptr<PeerCommunicator> pair_;
  int pair_device_ = 0;
  std::string session_id_;
  std::unique_ptr<UpdateMember> update_;
  std::vector<SlotMemory*> slots_;
  std::string version_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<uint32_t> free_;  // guarded by mu_
  absl::Status failed_;      // guarded by mu_
};

absl::StatusOr<int> RelayFeeder::Subscription::LocalDevice() const {
  WSYNC_ASSIGN_OR_RETURN(GroupSnapshot group, core_->GetGroup(options_.local_group));
  WSYNC_ASSIGN_OR_RETURN(std::vector<TrainerFeed> feeds, FeedsOf(group.spec, &core_->platform()));
  if (feeds.size() != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("local group '", options_.local_group, "' is fed from ", feeds.size(),
                     " GPUs; a relay feed lands on one (give the group engines on one GPU, or a "
                     "broadcast transport)"));
  }
  return feeds[0].device;
}

absl::Status RelayFeeder::Subscription::Join(const v1::RelayJoin& join) {
  BreakPair("the upstream formed a new pair");
  WSYNC_ASSIGN_OR_RETURN(int device, LocalDevice());
  absl::StatusOr<std::unique_ptr<PeerCommunicator>> joined =
      core_->mutable_platform()->JoinCommunicator(device, join.unique_id(), 1, 2, "",
                                                  absl::Now() + core_->options().bucket_timeout);
  if (!joined.ok()) return joined.status();
  pair_ = *std::move(joined);
  pair_device_ = device;
  WSYNC_LOG(Info, "relay: joined the pair of group '", options_.group, "' from ", options_.upstream,
            " on device ", device, " (", pair_->Describe(), ")");
  return absl::OkStatus();
}

absl::Status RelayFeeder::Subscription::Begin(const v1::RelayBegin& begin) {
  // A begin while an update is open: the upstream gave that one up.
  EndUpdate(absl::AbortedError("the upstream began another update"));
  WSYNC_RETURN_IF_ERROR(CheckPeerLabel("the update's version", begin.version(), kMaxRelayText));
  if (pair_ == nullptr) {
    return absl::FailedPreconditionError("no pair with the upstream: the group must form again");
  }
  WSYNC_ASSIGN_OR_RETURN(int device, LocalDevice());
  if (device != pair_device_) {
    return absl::FailedPreconditionError(
        absl::StrCat("local group '", options_.local_group, "' is now fed from device ", device,
                     " but the pair is on device ", pair_device_, ": the group must form again"));
  }
  WSYNC_ASSIGN_OR_RETURN(SessionView session,
                         core_->OpenSession(device, absl::StrCat("relay from ", options_.upstream,
                                                                 " group ", options_.group)));
  absl::StatusOr<std::unique_ptr<UpdateMember>> member =
      core_->BeginUpdate(session.id, options_.local_group, begin.version(), this);
  if (!member.ok()) {
    (void)core_->CloseSession(session.id);
    return member.status();
  }
  session_id_ = session.id;
  slots_ = session.slots;
  update_ = *std::move(member);
  version_ = begin.version();
  std::lock_guard<std::mutex> lock(mu_);
  free_.clear();
  for (uint32_t i = 0; i < slots_.size(); ++i) free_.insert(i);
  failed_ = absl::OkStatus();
  return absl::OkStatus();
}

absl::Status RelayFeeder::Subscription::Bucket(const v1::RelayBucket& bucket) {
  // Every refusal here comes before a byte is received, and breaks the pair: the upstream's
  // broadcast of this bucket is on its way and would land in the next receive.
  auto refuse = [&](absl::Status s) {
    BreakPair(s.message());
    return s;
  };
  if (update_ == nullptr) {
    return refuse(absl::FailedPreconditionError("a bucket with no update open"));
  }
  if (pair_ == nullptr) return refuse(absl::FailedPreconditionError("a bucket with no pair"));
  absl::StatusOr<BucketManifest> manifest =
      ReadRelayBucket(bucket, slots_.empty() ? 0 : slots_[0]->bytes());
  if (!manifest.ok()) return refuse(manifest.status());
  uint32_t slot = 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    const absl::Time deadline = absl::Now() + core_->options().bucket_timeout;
    while (free_.empty() && failed_.ok()) {
      if (cv_.wait_until(lock, absl::ToChronoTime(deadline)) == std::cv_status::timeout &&
          free_.empty()) {
        lock.unlock();
        return refuse(absl::DeadlineExceededError(absl::StrCat(
            "no slot came free for bucket ", bucket.index(), " within the bucket timeout")));
      }
    }
    if (!failed_.ok()) {
      absl::Status failed = failed_;
      lock.unlock();
      return refuse(failed);
    }
    slot = *free_.begin();
    free_.erase(free_.begin());
  }
  const uint64_t span = manifest->span_bytes();
  absl::Status received =
      pair_->ReceiveInto(*slots_[slot], {BroadcastPiece{0, span, DType::kUint8}},
                         absl::Now() + core_->options().bucket_timeout);
  if (!received.ok()) {
    pair_.reset();
    return received;
  }
  return update_->SubmitBucket(slot, *std::move(manifest), bucket.checksum(), bucket.index(), {},
                               bucket.last(), ChecksumKind::kCrc32);
}

v1::RelayReply RelayFeeder::Subscription::Commit(RelayFeeder* feeder) {
  if (update_ == nullptr) {
    return ReplyOf(absl::FailedPreconditionError("a commit with no update open"));
  }
  UpdateOutcome outcome = update_->Commit();
  update_.reset();
  (void)core_->CloseSession(session_id_);
  session_id_.clear();
  v1::RelayReply reply = ReplyOf(outcome.status);
  for (const EngineOutcome& e : outcome.engines) {
    v1::EngineResult* r = reply.add_engines();
    r->set_engine(e.engine);
    r->set_ok(e.status.ok());
    r->set_code(static_cast<int>(e.status.code()));
    r->set_message(std::string(e.status.message()));
  }
  std::lock_guard<std::mutex> lock(feeder->mu_);
  if (outcome.status.ok()) {
    feeder->view_.last_version = version_;
    feeder->view_.last_commit = absl::Now();
    feeder->view_.last_error.clear();
    ++feeder->view_.updates_committed;
  } else {
    feeder->view_.last_error = std::string(outcome.status.message());
  }
  return reply;
}

void RelayFeeder::Subscription::EndUpdate(const absl::Status& why) {
  if (update_ != nullptr) {
    WSYNC_LOG(Warning, "relay: the update of '", options_.local_group, "' to version '", version_,
              "' is aborted: ", why.message());
    (void)update_->Abort(why);
    update_.reset();
  }
  if (!session_id_.empty()) {
    (void)core_->CloseSession(session_id_);
    session_id_.clear();
  }
}

void RelayFeeder::Subscription::BreakPair(absl::string_view why) {
  if (pair_ == nullptr) return;
  pair_->Abort(why);
  pair_.reset();
}

v1::RelayReply RelayFeeder::Subscription::Handle(const v1::RelayRequest& request,
                                                 RelayFeeder* feeder) {
  switch (request.kind_case()) {
    case v1::RelayRequest::kJoin:
      return ReplyOf(Join(request.join()));
    case v1::RelayRequest::kBegin:
      return ReplyOf(Begin(request.begin()));
    case v1::RelayRequest::kBucket:
      return ReplyOf(Bucket(request.bucket()));
    case v1::RelayRequest::kCommit:
      return Commit(feeder);
    case v1::RelayRequest::kAbort:
      EndUpdate(absl::AbortedError(absl::StrCat("the upstream aborted it: ",
                                                SanitizePeerText(request.abort().reason(), 512))));
      return ReplyOf(absl::OkStatus());
    default:
      return ReplyOf(absl::InvalidArgumentError("a relay request of no kind this wsyncd knows"));
  }
}

absl::Status RelayFeeder::Subscription::Serve(
    grpc::ClientReaderWriter<v1::RelayUp, v1::RelayDown>* stream, RelayFeeder* feeder) {
  v1::RelayDown down;
  while (stream->Read(&down)) {
    if (!down.has_request()) {
      return absl::InvalidArgumentError("the upstream sent something other than a request");
    }
    v1::RelayReply reply = Handle(down.request(), feeder);
    reply.set_id(down.request().id());
    v1::RelayUp up;
    *up.mutable_reply() = std::move(reply);
    if (!stream->Write(up)) break;
  }
  return absl::UnavailableError("the subscription's stream ended");
}

RelayFeeder::RelayFeeder(DaemonCore* core, RelayFeedOptions options)
    : core_(core), options_([&] {
        if (options.local_group.empty()) options.local_group = options.group;
        if (options.node.empty()) options.node = HostName();
        return std::move(options);
      }()) {
  view_.options = options_;
}

RelayFeeder::~RelayFeeder() { Stop(); }

void RelayFeeder::Start() {
  thread_ = std::thread([this] { Run(); });
}

void RelayFeeder::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (context_ != nullptr) context_->TryCancel();
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

RelayFeeder::View RelayFeeder::Status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_;
}

void RelayFeeder::Run() {
  const std::string where = absl::StrCat("group '", options_.group, "' of ", options_.upstream,
                                         " into local group '", options_.local_group, "'");
  for (;;) {
    absl::Status ended;
    {
      auto token = ReadWhole(options_.token_file, "relay token file");
      auto ca = ReadWhole(options_.ca_file, "relay CA file");
      if (!token.ok() || !ca.ok()) {
        ended = token.ok() ? ca.status() : token.status();
      } else {
        std::string secret(*token);
        while (!secret.empty() &&
               (secret.back() == '\n' || secret.back() == '\r' || secret.back() == ' ')) {
          secret.pop_back();
        }
        grpc::SslCredentialsOptions ssl;
        ssl.pem_root_certs = *ca;
        grpc::ChannelArguments args;
        if (!options_.server_name.empty()) args.SetSslTargetNameOverride(options_.server_name);
        // Each attempt connects afresh: gRPC's shared subchannels would carry the backoff of the
        // failed attempts over (up to minutes), so an upstream back on its port would wait.
        args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
        args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 500);
        args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
        auto channel = grpc::CreateCustomChannel(
            options_.upstream,
            grpc::CompositeChannelCredentials(grpc::SslCredentials(ssl),
                                              grpc::AccessTokenCredentials(secret)),
            args);
        auto stub = v1::Relay::NewStub(channel);
        grpc::ClientContext context;
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (stopping_) return;
          context_ = &context;
        }
        auto stream = stub->Subscribe(&context);
        v1::RelayUp up;
        v1::RelaySubscribe* want = up.mutable_subscribe();
        want->set_protocol_version(kRelayProtocolVersion);
        want->set_platform(std::string(core_->platform().name()));
        want->set_nccl_version(core_->platform().DefaultNcclVersion());
        want->set_node(options_.node);
        want->add_groups(options_.group);
        want->set_slot_bytes(core_->options().slot_bytes);
        absl::StatusOr<GroupSnapshot> local = core_->GetGroup(options_.local_group);
        if (local.ok()) {
          want->mutable_bucket_rules()->set_one_dtype(local->bucket_rules.one_dtype);
          want->mutable_bucket_rules()->set_close_after_bytes(
              local->bucket_rules.close_after_bytes);
        }
        v1::RelayDown admitted;
        if (!local.ok()) {
          ended = local.status();
          context.TryCancel();
        } else if (stream->Write(up) && stream->Read(&admitted) && admitted.has_admitted()) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            view_.subscribed = true;
            view_.subscriber_id = admitted.admitted().subscriber_id();
          }
          WSYNC_LOG(Info, "relay: subscribed to ", where, " as ", options_.node, " (",
                    admitted.admitted().subscriber_id(), ")");
          Subscription subscription(core_, options_, options_.node);
          ended = subscription.Serve(stream.get(), this);
          context.TryCancel();
        }
        grpc::Status finished = stream->Finish();
        if (!finished.ok()) {
          ended = absl::UnavailableError(
              absl::StrCat("the upstream ended the subscription: ", finished.error_message()));
        }
        std::lock_guard<std::mutex> lock(mu_);
        context_ = nullptr;
      }
    }
    std::unique_lock<std::mutex> lock(mu_);
    view_.subscribed = false;
    view_.last_error = std::string(ended.message());
    if (stopping_) return;
    WSYNC_LOG(Warning, "relay: the subscription to ", where, " ended: ", ended.message(),
              "; subscribing again in ", absl::FormatDuration(options_.retry));
    cv_.wait_for(lock, absl::ToChronoMilliseconds(options_.retry), [&] { return stopping_; });
    if (stopping_) return;
  }
}

void RelayFeeders::Start(DaemonCore* core, const std::vector<RelayFeedOptions>& feeds) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const RelayFeedOptions& feed : feeds) {
    feeders_.push_back(std::make_unique<RelayFeeder>(core, feed));
    feeders_.back()->Start();
  }
}

void RelayFeeders::Stop() {
  std::vector<std::unique_ptr<RelayFeeder>> feeders;
  {
    std::lock_guard<std::mutex> lock(mu_);
    feeders.swap(feeders_);
  }
  for (auto& f : feeders) f->Stop();
}

std::vector<RelayFeeder::View> RelayFeeders::Views() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RelayFeeder::View> out;
  for (const auto& f : feeders_) out.push_back(f->Status());
  return out;
}

}  // namespace wsync

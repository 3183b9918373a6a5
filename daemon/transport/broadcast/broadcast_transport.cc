#include "daemon/transport/broadcast/broadcast_transport.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "daemon/core/engine_group_name.h"
#include "daemon/transport/broadcast/broadcast_binding.h"
#include "daemon/transport/broadcast/bucket_transfer.h"

namespace wsync {
namespace {

// Runs `fn` on every engine's broadcast binding at once; one status per engine, in engine order.
std::vector<absl::Status> OnEachBinding(const std::vector<EngineAdapter*>& adapters,
                                        const std::function<absl::Status(BroadcastBinding&)>& fn) {
  return OnEachEngine(adapters, [&](EngineAdapter& a) -> absl::Status {
    WSYNC_ASSIGN_OR_RETURN(BroadcastBinding * binding, BroadcastBindingOf(a));
    return fn(*binding);
  });
}

}  // namespace

BroadcastTransport::BroadcastTransport(TransportEnv env,
                                       std::unique_ptr<RendezvousStrategy> rendezvous)
    : env_(std::move(env)),
      engine_group_(env_.engine_group.empty() ? env_.spec.name : env_.engine_group),
      rendezvous_(std::move(rendezvous)) {
  std::vector<std::string> parts;
  for (EngineAdapter* a : env_.adapters) {
    const EngineEndpoint& e = a->endpoint();
    urls_.push_back(e.url);
    parts.push_back(e.ranks == 1 ? absl::StrCat("rank ", e.rank_offset, " = ", e.url)
                                 : absl::StrCat("ranks ", e.rank_offset, "-",
                                                e.rank_offset + e.ranks - 1, " = ", e.url));
    world_size_ += e.ranks;
  }
  rank_map_ = absl::StrJoin(parts, ", ");
}

BroadcastTransport::~BroadcastTransport() {
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseLocked("group torn down");
}

absl::Status BroadcastTransport::Form() {
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseLocked("forming afresh");
  failed_to_join_.clear();
  auto fail = [&](absl::Status s) {
    ReleaseLocked("formation failed");
    return s;
  };
  auto comm = env_.platform->CreateRootCommunicator(env_.spec.device, static_cast<int>(world_size_),
                                                    env_.spec.nccl_library);
  if (!comm.ok()) return fail(comm.status());
  collective_ = std::make_shared<FormedCollective>(std::move(*comm));
  auto rdv = rendezvous_->Open(engine_group_, collective_->comm->unique_id(), world_size_);
  if (!rdv.ok()) return fail(rdv.status());
  // vLLM's ranks finish their init request only after ncclCommInitRank and a one-element
  // all-reduce with rank 0 (docs/engines/vllm.md), so rank 0 joins that all-reduce while the
  // requests are in flight; torch's engines connect lazily, at their first broadcast.
  const bool warm_up = rendezvous_->mode() != RendezvousMode::kTorchStore;
  absl::Status warmed;
  std::thread warm_up_thread;
  if (warm_up) {
    warm_up_thread = std::thread([&, comm = collective_->comm] {
      warmed = comm->WarmUpAllReduce(absl::Now() + env_.options.registration_timeout);
    });
  }
  std::vector<absl::Status> inits =
      OnEachBinding(env_.adapters, [&](BroadcastBinding& b) { return b.InitGroup(*rdv); });
  std::vector<std::string> errors;
  absl::StatusCode code = absl::StatusCode::kOk;
  for (size_t i = 0; i < inits.size(); ++i) {
    const absl::Status& s = inits[i];
    if (s.ok()) continue;
    failed_to_join_.push_back(urls_[i]);
    // An engine's refusal may quote the group's name (LMDeploy: "group 'G' already
    // initialized"), and it reaches logs and callers.
    errors.push_back(RedactEngineGroupTokens(s.message()));
    if (code == absl::StatusCode::kOk) code = s.code();
  }
  if (warm_up) {
    // An engine that failed to join leaves the all-reduce waiting for it: abort it.
    if (!errors.empty()) collective_->Fail("engines failed to join");
    warm_up_thread.join();
  }
  if (!errors.empty()) {
    // Engines that did join must drop the group, or they refuse the next init under this name.
    for (size_t i = 0; i < inits.size(); ++i) {
      if (!inits[i].ok()) continue;
      if (auto binding = BroadcastBindingOf(*env_.adapters[i]); binding.ok()) {
        (void)(*binding)->DestroyGroup(engine_group_);
      }
    }
    return fail(absl::Status(
        code, absl::StrCat("group '", env_.spec.name,
                           "': engines failed to join: ", absl::StrJoin(errors, "; "))));
  }
  if (!warmed.ok()) {
    return fail(absl::Status(warmed.code(), absl::StrCat("group '", env_.spec.name,
                                                         "': the warm-up all-reduce after the "
                                                         "engines' init failed: ",
                                                         warmed.message())));
  }
  if (absl::Status s = rendezvous_->WaitJoined(absl::Now() + env_.options.registration_timeout);
      !s.ok()) {
    return fail(s);
  }
  return absl::OkStatus();
}

void BroadcastTransport::Disband() {
  // Before the communicator goes: an answer arriving later would abort it.
  channels_.CancelAll("the group is disbanded");
  std::shared_ptr<FormedCollective> collective;
  {
    std::lock_guard<std::mutex> lock(mu_);
    collective = std::move(collective_);
  }
  const bool engines_leave =
      std::all_of(env_.adapters.begin(), env_.adapters.end(), [](EngineAdapter* a) {
        auto binding = BroadcastBindingOf(*a);
        return binding.ok() && (*binding)->LeavesGroup();
      });
  // An engine that keeps its side would leave rank 0's finalize waiting for it forever: abort.
  if (collective && !engines_leave) collective->Fail("the group is disbanded");
  // torch finalizes an engine's NCCL communicator together with its peers, so the engines'
  // destroy calls block until rank 0 finalizes too: both run at once. (No bucket holds the
  // formation here: the group disbands only between updates.) The communicator's teardown is
  // waited for a bounded time; one that outlasts it is left to finish on its own thread, holding
  // what it holds, rather than wedging the caller.
  auto finalized = std::make_shared<std::promise<void>>();
  std::future<void> done = finalized->get_future();
  std::thread finalize([collective = std::move(collective), finalized]() mutable {
    collective.reset();
    finalized->set_value();
  });
  std::vector<absl::Status> results = OnEachBinding(
      env_.adapters, [&](BroadcastBinding& b) { return b.DestroyGroup(engine_group_); });
  if (done.wait_for(std::chrono::seconds(kTeardownSeconds)) == std::future_status::ready) {
    finalize.join();
  } else {
    WSYNC_LOG(Error, "group ", env_.spec.name, ": rank 0's communicator did not tear down within ",
              kTeardownSeconds, " s; left to finish in the background");
    finalize.detach();
  }
  for (const absl::Status& s : results) {
    if (!s.ok()) {
      WSYNC_LOG(Warning, "group ", env_.spec.name,
                ": destroy: ", RedactEngineGroupTokens(s.message()));
    }
  }
}

std::vector<absl::Status> BroadcastTransport::LeaveStale(const std::string& engine_group) {
  // No rank 0 takes part: the earlier wsyncd's communicator died with it.
  return OnEachBinding(env_.adapters,
                       [&](BroadcastBinding& b) { return b.DestroyGroup(engine_group); });
}

void BroadcastTransport::Release(absl::string_view why) {
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseLocked(why);
}

void BroadcastTransport::ReleaseLocked(absl::string_view why) {
  // Before the communicator goes: an answer arriving later would abort it.
  channels_.CancelAll(why);
  if (collective_) collective_->Fail(why);
  collective_.reset();
  rendezvous_->Close();
}

absl::Status BroadcastTransport::CheckFormed() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!collective_) return absl::FailedPreconditionError("the group has no communicator");
  return rendezvous_->CheckJoined();
}

absl::Status BroadcastTransport::BeginUpdate(const UpdateInfo&) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!collective_) {
    return absl::FailedPreconditionError(
        absl::StrCat("group '", env_.spec.name, "' has no communicator; form it first"));
  }
  channels_.Open(urls_);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BucketHandle>> BroadcastTransport::StartBucket(
    const std::vector<BucketSource>& sources, const BucketManifest& manifest,
    const BucketContext& context, absl::Time deadline) {
  if (sources.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("group '", env_.spec.name,
                                                   "': the broadcast transport sends a bucket from "
                                                   "one source (rank 0's slot), not ",
                                                   sources.size()));
  }
  std::shared_ptr<FormedCollective> collective;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!collective_) {
      return absl::FailedPreconditionError(
          absl::StrCat("group '", env_.spec.name, "' has no communicator"));
    }
    collective = collective_;
  }
  std::vector<std::shared_ptr<UpdateChannel>> channels = channels_.Current();
  if (channels.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("group '", env_.spec.name, "': no update is open on the transport"));
  }
  auto transfer = BucketTransfer::Start(
      env_.adapters, channels, std::move(collective), sources.front(), manifest, context,
      engine_group_, rank_map_, deadline, env_.on_bucket_failed, [this] { return Diagnose(); });
  if (!transfer.ok()) return transfer.status();
  return std::unique_ptr<BucketHandle>(std::move(*transfer));
}

void BroadcastTransport::EndUpdate(absl::string_view why) { channels_.CancelAll(why); }

std::string BroadcastTransport::Diagnose() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rendezvous_->Diagnose();
}

std::vector<std::string> BroadcastTransport::EnginesFailedToJoin() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_to_join_;
}

std::string BroadcastTransport::rendezvous() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rendezvous_->address();
}

std::string BroadcastTransport::Describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string store = rendezvous_->address();
  return absl::StrCat(
      "broadcast as '", ShownEngineGroup(engine_group_), "', world ", world_size_, ", ",
      store.empty() ? std::string("unique id in the init request") : absl::StrCat("store ", store),
      ", ", collective_ ? collective_->comm->Describe() : std::string("no communicator"), ", ",
      rank_map_);
}

}  // namespace wsync

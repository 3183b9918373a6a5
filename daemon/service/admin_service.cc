#include "daemon/service/admin_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/service/group_spec_proto.h"
#include "daemon/service/status_mapping.h"
#include "daemon/wire/wire_volume_proto.h"

namespace wsync {

grpc::Status AdminService::CreateGroup(grpc::ServerContext* context,
                                       const v1::CreateGroupRequest* req, v1::GroupInfo* resp) {
  WSYNC_REQUIRE_ROLE(auth_, context, Role::kAdmin, "CreateGroup");
  auto spec = GroupSpecFromProto(req->spec());
  if (!spec.ok()) return ToGrpcStatus(spec.status());
  auto group = core_->CreateGroup(*spec);
  if (!group.ok()) return ToGrpcStatus(group.status());
  GroupToProto(*group, resp);
  return grpc::Status::OK;
}

grpc::Status AdminService::ListGroups(grpc::ServerContext* context, const v1::ListGroupsRequest*,
                                      v1::ListGroupsResponse* resp) {
  WSYNC_REQUIRE_ROLE(auth_, context, Role::kTrainer, "ListGroups");
  for (const GroupSnapshot& g : core_->ListGroups()) GroupToProto(g, resp->add_groups());
  return grpc::Status::OK;
}

grpc::Status AdminService::GetGroup(grpc::ServerContext* context, const v1::GetGroupRequest* req,
                                    v1::GroupInfo* resp) {
  WSYNC_REQUIRE_ROLE(auth_, context, Role::kTrainer, "GetGroup");
  auto group = core_->GetGroup(req->name());
  if (!group.ok()) return ToGrpcStatus(group.status());
  GroupToProto(*group, resp);
  return grpc::Status::OK;
}

grpc::Status AdminService::DestroyGroup(grpc::ServerContext* context,
                                        const v1::DestroyGroupRequest* req,
                                        v1::DestroyGroupResponse*) {
  WSYNC_REQUIRE_ROLE(auth_, context, Role::kAdmin, "DestroyGroup");
  return ToGrpcStatus(core_->DestroyGroup(req->name()));
}

grpc::Status AdminService::ListEngines(grpc::ServerContext* context, const v1::ListEnginesRequest*,
                                       v1::ListEnginesResponse* resp) {
  WSYNC_REQUIRE_ROLE(auth_, context, Role::kTrainer, "ListEngines");
  for (const EngineRow& row : core_->ListEngines()) {
    auto* e = resp->add_engines();
    e->set_url(row.endpoint.url);
    e->set_ranks(row.endpoint.ranks);
    e->set_rank_offset(row.endpoint.rank_offset);
    e->set_group(row.group);
    e->set_healthy(row.health.healthy);
    e->set_kind(row.kind);
    e->set_engine_version(row.health.engine_version);
    e->set_variant(row.health.variant);
    e->set_sleeping(row.health.sleeping);
    e->set_weight_version(row.health.weight_version);
    e->set_last_error(row.health.error);
    e->set_needs_full_version(!row.needs_full_version.empty());
    e->set_needs_full_version_reason(row.needs_full_version);
    e->set_needs_restart(row.needs_restart);
    e->set_group_error(row.group_error);
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::ListBuffers(grpc::ServerContext* context, const v1::ListBuffersRequest*,
                                       v1::ListBuffersResponse* resp) {
  WSYNC_REQUIRE_ROLE(auth_, context, Role::kTrainer, "ListBuffers");
  for (const SlotRow& row : core_->ListBuffers()) {
    auto* b = resp->add_buffers();
    b->set_device(row.device);
    b->set_index(row.index);
    b->set_bytes(row.bytes);
    b->set_kind(std::string(MemoryKindName(row.kind)));
    b->set_owner_session(row.owner_session);
    b->set_state(std::string(SlotStateName(row.state)));
  }
  for (const DeviceMemoryRow& row : core_->ListDeviceMemory()) {
    auto* d = resp->add_devices();
    d->set_device(row.device);
    d->set_bytes_held(row.bytes_held);
    d->set_slots(row.slots);
    d->set_holder_session(row.holder);
    d->set_allocations(row.allocations);
    d->set_releases(row.releases);
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::ReleaseBuffers(grpc::ServerContext* context,
                                          const v1::ReleaseBuffersRequest* req,
                                          v1::ReleaseBuffersResponse* resp) {
  WSYNC_REQUIRE_ROLE(auth_, context, Role::kAdmin, "ReleaseBuffers");
  if (req->has_device() && req->device() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a device is 0 or more");
  }
  ReleaseResult r = core_->ReleaseBuffers(req->has_device() ? req->device() : -1);
  for (int d : r.released) resp->add_released(d);
  resp->set_bytes(r.bytes);
  for (const std::string& b : r.busy) resp->add_busy(b);
  return grpc::Status::OK;
}

grpc::Status AdminService::ListUpdates(grpc::ServerContext* context,
                                       const v1::ListUpdatesRequest* req,
                                       v1::ListUpdatesResponse* resp) {
  WSYNC_REQUIRE_ROLE(auth_, context, Role::kTrainer, "ListUpdates");
  for (const UpdateRecord& r : core_->ListUpdates(req->limit() == 0 ? 20 : req->limit())) {
    auto* u = resp->add_updates();
    u->set_update_id(r.update_id);
    u->set_group(r.group);
    u->set_version(r.version);
    u->set_session_id(r.session_id);
    u->set_state(r.state);
    u->set_code(static_cast<int32_t>(r.status.code()));
    u->set_message(std::string(r.status.message()));
    u->set_buckets(r.buckets);
    u->set_bytes(r.bytes);
    if (r.wire_volume) WireVolumeToProto(*r.wire_volume, u->mutable_wire_volume());
    u->set_seconds(r.seconds);
    u->set_started_unix_ms(absl::ToUnixMillis(r.started));
    for (const std::string& e : r.engine_results) u->add_engine_results(e);
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::ListProgress(grpc::ServerContext* context,
                                        const v1::ListProgressRequest*,
                                        v1::ListProgressResponse* resp) {
  WSYNC_REQUIRE_ROLE(auth_, context, Role::kTrainer, "ListProgress");
  for (const UpdateProgressView& v : core_->ListProgress()) {
    v1::UpdateProgress* u = resp->add_updates();
    u->set_update_id(v.update_id);
    u->set_group(v.group);
    u->set_version(v.version);
    u->set_buckets_done(v.buckets_done);
    u->set_bytes_done(v.bytes_done);
    u->set_buckets_planned(v.buckets_planned);
    u->set_bytes_planned(v.bytes_planned);
    if (v.wire_volume) WireVolumeToProto(*v.wire_volume, u->mutable_wire_volume());
    u->set_seconds(v.seconds);
    u->set_gib_per_second(v.seconds > 0 ? v.bytes_done / v.seconds / double(1ull << 30) : 0);
    double slowest = -1;
    for (const EngineProgressView& e : v.engines) {
      v1::EngineProgress* p = u->add_engines();
      p->set_url(e.engine);
      p->set_buckets_answered(e.buckets_answered);
      p->set_last_answer_seconds(e.last_answer_seconds);
      const double mean = e.buckets_answered > 0 ? e.total_answer_seconds / e.buckets_answered : 0;
      p->set_mean_answer_seconds(mean);
      p->set_state(e.left_out.empty() ? "receiving" : absl::StrCat("left out: ", e.left_out));
      if (e.left_out.empty() && e.buckets_answered > 0 && mean > slowest) {
        slowest = mean;
        u->set_slowest_engine(e.engine);
      }
    }
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::GetStatus(grpc::ServerContext* context, const v1::GetStatusRequest*,
                                     v1::DaemonStatus* resp) {
  WSYNC_REQUIRE_ROLE(auth_, context, Role::kTrainer, "GetStatus");
  DaemonStatusView v = core_->Diagnose();
  resp->set_version(WSYNC_VERSION);
  resp->set_mode(v.mode);
  resp->set_uptime_seconds(absl::ToInt64Seconds(v.uptime));
  resp->set_draining(v.draining);
  resp->set_sessions(static_cast<uint32_t>(v.sessions));
  resp->set_groups(static_cast<uint32_t>(v.groups));
  resp->set_slots(static_cast<uint32_t>(v.slots));
  resp->set_slot_bytes(v.slot_bytes);
  resp->set_updates_committed(v.committed);
  resp->set_updates_failed(v.failed);
  resp->set_bytes_sent(v.bytes_sent);
  resp->set_listen(listen_);
  resp->set_checksum(core_->options().checksum);
  resp->set_gpu_sharing(core_->options().gpu_sharing);
  if (v.last_commit != absl::InfinitePast()) {
    resp->set_last_commit_unix_seconds(absl::ToUnixSeconds(v.last_commit));
  }
  for (const std::string& uuid : v.device_uuids) resp->add_device_uuids(uuid);
  resp->set_devices_error(std::string(v.devices.message()));
  for (const auto& [library, version] : v.nccl_libraries) {
    resp->add_nccl_libraries(absl::StrCat(library, " ", version));
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::Drain(grpc::ServerContext* context, const v1::DrainRequest* req,
                                 v1::DrainResponse* resp) {
  WSYNC_REQUIRE_ROLE(auth_, context, Role::kAdmin, "Drain");
  DrainResult r =
      core_->Drain(absl::Seconds(req->timeout_seconds() == 0 ? 60 : req->timeout_seconds()));
  resp->set_updates_waited(r.waited);
  resp->set_drained(r.drained);
  return grpc::Status::OK;
}

grpc::Status AdminService::Undrain(grpc::ServerContext* context, const v1::UndrainRequest*,
                                   v1::UndrainResponse* resp) {
  WSYNC_REQUIRE_ROLE(auth_, context, Role::kAdmin, "Undrain");
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (!stopping_.empty()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("Undrain refused: wsyncd is stopping (", stopping_,
                                     "); it finishes the updates it has and exits. Start it "
                                     "again to take updates"));
  }
  resp->set_was_draining(core_->Undrain());
  return grpc::Status::OK;
}

void AdminService::BeginStopping(const std::string& why) {
  std::lock_guard<std::mutex> lock(stop_mu_);
  stopping_ = why.empty() ? "stopping" : why;
}

grpc::Status AdminService::ResumeEngine(grpc::ServerContext* context,
                                        const v1::ResumeEngineRequest* req,
                                        v1::ResumeEngineResponse* resp) {
  WSYNC_REQUIRE_ROLE(auth_, context, Role::kAdmin, "ResumeEngine");
  auto resumed = core_->ResumeEngines(req->group(), req->url());
  if (!resumed.ok()) return ToGrpcStatus(resumed.status());
  for (const std::string& url : *resumed) resp->add_resumed(url);
  return grpc::Status::OK;
}

namespace {

// The last version `node` committed of `group`, from the update history (newest last): how many
// committed updates of the group came after it, and the seconds between it and the last one.
struct MemberLag {
  std::string last_version;
  uint32_t versions_behind = 0;
  double seconds_behind = 0;
};

MemberLag LagOf(const std::vector<UpdateRecord>& history, const std::string& group,
                const std::string& node) {
  MemberLag lag;
  const std::string member = absl::StrCat("wsyncd://", node);
  absl::Time newest = absl::InfinitePast();
  for (auto it = history.rbegin(); it != history.rend(); ++it) {
    if (it->group != group || it->state != "committed") continue;
    const absl::Time ended = it->started + absl::Seconds(it->seconds);
    if (newest == absl::InfinitePast()) newest = ended;
    if (std::find(it->committed_engines.begin(), it->committed_engines.end(), member) !=
        it->committed_engines.end()) {
      lag.last_version = it->version;
      lag.seconds_behind = absl::ToDoubleSeconds(newest - ended);
      return lag;
    }
    ++lag.versions_behind;
  }
  return lag;
}

}  // namespace

grpc::Status AdminService::GetRelay(grpc::ServerContext* context, const v1::GetRelayRequest*,
                                    v1::RelayStatus* resp) {
  WSYNC_REQUIRE_ROLE(auth_, context, Role::kTrainer, "GetRelay");
  const std::vector<UpdateRecord> history = core_->ListUpdates(1000);
  if (subscribers_ != nullptr) {
    for (const RelaySubscribers::Subscriber& s : subscribers_->List()) {
      v1::RelaySubscriberInfo* info = resp->add_subscribers();
      info->set_id(s.id);
      info->set_node(s.subscription.node);
      for (const std::string& g : s.subscription.groups) info->add_groups(g);
      info->set_caller(s.caller);
      info->set_since_unix_ms(absl::ToUnixMillis(s.since));
      if (!s.subscription.groups.empty()) {
        MemberLag lag = LagOf(history, s.subscription.groups.front(), s.subscription.node);
        info->set_last_version(lag.last_version);
        info->set_versions_behind(lag.versions_behind);
        info->set_seconds_behind(lag.seconds_behind);
      }
    }
  }
  if (feeders_ != nullptr) {
    for (const RelayFeeder::View& v : feeders_->Views()) {
      v1::RelayFeedInfo* info = resp->add_feeds();
      info->set_upstream(v.options.upstream);
      info->set_group(v.options.group);
      info->set_local_group(v.options.local_group);
      info->set_node(v.options.node);
      info->set_subscribed(v.subscribed);
      info->set_subscriber_id(v.subscriber_id);
      info->set_last_version(v.last_version);
      info->set_last_commit_unix_ms(
          v.last_commit == absl::InfinitePast() ? 0 : absl::ToUnixMillis(v.last_commit));
      info->set_last_error(v.last_error);
      info->set_updates_committed(v.updates_committed);
    }
    for (const auto& [feed, r] : feeders_->Residents()) {
      v1::RelayResidentInfo* info = resp->add_residents();
      info->set_local_group(feed.local_group);
      info->set_medium(std::string(ResidentMediumName(r.medium)));
      info->set_cap_bytes(r.cap_bytes);
      info->set_version(r.version);
      info->set_bytes(r.bytes);
      info->set_buckets(r.buckets);
      info->set_why_none(r.why_none);
    }
  }
  return grpc::Status::OK;
}

}  // namespace wsync

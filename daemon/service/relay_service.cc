#include "daemon/service/relay_service.h"

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "daemon/core/peer_text.h"
#include "daemon/core/transport_kind.h"
#include "daemon/service/status_mapping.h"

namespace wsync {

RelaySubscription SubscriptionFromProto(const v1::RelaySubscribe& wire) {
  RelaySubscription s;
  s.protocol_version = wire.protocol_version();
  s.platform = wire.platform();
  s.nccl_version = wire.nccl_version();
  s.node = wire.node();
  // More than the limit is refused by CheckSubscription; one past it is enough to say so.
  for (int i = 0; i < wire.groups_size() && i <= static_cast<int>(kMaxRelayGroups); ++i) {
    s.groups.push_back(wire.groups(i));
  }
  s.slot_bytes = wire.slot_bytes();
  s.bucket_rules.one_dtype = wire.bucket_rules().one_dtype();
  s.bucket_rules.close_after_bytes = wire.bucket_rules().close_after_bytes();
  return s;
}

absl::Status CheckRelayMember(const DaemonCore& core, const std::string& group,
                              const std::string& node) {
  absl::StatusOr<GroupSnapshot> found = core.GetGroup(group);
  if (!found.ok()) {
    return absl::NotFoundError(absl::StrCat("this wsyncd has no group '", group, "' to relay"));
  }
  absl::StatusOr<const TransportKind*> transport = TransportOf(found->spec);
  if (!transport.ok() || (*transport)->engines_speak_http()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group '", group, "' feeds engines over ", found->spec.transport,
        ", it relays to no daemon: create a group of transport relay whose members are "
        "wsyncd://<node>"));
  }
  std::vector<std::string> members;
  for (const EngineSpec& e : found->spec.engines) {
    absl::StatusOr<std::string> member = RelayMemberNode(e.url);
    if (member.ok() && *member == node) return absl::OkStatus();
    members.push_back(e.url);
  }
  return absl::PermissionDeniedError(
      absl::StrCat("node ", node, " is not a member of group '", group,
                   "' (its members: ", absl::StrJoin(members, ", "), ")"));
}

grpc::Status RelayService::Subscribe(grpc::ServerContext* context,
                                     grpc::ServerReaderWriter<v1::RelayDown, v1::RelayUp>* stream) {
  Caller caller;
  if (grpc::Status s = auth_->Require(*context, Role::kRelay, "Subscribe", &caller); !s.ok()) {
    return s;
  }
  auto ticket = streams_->Admit(caller, "Subscribe", context->c_call(),
                                StreamRule{StreamProgress::kFirstMessage, "subscribe"});
  if (!ticket.ok()) return ToGrpcStatus(ticket.status());
  v1::RelayUp first;
  if (!stream->Read(&first)) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "stream closed before subscribe");
  }
  ticket->Progress();
  if (!first.has_subscribe()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first message of a subscription must be subscribe");
  }
  RelaySubscription want = SubscriptionFromProto(first.subscribe());
  RelayUpstream have;
  have.platform = std::string(core_->platform().name());
  have.nccl_version = core_->platform().DefaultNcclVersion();
  have.token_groups = caller.relay_groups;
  have.token_nodes = caller.relay_nodes;
  have.check_group = [this](const std::string& name, const std::string& node) {
    return CheckRelayMember(*core_, name, node);
  };
  have.slot_bytes = core_->options().slot_bytes;
  if (absl::Status s = CheckSubscription(want, have); !s.ok()) {
    WSYNC_LOG(Warning, "relay: refused a subscription from ", caller.description, ": ",
              s.message());
    return ToGrpcStatus(
        absl::Status(s.code(), absl::StrCat("subscription refused: ", s.message())));
  }
  const std::string node = want.node;
  const std::string groups = absl::StrJoin(want.groups, ", ");
  const RelaySubscription subscription = want;
  absl::StatusOr<std::string> added = subscribers_->Add(std::move(want), caller.description);
  if (!added.ok()) {
    return ToGrpcStatus(absl::Status(
        added.status().code(), absl::StrCat("subscription refused: ", added.status().message())));
  }
  const std::string id = *added;
  absl::Cleanup gone = [&] {
    subscribers_->Remove(id);
    WSYNC_LOG(Info, "relay: subscription ", id, " (node ", node, ") ended");
  };
  WSYNC_LOG(Info, "relay: admitted subscription ", id, " of node ", node, " to groups ", groups,
            " (", caller.description, ")");
  v1::RelayDown admitted;
  admitted.mutable_admitted()->set_protocol_version(kRelayProtocolVersion);
  admitted.mutable_admitted()->set_platform(have.platform);
  admitted.mutable_admitted()->set_nccl_version(have.nccl_version);
  admitted.mutable_admitted()->set_subscriber_id(id);
  if (!stream->Write(admitted)) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "the subscriber went away");
  }
  // The subscription lasts as long as the stream: the relay group's member of this node sends
  // its requests down it, and the replies come up here.
  auto channel = std::make_shared<RelayChannel>(
      id, subscription, [stream](const v1::RelayDown& down) { return stream->Write(down); },
      [context] { context->TryCancel(); });
  subscribers_->Attach(id, channel);
  // Before the stream goes: nothing writes to it or cancels it after.
  absl::Cleanup closed = [&] { channel->Shutdown(); };
  v1::RelayUp next;
  while (stream->Read(&next)) {
    if (next.has_progress()) {
      if (absl::Status s = channel->Progress(next.progress().id()); !s.ok()) {
        channel->Close(absl::InvalidArgumentError(
            absl::StrCat("the subscription of ", channel->Describe(), " broke: ", s.message())));
        return ToGrpcStatus(s);
      }
      continue;
    }
    if (!next.has_reply()) {
      channel->Close(absl::InvalidArgumentError(
          absl::StrCat("the subscription of ", channel->Describe(), " sent a second subscribe")));
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "after subscribe, a subscriber sends only replies and progress");
    }
    if (absl::Status s = channel->Deliver(std::move(*next.mutable_reply())); !s.ok()) {
      channel->Close(absl::InvalidArgumentError(
          absl::StrCat("the subscription of ", channel->Describe(), " broke: ", s.message())));
      return ToGrpcStatus(s);
    }
  }
  return grpc::Status::OK;
}

}  // namespace wsync

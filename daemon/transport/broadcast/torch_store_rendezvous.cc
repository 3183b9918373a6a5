#include "daemon/transport/broadcast/torch_store_rendezvous.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/torch_ipc/pickle_writer.h"
#include "daemon/core/engine_group_name.h"

namespace wsync {

std::string TorchStoreRendezvous::UniqueIdKey(const std::string& group_name) {
  return absl::StrCat("/", group_name, "/", group_name, "//cuda//0");
}

absl::StatusOr<std::string> TorchStoreRendezvous::VllmUniqueIdPickle(absl::string_view id) {
  if (id.size() != 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("an ncclUniqueId is 128 bytes, not ", id.size()));
  }
  PickleWriter w;
  WSYNC_RETURN_IF_ERROR(w.Global("_ctypes", "_unpickle"));
  WSYNC_RETURN_IF_ERROR(
      w.Global("vllm.distributed.device_communicators.pynccl_wrapper", "ncclUniqueId"));
  w.EmptyDict();  // the instance __dict__
  WSYNC_RETURN_IF_ERROR(w.Bytes(id));
  w.Tuple2();  // ({}, id)
  w.Tuple2();  // (cls, ({}, id))
  w.Reduce();
  return std::move(w).Finish();
}

std::string TorchStoreRendezvous::IdKey() const {
  return mode_ == RendezvousMode::kStatelessStore ? std::string(kVllmIdKey)
                                                  : UniqueIdKey(group_name_);
}

absl::StatusOr<Rendezvous> TorchStoreRendezvous::Open(const std::string& group_name,
                                                      const std::string& unique_id,
                                                      uint32_t world_size) {
  Close();
  TcpStoreServer::Options options;
  options.allowed_peers = allowed_peers_;
  // One store connection per engine rank, room for each to reconnect once, and a margin.
  options.limits.max_connections = std::max<int>(16, 2 * static_cast<int>(world_size) + 8);
  options.max_registered = world_size - 1;
  if (gate_) {
    gate_->Refresh();
    options.admit = [gate = gate_](const SocketEnds& ends) { return gate->Admit(ends); };
  }
  if (mode_ == RendezvousMode::kTorchStore) {
    // Every key of the group is under "/G/" (the helper's PrefixStore(G)), and G holds a token
    // only wsyncd and the engines it sent it to know: a connection is a rank once it names one.
    options.rank_prefix = absl::StrCat("/", group_name, "/");
    if (absl::string_view token = EngineGroupToken(group_name); !token.empty()) {
      options.log_redactions.emplace(std::string(token), kHiddenToken);
    }
  }
  // The kernel picks the port; one it picks again from avoid_ports_ is held open while it picks
  // another, so each try gets a new one.
  const std::string address = bind_address_.empty() ? advertise_address_ : bind_address_;
  std::vector<std::unique_ptr<TcpStoreServer>> refused;
  for (int attempt = 0;; ++attempt) {
    auto store = TcpStoreServer::Start(address, 0, options);
    if (!store.ok()) return store.status();
    const uint16_t port = (*store)->port();
    if (port != last_port_ && avoid_ports_.count(port) == 0) {
      store_ = std::move(*store);
      break;
    }
    if (attempt == 16) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the kernel gave the store only ports an earlier group instance used (last ", port, ")"));
    }
    refused.push_back(std::move(*store));
  }
  group_name_ = group_name;
  world_size_ = world_size;
  // Published before any engine is asked to join: torch's engines fetch it at their first
  // collective, vLLM's inside their init request.
  std::string value = unique_id;
  if (mode_ == RendezvousMode::kStatelessStore) {
    WSYNC_ASSIGN_OR_RETURN(value, VllmUniqueIdPickle(unique_id));
  }
  if (absl::Status s = store_->Set(IdKey(), value); !s.ok()) return s;
  return Rendezvous{advertise_address_, store_->port(), world_size_, group_name_, mode_, ""};
}

absl::Status TorchStoreRendezvous::WaitJoined(absl::Time deadline) {
  // Fewer than world-1 connections that ADDed "init/" means an engine answered its init route
  // without all of its ranks reaching the store. Counted by open connections, not by the "init/"
  // value, which a rank that left still counts in. (Anyone may ADD "init/": this can only pass
  // early, never fail a group whose ranks did come. Who is a rank, the store learns when they
  // name the group's keys: CheckJoined.)
  const size_t engine_ranks = world_size_ - 1;
  while (store_->AnnouncedOpen() < engine_ranks) {
    if (absl::Now() >= deadline) {
      const std::string refused = store_->LastRefusal();
      return absl::DeadlineExceededError(absl::StrCat(
          "group '", ShownEngineGroup(group_name_), "': only ", store_->AnnouncedOpen(), " of ",
          engine_ranks, " engine ranks registered with the store at ", address(),
          " (connected pids: ", absl::StrJoin(store_->ConnectedPids(), ","), ")",
          refused.empty() ? "" : "; it refused ", refused));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::OkStatus();
}

absl::Status TorchStoreRendezvous::CheckJoined() const {
  // Every engine rank keeps its store connection for the life of its process group; one that
  // closed means its engine restarted (or died), and a replacement does not hold the group.
  // Judged by the connections the store admitted as ranks, not by how many are open (another
  // client of the store, a probe or a stray process, must not stand in for a rank that left, nor
  // pass for one that left when it goes), nor by pid (pids repeat across hosts and containers).
  if (!store_) return absl::FailedPreconditionError("the group's store is gone");
  const std::vector<uint32_t> gone = store_->RanksLeft();
  if (!gone.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        gone.size(), " engine ranks (pids ", absl::StrJoin(gone, ","),
        ") closed their store connection since the group formed (engine restarted or died)"));
  }
  // Ranks of torch's helper name the group only at their first collective: until then, fewer
  // connections that ADDed "init/" than ranks means one of them left.
  const size_t engine_ranks = world_size_ - 1;
  if (const size_t present = store_->AnnouncedOpen(); present < engine_ranks) {
    return absl::FailedPreconditionError(
        absl::StrCat("only ", present, " of ", engine_ranks,
                     " engine ranks are still connected to the store since the group formed "
                     "(engine restarted or died)"));
  }
  return absl::OkStatus();
}

std::string TorchStoreRendezvous::Diagnose() const {
  if (!store_) return "the group's store is gone";
  const std::string key = IdKey();
  std::vector<uint32_t> connected = store_->ConnectedPids();
  std::vector<uint32_t> fetched = store_->FetchersOf(key);
  std::vector<uint32_t> never;
  for (uint32_t pid : connected) {
    if (std::find(fetched.begin(), fetched.end(), pid) == fetched.end()) never.push_back(pid);
  }
  std::vector<std::string> unpublished = store_->UnpublishedWaits();
  if (never.empty() && unpublished.empty() && connected.size() + 1 >= world_size_) return "";
  // Keys hold the group's name; what is reported never holds its token.
  for (std::string& k : unpublished) k = RedactEngineGroupTokens(k);
  std::string report =
      absl::StrCat("store ", address(), ": ", connected.size(), " of ", world_size_ - 1,
                   " engine ranks connected (pids ", absl::StrJoin(connected, ","), "), ",
                   fetched.size(), " fetched the NCCL id ", RedactEngineGroupTokens(key));
  if (!never.empty() && mode_ == RendezvousMode::kStatelessStore) {
    absl::StrAppend(&report, "; pids ", absl::StrJoin(never, ","),
                    " joined the store but never read the id");
  } else if (!never.empty()) {
    absl::StrAppend(&report, "; pids ", absl::StrJoin(never, ","),
                    " joined the store but never fetched the id: an engine whose default process "
                    "group is bound to a device (device_id) builds this group with ncclCommSplit "
                    "and cannot join an external rank 0; restart it without device_id");
  }
  if (!unpublished.empty()) {
    absl::StrAppend(&report, "; ranks waited for keys never published (",
                    absl::StrJoin(unpublished, ", "), "): a group name or store prefix mismatch");
  }
  return report;
}

std::string TorchStoreRendezvous::address() const {
  if (!store_) return "";
  return absl::StrCat(advertise_address_, ":", store_->port());
}

void TorchStoreRendezvous::Close() {
  if (!store_) return;
  store_->ErasePrefix(mode_ == RendezvousMode::kStatelessStore
                          ? std::string("/broadcast_from/")
                          : absl::StrCat("/", group_name_, "/"));
  last_port_ = store_->port();
  store_.reset();
}

}  // namespace wsync

#include "daemon/service/authorizer.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace wsync {
namespace {

// Compares in time independent of where the strings differ, so a token cannot be guessed a byte
// at a time.
bool SameSecret(absl::string_view a, absl::string_view b) {
  if (a.empty() || a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

absl::string_view AuthorizationValue(const grpc::ServerContextBase& context) {
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return "";
  return absl::string_view(it->second.data(), it->second.size());
}

// The token of "Bearer <token>"; empty for anything else.
absl::string_view BearerToken(absl::string_view authorization) {
  if (!absl::ConsumePrefix(&authorization, "Bearer ")) return "";
  return authorization;
}

// The IP address of a gRPC peer ("ipv4:10.0.0.7:5000" gives "10.0.0.7").
absl::string_view PeerHost(absl::string_view peer) {
  const size_t colon = peer.rfind(':');
  const size_t scheme = peer.find(':');
  return colon == scheme ? peer.substr(scheme + 1) : peer.substr(scheme + 1, colon - scheme - 1);
}

bool InGroup(uid_t uid, gid_t primary_gid, const std::string& group_name) {
  const group* g = ::getgrnam(group_name.c_str());
  if (g == nullptr) return false;
  if (primary_gid == g->gr_gid) return true;
  const passwd* pw = ::getpwuid(uid);
  if (pw == nullptr) return false;
  for (char** member = g->gr_mem; member != nullptr && *member != nullptr; ++member) {
    if (std::strcmp(*member, pw->pw_name) == 0) return true;
  }
  return false;
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kNone:
      return "none";
    case Role::kTrainer:
      return "trainer";
    case Role::kAdmin:
      return "admin";
    case Role::kRelay:
      return "relay";
  }
  return "none";
}

bool RoleSatisfies(Role has, Role needed) {
  if (has == Role::kNone) return false;
  if (has == Role::kRelay || needed == Role::kRelay) return has == needed;
  return static_cast<int>(has) >= static_cast<int>(needed);
}

Role Authorizer::UnixRole(const UnixPeer& peer) const {
  if (peer.uid == 0 || peer.uid == ::geteuid()) return Role::kAdmin;
  if (!options_.admin_group.empty() && InGroup(peer.uid, peer.gid, options_.admin_group)) {
    return Role::kAdmin;
  }
  // The socket's mode and group decided who may connect at all.
  return Role::kTrainer;
}

Role Authorizer::TokenRole(absl::string_view authorization, Caller* relay_caller) const {
  const absl::string_view token = BearerToken(authorization);
  if (SameSecret(token, options_.admin_token)) return Role::kAdmin;
  if (SameSecret(token, options_.trainer_token)) return Role::kTrainer;
  for (const AuthOptions::RelayToken& relay : options_.relay_tokens) {
    if (SameSecret(token, relay.token)) {
      if (relay_caller != nullptr) {
        relay_caller->relay_groups = relay.groups;
        relay_caller->relay_nodes = relay.nodes;
      }
      return Role::kRelay;
    }
  }
  return Role::kNone;
}

Caller Authorizer::Identify(const grpc::ServerContextBase& context) const {
  const std::string peer = context.peer();
  Caller caller;
  if (unix_ != nullptr) {
    if (auto p = unix_->PeerOf(peer); p.has_value()) {
      caller.role = UnixRole(*p);
      caller.connection = absl::StrCat("unix#", p->serial);
      caller.identity = absl::StrCat("uid ", p->uid);
      caller.description = absl::StrCat("uid ", p->uid, " (pid ", p->pid, ") on the unix socket");
      return caller;
    }
  }
  if (absl::StartsWith(peer, "ipv4:") || absl::StartsWith(peer, "ipv6:")) {
    caller.connection = peer;
    caller.identity = absl::StrCat("TCP ", PeerHost(peer));
    const absl::string_view authorization = AuthorizationValue(context);
    const Role token_role = TokenRole(authorization, &caller);
    if (token_role == Role::kRelay) {
      caller.role = Role::kRelay;
      caller.description = absl::StrCat("TCP ", peer, " with a relay token (groups ",
                                        absl::StrJoin(caller.relay_groups, ", "),
                                        caller.relay_nodes.empty() ? "" : "; nodes ",
                                        absl::StrJoin(caller.relay_nodes, ", "), ")");
    } else if (token_role == Role::kAdmin) {
      caller.role = Role::kAdmin;
      caller.description = absl::StrCat("TCP ", peer, " with the admin token");
    } else if (token_role == Role::kTrainer) {
      caller.role = Role::kTrainer;
      caller.description = absl::StrCat("TCP ", peer, " with the trainer token");
    } else if (BearerToken(authorization).empty() && options_.tcp_is_trainer_without_token) {
      caller.role = Role::kTrainer;
      caller.description = absl::StrCat("TCP ", peer, " (insecure listener, no token)");
    } else {
      caller.description = absl::StrCat(
          "TCP ", peer,
          BearerToken(authorization).empty() ? " without a token" : " with an unknown token");
    }
    return caller;
  }
  // wsyncd serves TCP ("ipv4:", "ipv6:") and its unix socket ("fd:N", above); gRPC names the
  // in-process channel's peer "unknown".
  if (options_.in_process_is_admin && peer == "unknown") {
    caller.role = Role::kAdmin;
    caller.connection = kInProcessConnection;
    caller.identity = "in-process";
    caller.description = "in-process";
    return caller;
  }
  caller.connection = peer;
  caller.identity = peer;
  caller.description = absl::StrCat("unknown peer '", peer, "'");
  return caller;
}

grpc::Status Authorizer::Require(const grpc::ServerContextBase& context, Role needed,
                                 const char* call, Caller* out) const {
  Caller caller = Identify(context);
  grpc::Status status = grpc::Status::OK;
  if (caller.role == Role::kNone) {
    status = grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          absl::StrCat(call, ": ", caller.description,
                                       " is not authenticated (TCP callers present a token over "
                                       "TLS: `authorization: Bearer <token>`)"));
  } else if (!RoleSatisfies(caller.role, needed)) {
    status =
        grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                     absl::StrCat(call, " needs the ", RoleName(needed), " role; ",
                                  caller.description, " has the ", RoleName(caller.role), " role"));
  }
  if (out != nullptr) *out = std::move(caller);
  return status;
}

}  // namespace wsync

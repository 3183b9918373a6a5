#include "daemon/service/authorizer.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

std::string BearerToken(const grpc::ServerContext& context) {
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return "";
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&value, "Bearer ")) return "";
  return std::string(value);
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
  }
  return "none";
}

Role Authorizer::UnixRole(const UnixPeer& peer) const {
  if (peer.uid == 0 || peer.uid == ::geteuid()) return Role::kAdmin;
  if (!options_.admin_group.empty() && InGroup(peer.uid, peer.gid, options_.admin_group)) {
    return Role::kAdmin;
  }
  // The socket's mode and group decided who may connect at all.
  return Role::kTrainer;
}

Caller Authorizer::Identify(const grpc::ServerContext& context) const {
  const std::string peer = context.peer();
  Caller caller;
  if (unix_ != nullptr) {
    if (auto p = unix_->PeerOf(peer); p.has_value()) {
      caller.role = UnixRole(*p);
      caller.connection = absl::StrCat("unix#", p->serial);
      caller.description = absl::StrCat("uid ", p->uid, " (pid ", p->pid, ") on the unix socket");
      return caller;
    }
  }
  if (absl::StartsWith(peer, "ipv4:") || absl::StartsWith(peer, "ipv6:")) {
    caller.connection = peer;
    const std::string token = BearerToken(context);
    if (SameSecret(token, options_.admin_token)) {
      caller.role = Role::kAdmin;
      caller.description = absl::StrCat("TCP ", peer, " with the admin token");
    } else if (SameSecret(token, options_.trainer_token)) {
      caller.role = Role::kTrainer;
      caller.description = absl::StrCat("TCP ", peer, " with the trainer token");
    } else if (token.empty() && options_.tcp_is_trainer_without_token) {
      caller.role = Role::kTrainer;
      caller.description = absl::StrCat("TCP ", peer, " (insecure listener, no token)");
    } else {
      caller.description =
          absl::StrCat("TCP ", peer, token.empty() ? " without a token" : " with an unknown token");
    }
    return caller;
  }
  // wsyncd serves TCP ("ipv4:", "ipv6:") and its unix socket ("fd:N", above); gRPC names the
  // in-process channel's peer "unknown".
  if (options_.in_process_is_admin && peer == "unknown") {
    caller.role = Role::kAdmin;
    caller.connection = "inproc";
    caller.description = "in-process";
    return caller;
  }
  caller.connection = peer;
  caller.description = absl::StrCat("unknown peer '", peer, "'");
  return caller;
}

grpc::Status Authorizer::Require(const grpc::ServerContext& context, Role needed, const char* call,
                                 Caller* out) const {
  Caller caller = Identify(context);
  grpc::Status status = grpc::Status::OK;
  if (caller.role == Role::kNone) {
    status = grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          absl::StrCat(call, ": ", caller.description,
                                       " is not authenticated (TCP callers present a token over "
                                       "TLS: `authorization: Bearer <token>`)"));
  } else if (static_cast<int>(caller.role) < static_cast<int>(needed)) {
    status =
        grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                     absl::StrCat(call, " needs the ", RoleName(needed), " role; ",
                                  caller.description, " has the ", RoleName(caller.role), " role"));
  }
  if (out != nullptr) *out = std::move(caller);
  return status;
}

}  // namespace wsync

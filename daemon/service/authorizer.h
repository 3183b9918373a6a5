#ifndef WSYNC_DAEMON_SERVICE_AUTHORIZER_H_
#define WSYNC_DAEMON_SERVICE_AUTHORIZER_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "daemon/service/caller.h"
#include "daemon/service/unix_listener.h"

namespace wsync {

struct AuthOptions {
  // TCP callers present one of these as "authorization: Bearer <token>" over TLS.
  std::string trainer_token;
  std::string admin_token;
  // Relay tokens, each for the groups it names (a downstream wsyncd's subscription).
  struct RelayToken {
    std::string token;
    std::vector<std::string> groups;
    std::vector<std::string> nodes;  // empty: any node the groups name
  };
  std::vector<RelayToken> relay_tokens;
  // Unix callers in this group are admins, as are root and the daemon's own user (who can stop
  // the daemon anyway).
  std::string admin_group = "wsync-admin";
  // --insecure-listen without tokens: TCP callers are trainers (never admins).
  bool tcp_is_trainer_without_token = false;
  // Calls over the server's in-process channel (tests) are admins: only code inside wsyncd can
  // make them.
  bool in_process_is_admin = true;
};

// Decides who a call is and whether it may do what it asks.
class Authorizer {
 public:
  Authorizer(AuthOptions options, const UnixListener* unix_listener)
      : options_(std::move(options)), unix_(unix_listener) {}

  Caller Identify(const grpc::ServerContextBase& context) const;
  // OK when the caller's role satisfies `needed` (RoleSatisfies); else UNAUTHENTICATED (no role
  // at all) or PERMISSION_DENIED naming the call, the caller and the role it needs.
  grpc::Status Require(const grpc::ServerContextBase& context, Role needed, const char* call,
                       Caller* caller = nullptr) const;
  // The role a TCP caller's "authorization" value gives ("Bearer <token>"): kNone for no token
  // or an unknown one; for a relay token, its groups and nodes in `relay` (may be null). Reads
  // the options only: the TCP token check calls it from gRPC's threads, possibly after the
  // server (and its unix listener) is gone.
  Role TokenRole(absl::string_view authorization, Caller* relay = nullptr) const;
  // TCP callers need a token (a TLS listener): calls without one are refused before they reach
  // a service (TokenGate).
  bool tcp_needs_token() const { return !options_.tcp_is_trainer_without_token; }

 private:
  Role UnixRole(const UnixPeer& peer) const;

  const AuthOptions options_;
  const UnixListener* unix_;
};

}  // namespace wsync

// Returns the refusal from the handler when the caller lacks `role`.
#define WSYNC_REQUIRE_ROLE(auth, context, role, call)                                            \
  do {                                                                                           \
    if (grpc::Status wsync_auth_ = (auth)->Require(*(context), role, call); !wsync_auth_.ok()) { \
      return wsync_auth_;                                                                        \
    }                                                                                            \
  } while (0)

#endif  // WSYNC_DAEMON_SERVICE_AUTHORIZER_H_

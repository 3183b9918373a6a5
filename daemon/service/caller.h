#ifndef WSYNC_DAEMON_SERVICE_CALLER_H_
#define WSYNC_DAEMON_SERVICE_CALLER_H_

#include <string>
#include <vector>

namespace wsync {

// What a caller may do. Trainers push and manage their own sessions and may read the daemon's
// state; admins may also change it (groups, drain) and close anyone's session.
// kNone < kTrainer < kAdmin is a ladder: an admin may do what a trainer may. kRelay stands
// apart: a downstream wsyncd's subscription to the groups its token names (the node relay),
// nothing else, and no other role's holder may subscribe.
enum class Role { kNone, kTrainer, kAdmin, kRelay };

// Whether a caller with `has` may make a call that needs `needed`.
bool RoleSatisfies(Role has, Role needed);

const char* RoleName(Role role);

// Caller::connection of calls over the server's in-process channel.
inline constexpr char kInProcessConnection[] = "inproc";

// Who is calling, as the gRPC front sees it.
struct Caller {
  Role role = Role::kNone;
  // The connection the call came on: sessions belong to the connection that opened them.
  std::string connection;
  // Who calls, over all its connections, as limits count callers: "uid 1000", "TCP 10.0.0.7",
  // "in-process".
  std::string identity;
  // For errors and logs: "uid 1000 (pid 4242) on the unix socket", "TCP 10.0.0.7 with the
  // trainer token".
  std::string description;
  // kRelay: the groups the caller's relay token names, and the nodes it is bound to (empty: any
  // node those groups name).
  std::vector<std::string> relay_groups;
  std::vector<std::string> relay_nodes;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_SERVICE_CALLER_H_

#ifndef WSYNC_DAEMON_SERVICE_CALLER_H_
#define WSYNC_DAEMON_SERVICE_CALLER_H_

#include <string>

namespace wsync {

// What a caller may do. Trainers push and manage their own sessions and may read the daemon's
// state; admins may also change it (groups, drain) and close anyone's session.
enum class Role { kNone, kTrainer, kAdmin };

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
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_SERVICE_CALLER_H_

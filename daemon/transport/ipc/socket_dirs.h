#ifndef WSYNC_DAEMON_TRANSPORT_IPC_SOCKET_DIRS_H_
#define WSYNC_DAEMON_TRANSPORT_IPC_SOCKET_DIRS_H_

#include <string>
#include <vector>

namespace wsync {

// The private directories wsyncd makes for its stream sockets under ipc_socket_dir:
// "wsyncd-<pid>-<pid namespace inode>-<8 hex digits>", holding "<16 hex digits>.sock" sockets.
// Earlier releases named them "wsyncd-<pid>-<8 hex digits>".

// A fresh name for this process's directory, and for a socket in it.
std::string NewSocketDirName();
std::string NewSocketFileName();

// Removes, under `base`, the directories that are provably a dead wsyncd's: named as above,
// directories (not links) owned by wsyncd's user, holding nothing but sockets named as above,
// none of them bound in wsyncd's network namespace (/proc/net/unix), and whose pid is that of no
// process in wsyncd's PID namespace, which must be the one named (a directory of the earlier
// form names none: its pid is taken as wsyncd's namespace's). Returns the names removed.
std::vector<std::string> RemoveDeadSocketDirs(const std::string& base);

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_IPC_SOCKET_DIRS_H_

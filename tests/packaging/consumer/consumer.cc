// Connects to a wsyncd through the installed client, opens and closes a session, and prints what
// it heard: the client's version and the daemon's slot size.
#include <wsync/wsync_c.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer unix:/path/to/wsyncd.sock\n");
    return 2;
  }
  char err[512] = {0};
  wsync_client* client = nullptr;
  if (wsync_connect(argv[1], 10.0, &client, err, sizeof(err)) != 0) {
    std::fprintf(stderr, "connect: %s\n", err);
    return 1;
  }
  if (wsync_open_session(client, 0, "find_package consumer", err, sizeof(err)) != 0) {
    std::fprintf(stderr, "open session: %s\n", err);
    return 1;
  }
  std::printf("client %s, slot bytes %llu\n", wsync_version(),
              static_cast<unsigned long long>(wsync_slot_bytes(client)));
  if (wsync_close_session(client, err, sizeof(err)) != 0) {
    std::fprintf(stderr, "close session: %s\n", err);
    return 1;
  }
  wsync_close(client);
  return 0;
}

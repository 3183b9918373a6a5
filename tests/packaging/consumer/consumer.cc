// A trainer's C++ code outside the tree, built against the installed package: connects to wsyncd
// through <wsync/wsync.hpp>, opens a session and pushes one float32 tensor (0, 1, ..., 999) to
// the group named on the command line, then prints the daemon's JSON result.
#include <cstdio>
#include <vector>
#include <wsync/wsync.hpp>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: consumer unix:/path/to/wsyncd.sock GROUP\n");
    return 2;
  }
  try {
    wsync::Client client(argv[1]);
    client.OpenSession(0, "find_package consumer");
    std::vector<float> values(1000);
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
    const int64_t shape[] = {1000};
    std::vector<wsync_tensor> tensors = {
        {"w", "float32", 1, shape, values.data(), values.size() * sizeof(float)}};
    std::printf("client %s, slot bytes %llu\n", wsync::Client::Version().c_str(),
                static_cast<unsigned long long>(client.SlotBytes()));
    std::printf("%s\n", client.Push(argv[2], "cpp-v1", tensors).c_str());
    client.CloseSession();
  } catch (const wsync::Error& e) {
    std::fprintf(stderr, "wsync error %d: %s\n", e.code(), e.what());
    return 1;
  }
  return 0;
}

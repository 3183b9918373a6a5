// vllm_nccl_sim: a vLLM server's NCCL weight-transfer API over wsync's host collective.

#include <cstdio>

#include "CLI/CLI.hpp"
#include "tests/sim/delivery_flags.h"
#include "tests/sim/stop_signals.h"
#include "tests/sim/vllm_nccl_sim.h"

int main(int argc, char** argv) {
  CLI::App app{"vllm_nccl_sim: vLLM's NCCL weight-transfer routes over wsync's host collective"};
  std::string host = "127.0.0.1";
  int port = 8000, tp = 1;
  wsync::VllmSimKnobs knobs;
  app.add_option("--host", host);
  app.add_option("--port", port);
  app.add_option("--tp", tp, "workers of this engine (GET /get_world_size)")
      ->check(CLI::Range(1, 64));
  app.add_option("--version", knobs.version, "version reported by /version");
  app.add_option("--fail-update-at", knobs.fail_update_at, "the Nth /update_weights answers 500");
  app.add_option("--conflict-update-at", knobs.conflict_update_at,
                 "the Nth /update_weights answers 409");
  app.add_flag("--weight-checker", knobs.weight_checker, "serve POST /weight_checker");
  app.add_option("--corrupt-tensor", knobs.corrupt_tensor,
                 "the first worker keeps this tensor with its first byte flipped");
  app.add_option("--init-delay-ms", knobs.init_delay_ms,
                 "each init waits this long before its workers join the group");
  wsync::AddDeliveryFlags(app, knobs.delivery);
  CLI11_PARSE(app, argc, argv);

  const sigset_t stop = wsync::BlockStopSignals();

  wsync::VllmNcclSim sim(tp, knobs);
  auto bound = sim.Start(host, port);
  if (!bound.ok()) {
    std::fprintf(stderr, "vllm_nccl_sim: %s\n", std::string(bound.status().message()).c_str());
    return 1;
  }
  std::printf("vllm_nccl_sim: vLLM %s, %d worker(s), serving on http://%s:%d\n",
              knobs.version.c_str(), tp, host.c_str(), *bound);
  std::fflush(stdout);
  wsync::WaitForStopSignal(stop);
  sim.Stop();
  return 0;
}

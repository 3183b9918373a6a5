// sglang_sim: an SGLang server's weight-update API for host-mode tests and the demo.

#include <cstdio>

#include "CLI/CLI.hpp"
#include "tests/sim/delivery_flags.h"
#include "tests/sim/sglang_sim.h"
#include "tests/sim/stop_signals.h"

int main(int argc, char** argv) {
  CLI::App app{"sglang_sim: SGLang weight-update endpoints over wsync's host collective"};
  std::string host = "127.0.0.1";
  int port = 30000, tp = 1;
  wsync::SimKnobs knobs;
  app.add_option("--host", host);
  app.add_option("--port", port);
  app.add_option("--tp", tp, "TP ranks of this engine")->check(CLI::Range(1, 64));
  app.add_option("--version", knobs.version, "version reported by /get_server_info");
  app.add_flag("--fail-init", knobs.fail_init);
  app.add_option("--fail-update-at", knobs.fail_update_at);
  app.add_option("--hang-update-at", knobs.hang_update_at);
  app.add_option("--die-at-update", knobs.die_at_update);
  app.add_option("--answer-delay-ms", knobs.answer_delay_ms, "sleep after receiving a bucket");
  app.add_flag("--sessions", knobs.sessions,
               "a session build: every update inside /begin_weight_update ... /end_weight_update, "
               "or the process dies");
  app.add_flag("--no-docs", knobs.no_docs, "serve no /openapi.json");
  app.add_flag("--weights-checker", knobs.weights_checker, "serve POST /weights_checker");
  wsync::AddDeliveryFlags(app, knobs.delivery);
  CLI11_PARSE(app, argc, argv);

  const sigset_t stop = wsync::BlockStopSignals();

  wsync::SglangSim sim(tp, knobs);
  auto bound = sim.Start(host, port);
  if (!bound.ok()) {
    std::fprintf(stderr, "sglang_sim: %s\n", std::string(bound.status().message()).c_str());
    return 1;
  }
  std::printf("sglang_sim: tp %d serving on http://%s:%d\n", tp, host.c_str(), *bound);
  std::fflush(stdout);
  wsync::WaitForStopSignal(stop);
  sim.Stop();
  return 0;
}

#ifndef WSYNC_TESTS_SIM_DELIVERY_FLAGS_H_
#define WSYNC_TESTS_SIM_DELIVERY_FLAGS_H_

// The command-line flags of SimDeliveryKnobs, shared by the simulators' mains.

#include "CLI/CLI.hpp"
#include "tests/sim/sim_http_server.h"

namespace wsync {

inline void AddDeliveryFlags(CLI::App& app, SimDeliveryKnobs& delivery) {
  app.add_option("--oversize-route", delivery.oversize_routes,
                 "a route (\"*\": every one) that answers an oversized chunked body");
  app.add_option("--oversize-mib", delivery.oversize_mib,
                 "the oversized body's size in MiB (0: endless, until the client hangs up)");
  app.add_option("--trickle-route", delivery.trickle_routes,
                 "a route (\"*\": every one) whose answers go out one byte at a time");
  app.add_option("--trickle-ms", delivery.trickle_ms,
                 "milliseconds between a trickled answer's bytes");
}

}  // namespace wsync

#endif  // WSYNC_TESTS_SIM_DELIVERY_FLAGS_H_

// The flow stage's pull request size (runtime/flow/stage.h, flow_batch_for; ADR 0262): how many
// messages one request asks for at a measured run time per event.
#include <catch2/catch.hpp>

#include <chrono>

#include "runtime/flow/stage.h"

using namespace std::chrono_literals;
using weir::flow_batch_for;
using weir::StageOptions;

TEST_CASE("flow batch: grows with fast inputs, never past max_batch, below batch only as far as the budget says",
          "[stage]") {
  StageOptions o;  // batch 256, max_batch 1024, two in flight, 500 ms budget
  // Nothing measured yet: the configured batch.
  CHECK(flow_batch_for(o, 0ns) == 256);
  // 10 µs per event: 2 × 1024 run in 20 ms, far within the budget.
  CHECK(flow_batch_for(o, 10us) == 1024);
  // 500 ms / (2 × 400 µs) = 625 → the multiple of 256 below: 512.
  CHECK(flow_batch_for(o, 400us) == 512);
  // 500 ms / (2 × 900 µs) = 277 → 256.
  CHECK(flow_batch_for(o, 900us) == 256);
  // Slower still: as many as fit, below the configured batch: 500 ms / (2 × 50 ms) = 5.
  CHECK(flow_batch_for(o, 50ms) == 5);
  // And one at least, however slow.
  CHECK(flow_batch_for(o, 2s) == 1);
  // More batches in flight share the budget.
  o.batches_in_flight = 4;
  CHECK(flow_batch_for(o, 400us) == 256);
  CHECK(flow_batch_for(o, 100us) == 1024);
  // A max_batch below batch leaves batch; max_batch need not be a multiple.
  o.max_batch = 100;
  CHECK(flow_batch_for(o, 1us) == 256);
  o.max_batch = 1000;
  CHECK(flow_batch_for(o, 1us) == 768);
}

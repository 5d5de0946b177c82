// A flow using lookup, set, map (with an array map and sum), filter and branch gives,
// for a few hundred varied events, exactly what a hand-written reference computes; bad
// events become flow errors naming the step and the message. (runtime_test.cc checks
// the same through the weir binary.)
#include <catch2/catch.hpp>
#include <map>

#include "reference_flow.h"

using namespace weir::flows;
namespace ref = weir::flows::reference;

TEST_CASE("flow output equals a reference computation for varied events", "[steps][reference]") {
  LoadResult r = load_flow_text(ref::flow_text(), "ref.yaml");
  for (const auto& d : r.diagnostics) UNSCOPED_INFO(d.str());
  REQUIRE(r.flow);
  std::mt19937 rng(20260101);
  int emitted = 0, dropped = 0, errors = 0;
  std::map<std::string, int> per_sink;
  for (int i = 0; i < 400; ++i) {
    Json ev = ref::random_event(rng, i);
    ref::Expected want = ref::compute(ev);
    Outcome got = r.flow->run(ev);
    INFO("event: " << ev.dump());
    INFO("got: " << got.event.dump() << " " << got.error.str());
    REQUIRE(got.kind == want.kind);
    if (want.kind == Outcome::Kind::kEmit) {
      ++emitted;
      ++per_sink[want.sink];
      CHECK(got.sink == want.sink);
      CHECK(got.event == want.event);
    } else if (want.kind == Outcome::Kind::kError) {
      ++errors;
      CHECK(got.error.flow == "ref");
      CHECK(got.error.step == want.error_step);
      CHECK(got.error.message.find(want.error_message) != std::string::npos);
      CHECK_FALSE(got.error.expression.empty());
    } else {
      ++dropped;
    }
  }
  // The generator reaches every path.
  CHECK(emitted > 200);
  CHECK(dropped > 10);
  CHECK(errors > 10);
  CHECK(per_sink["big"] > 10);
  CHECK(per_sink["vip"] > 5);
  CHECK(per_sink["small"] > 10);
}

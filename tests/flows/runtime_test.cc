// Through the runtime: the reference flow (reference_flow.h) loaded by the weir binary,
// events posted to its http source, outputs collected by weir-sink. Every delivered
// event must equal the reference computation and arrive at the right sink; dropped
// events arrive nowhere; events with a type error land in the dead-letter stream with
// the step, the expression and the message.
#include <catch2/catch.hpp>
#include <map>

#include "reference_flow.h"
#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;
namespace ref = weir::flows::reference;

TEST_CASE("the reference flow through weir delivers what the reference computes", "[integration][flows]") {
  NatsServer nats;
  SinkProcess sink;
  std::string sinks = "  big: { http: { url: \"" + sink.url("/big") +
                      "\" } }\n"
                      "  vip: { http: { url: \"" +
                      sink.url("/vip") +
                      "\" } }\n"
                      "  small: { http: { url: \"" +
                      sink.url("/small") + "\" } }\n";
  WeirOptions options;
  options.nats_url = nats.url();
  options.flows = {{"ref.yaml", ref::flow_text("http: { path: /in/ref }", sinks)}};
  WeirProcess weir(options);
  weir.start();
  INFO(weir.describe());

  constexpr int kEvents = 300;
  std::mt19937 rng(7);
  std::map<std::string, ref::Expected> expected;  // by the event's "id"
  size_t emitted = 0, errors = 0, dropped = 0;
  for (int i = 0; i < kEvents; ++i) {
    json ev = ref::random_event(rng, i, "rt-");
    auto r = weir.post("/in/ref", ev.dump(), {"Content-Type: application/json"});
    REQUIRE(r.status == 202);
    ref::Expected x = ref::compute(ev);
    emitted += x.kind == weir::flows::Outcome::Kind::kEmit;
    errors += x.kind == weir::flows::Outcome::Kind::kError;
    dropped += x.kind == weir::flows::Outcome::Kind::kDropped;
    expected[ev["id"].get<std::string>()] = std::move(x);
  }
  REQUIRE(emitted > 150);
  REQUIRE(errors > 5);
  REQUIRE(dropped > 5);

  // Dead letters: every event with a type error, naming step, expression and message.
  json dlq;
  bool all_dead = wait_until(
      [&] {
        auto reply = weir.admin("GET", "/dlq");
        if (reply.status != 200) return false;
        dlq = json::parse(reply.body, nullptr, false);
        return dlq.is_array() && dlq.size() >= errors;
      },
      30s, 50ms);
  INFO("dlq: " << dlq.dump().substr(0, 2000));
  REQUIRE(all_dead);
  CHECK(dlq.size() == errors);
  for (const auto& d : dlq) {
    json event = d["event"].is_string() ? json::parse(d["event"].get<std::string>()) : d["event"];
    std::string id = event.value("id", "");
    INFO("dead letter: " << d.dump());
    REQUIRE(expected.count(id) == 1);
    const ref::Expected& x = expected[id];
    CHECK(x.kind == weir::flows::Outcome::Kind::kError);
    CHECK(d["flow"] == "ref");
    CHECK(d["stage"] == "flow");
    std::string reason = d["reason"].get<std::string>();
    CHECK(reason.find("flow ref v") == 0);
    CHECK(reason.find("step " + std::to_string(x.error_step) + " (") != std::string::npos);
    CHECK(reason.find(x.error_message) != std::string::npos);
    CHECK(reason.find(x.error_step == 1 ? "expression \"number(this.amount)\"" : "expression \"this.items.map(") !=
          std::string::npos);
  }

  // Deliveries: exactly the emitted events, each at its sink with the reference body.
  REQUIRE(wait_until([&] { return sink.stat("received") >= static_cast<int64_t>(emitted); }, 30s, 50ms));
  json requests = sink.requests(kEvents);
  REQUIRE(requests.is_array());
  CHECK(requests.size() == emitted);
  std::map<std::string, int> per_sink;
  for (const auto& req : requests) {
    json body = body_of(req);
    std::string id = body.value("id", "");
    INFO("delivered: " << req.value("path", "") << " " << body.dump());
    REQUIRE(expected.count(id) == 1);
    const ref::Expected& x = expected[id];
    REQUIRE(x.kind == weir::flows::Outcome::Kind::kEmit);
    CHECK(req.value("path", "") == "/" + x.sink);
    CHECK(body == x.event);
    ++per_sink[x.sink];
  }
  CHECK(per_sink["big"] > 0);
  CHECK(per_sink["vip"] > 0);
  CHECK(per_sink["small"] > 0);
  CHECK(sink.stat("duplicates") == 0);
}

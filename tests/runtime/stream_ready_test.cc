// await_stream_serving (docs/adr/0321-a-stream-that-serves.md) against a real nats-server:
// a stream that serves answers the probe and stores nothing; a subject no stream serves
// ends the wait at its timeout with an error naming the stream.
#include <catch2/catch.hpp>

#include <string>

#include "runtime/nats/bus.h"
#include "runtime/nats/stream_ready.h"
#include "tests/support/support.h"

using namespace weir;
using namespace weir::testing;

namespace {

std::unique_ptr<Bus> connect(const NatsServer& nats) {
  BusOptions o;
  o.url = nats.url();
  o.name = "stream-ready-test";
  o.stream_max_bytes = 1 << 20;
  auto bus = Bus::connect(o);
  REQUIRE(bus);
  return std::move(bus.value());
}

}  // namespace

TEST_CASE("a stream that serves answers the readiness probe and keeps nothing of it", "[integration][bus]") {
  NatsServer nats;
  auto bus = connect(nats);
  REQUIRE(bus->ensure_flow_stream("sr").is_ok());  // made, then probed
  REQUIRE(bus->ensure_dlq_stream(std::chrono::milliseconds(0), 0).is_ok());
  Status again = await_stream_serving(bus->jetstream(), "weir_sr", "weir.sr.serving", std::chrono::seconds(5));
  INFO(again.str());
  CHECK(again.is_ok());
  auto flow = bus->stream_state("weir_sr");
  REQUIRE(flow);
  CHECK(flow->messages == 0);
  CHECK(flow->last_seq == 0);  // nothing was ever stored
  auto dlq = bus->stream_state("weir_dlq");
  REQUIRE(dlq);
  CHECK(dlq->last_seq == 0);
}

TEST_CASE("a subject no stream serves: the wait for it ends at its timeout, naming the stream", "[integration][bus]") {
  NatsServer nats;
  auto bus = connect(nats);
  const auto started = std::chrono::steady_clock::now();
  Status s = await_stream_serving(bus->jetstream(), "weir_none", "weir.none.serving", std::chrono::milliseconds(300));
  const auto took = std::chrono::steady_clock::now() - started;
  INFO(s.str());
  CHECK(s.code() == Status::Code::kUnavailable);
  CHECK(s.message().find("stream weir_none does not serve yet") != std::string::npos);
  CHECK(took >= std::chrono::milliseconds(300));  // it kept asking until its timeout
}

// publish_failure_is_transient (runtime/nats/bus.h, ADR 0225) on nats-server's own answers: a
// full stream is a refusal although JetStream answers it with code 503, no answer at all
// is transient, and the answers parse_puback reads carry JetStream's codes.
#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <string>

#include "runtime/nats/bus.h"
#include "tests/support/support.h"

using namespace weir;
using namespace weir::testing;

namespace {

struct Outcome {
  Status status;
  PubAck ack;
};

Outcome publish_one(Bus& bus, const std::string& subject, const std::string& body) {
  std::mutex mu;
  std::atomic<bool> done{false};
  Outcome out;
  bus.publish(subject, body, {}, std::chrono::seconds(5), [&](const Status& s, const PubAck& a) {
    std::lock_guard lock(mu);
    out = {s, a};
    done = true;
  });
  REQUIRE(wait_until([&] { return done.load(); }, 10s));
  std::lock_guard lock(mu);
  return out;
}

}  // namespace

TEST_CASE("publish failures: a full stream is a refusal, no answer is transient", "[bus][poison]") {
  NatsServer nats;
  BusOptions o;
  o.url = nats.url();
  o.name = "puback-test";
  o.stream_max_bytes = 1 << 20;
  auto connected = Bus::connect(o);
  REQUIRE(connected);
  Bus& bus = *connected.value();
  REQUIRE(bus.ensure_flow_stream("tiny").is_ok());

  // Filled to its MaxBytes (discard new): "maximum bytes exceeded", code 503, err_code 10077.
  const std::string body(64 << 10, 'x');
  Outcome full;
  int stored = 0;
  for (int i = 0; i < 64; ++i) {
    full = publish_one(bus, "weir.tiny.in", body);
    if (!full.status) break;
    ++stored;
  }
  INFO(full.status.str());
  REQUIRE(stored > 0);
  REQUIRE_FALSE(full.status.is_ok());
  CHECK(full.status.code() == Status::Code::kUnavailable);  // http-in still answers 503
  CHECK(full.ack.js_error);
  CHECK(full.ack.js_code == 503);
  CHECK(full.ack.js_err_code == 10077);
  CHECK_FALSE(publish_failure_is_transient(full.status, full.ack));

  // No stream has the subject: "no responders", no JetStream answer.
  Outcome none = publish_one(bus, "weir.nobody.in", "{}");
  INFO(none.status.str());
  REQUIRE_FALSE(none.status.is_ok());
  CHECK_FALSE(none.ack.js_error);
  CHECK(publish_failure_is_transient(none.status, none.ack));

  // The other answers, as nats-server 2.9.10 words them.
  PubAck a;
  Status s;
  REQUIRE(parse_puback(R"({"error":{"code":503,"err_code":10023,"description":"insufficient resources"}})", &a, &s));
  CHECK_FALSE(publish_failure_is_transient(s, a));
  a = {};
  REQUIRE(parse_puback(
      R"({"error":{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}})", &a, &s));
  CHECK(publish_failure_is_transient(s, a));
  a = {};
  REQUIRE(parse_puback(R"({"stream":"weir_x","error":{"code":503,"description":"raft: not leader"}})", &a, &s));
  CHECK(publish_failure_is_transient(s, a));
  a = {};
  REQUIRE(parse_puback(R"({"error":{"code":503,"err_code":10077,"description":"store is closed"}})", &a, &s));
  CHECK(publish_failure_is_transient(s, a));
  a = {};
  REQUIRE(parse_puback(
      R"({"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}})", &a, &s));
  CHECK_FALSE(publish_failure_is_transient(s, a));
  CHECK(publish_failure_is_transient(Status::timeout("publish timed out"), PubAck{}));
  CHECK_FALSE(publish_failure_is_transient(Status::internal("unreadable PubAck"), PubAck{}));
}

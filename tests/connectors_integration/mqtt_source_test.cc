// The mqtt source against a real mosquitto, with a FakeIngest standing in for JetStream:
// the PUBACK waits for the PubAck, a redelivery keeps its id, failed writes are retried,
// oversized payloads become dead letters and are then acknowledged, the session survives a
// broker restart.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <set>

#include "connectors/mqtt/mqtt_source.h"
#include "tests/support/fake_ingest.h"
#include "tests/support/mosquitto.h"
#include "tests/support/test_mqtt_client.h"

using namespace std::chrono_literals;
using weir::connectors::MqttSource;
using weir::connectors::MqttSourceOptions;
using weir::ctest::FakeIngest;
using weir::ctest::Mosquitto;
using weir::ctest::TestMqttClient;
using weir::testing::wait_until;
using json = nlohmann::json;

namespace {

weir::flows::MqttSourceSpec spec_for(const Mosquitto& m, const std::string& client_id) {
  weir::flows::MqttSourceSpec s;
  s.broker = m.url();
  s.topics = {"t/#"};
  s.qos = 1;
  s.client_id = client_id;
  s.clean_session = false;
  return s;
}

struct Running {
  std::unique_ptr<MqttSource> source;
  weir::SourceContext ctx;
  Running(const weir::flows::MqttSourceSpec& spec, weir::Ingest& ingest, MqttSourceOptions options = {}) {
    options.stop_grace = 300ms;
    options.reconnect_min = 50ms;
    options.reconnect_max = 500ms;
    auto s = MqttSource::create(spec, options);
    REQUIRE(s.is_ok());
    source = std::move(s.value());
    ctx.flow = "f";
    ctx.ingest = &ingest;
    REQUIRE(source->start(ctx).is_ok());
    REQUIRE(wait_until([&] { return source->counters().subscribed.load() >= 1; }, 10s));
  }
};

std::string payload_of(const weir::IngestEvent& e) { return json::parse(e.body)["payload"].dump(); }

}  // namespace

TEST_CASE("mqtt source: the PUBACK waits for the PubAck - a redelivery has the same id", "[integration][mqtt]") {
  Mosquitto broker;
  auto spec = spec_for(broker, "weir-src-hold");
  TestMqttClient pub(broker.url(), "pub-hold");
  std::string first_id;
  {
    FakeIngest held(FakeIngest::Mode::kHold);
    Running r(spec, held);
    pub.publish("t/a", R"({"n":1})");
    REQUIRE(wait_until([&] { return held.count() == 1; }, 10s));
    first_id = held.events()[0].id;
    CHECK(first_id.rfind("mqtt-", 0) == 0);
    CHECK(json::parse(held.events()[0].body)["topic"] == "t/a");
    CHECK(r.source->counters().acked.load() == 0);
    r.source->stop();  // never acknowledged: the broker keeps it for the session
  }
  {
    FakeIngest ack;
    Running r(spec, ack);
    REQUIRE(wait_until([&] { return r.source->counters().acked.load() == 1; }, 10s));
    REQUIRE(ack.count() >= 1);
    CHECK(ack.events()[0].id == first_id);  // same Nats-Msg-Id: JetStream stores it once
    CHECK(payload_of(ack.events()[0]) == R"({"n":1})");
    r.source->stop();
  }
  {
    // Acknowledged now: a new session gets the next message and not the old one again.
    FakeIngest ack;
    Running r(spec, ack);
    pub.publish("t/b", R"({"n":2})");
    REQUIRE(wait_until([&] { return ack.count() >= 1; }, 10s));
    for (const auto& e : ack.events()) CHECK(e.id != first_id);
    CHECK(payload_of(ack.events()[0]) == R"({"n":2})");
  }
}

TEST_CASE("mqtt source: failed writes are retried with the same id - every message acknowledged once",
          "[integration][mqtt]") {
  Mosquitto broker;
  FakeIngest ingest(FakeIngest::Mode::kAck, 3);
  Running r(spec_for(broker, "weir-src-retry"), ingest);
  TestMqttClient pub(broker.url(), "pub-retry");
  for (int i = 0; i < 5; ++i) pub.publish("t/x", "{\"i\":" + std::to_string(i) + "}");
  REQUIRE(wait_until([&] { return r.source->counters().acked.load() == 5; }, 15s));
  CHECK(ingest.failed() == 3);
  CHECK(ingest.acked() == 5);
  CHECK(r.source->counters().retries.load() == 3);
  std::set<std::string> ids;
  std::map<std::string, std::string> body_of_id;
  for (const auto& e : ingest.events()) {
    ids.insert(e.id);
    if (body_of_id.count(e.id)) CHECK(body_of_id[e.id] == e.body);  // a retry is the same event
    body_of_id[e.id] = e.body;
  }
  CHECK(ids.size() == 5);
}

TEST_CASE("mqtt source: an oversized payload is one dead letter, PUBACKed once stored - the next one arrives",
          "[integration][mqtt]") {
  Mosquitto broker;
  auto spec = spec_for(broker, "weir-src-big");
  TestMqttClient pub(broker.url(), "pub-big");
  MqttSourceOptions o;
  o.max_payload = 100;
  {
    FakeIngest held(FakeIngest::Mode::kHold);
    Running r(spec, held, o);
    pub.publish("t/big", std::string(5000, 'x'));
    REQUIRE(wait_until([&] { return held.rejected().size() == 1; }, 10s));
    auto [letter, reason] = held.rejected()[0];
    CHECK(reason == "payload of 5000 bytes is over the limit of 100 bytes (mqtt max_payload)");
    CHECK(json::parse(letter.body) == json{{"topic", "t/big"}, {"qos", 1}, {"retain", false}, {"payload_size", 5000}});
    CHECK(letter.id.rfind("mqtt-", 0) == 0);        // a resend of it is the same dead letter
    CHECK(held.count() == 0);                       // never offered to the flow
    CHECK(r.source->counters().acked.load() == 0);  // the PUBACK waits for the dead letter
    held.complete_all();
    REQUIRE(wait_until([&] { return r.source->counters().acked.load() == 1; }, 10s));
    pub.publish("t/small", "\"ok\"");
    REQUIRE(wait_until([&] { return held.count() == 1; }, 10s));
    held.complete_all();
    REQUIRE(wait_until([&] { return r.source->counters().acked.load() == 2; }, 10s));
    CHECK(payload_of(held.events()[0]) == "\"ok\"");
    CHECK(held.rejected().size() == 1);
    CHECK(r.source->counters().dead_lettered.load() == 1);
    CHECK(r.source->counters().dropped.load() == 0);
    r.source->stop();
  }
  {
    // Acknowledged: the next session of the same client id gets the next message, and the
    // broker, which delivers in order, resends nothing before it.
    FakeIngest ack;
    Running r(spec, ack, o);
    pub.publish("t/after", "\"marker\"");
    REQUIRE(wait_until([&] { return ack.count() >= 1; }, 10s));
    CHECK(payload_of(ack.events()[0]) == "\"marker\"");
    CHECK(ack.rejected().empty());
  }
}

TEST_CASE("mqtt source: a payload that escapes past the event limit is dead-lettered with its sizes",
          "[integration][mqtt]") {
  Mosquitto broker;
  FakeIngest ingest;
  Running r(spec_for(broker, "weir-src-escaped"), ingest);
  TestMqttClient pub(broker.url(), "pub-escaped");
  // Within max_payload, but each control byte becomes a six-byte \u00XX in the event.
  pub.publish("t/ctl", std::string(300000, '\x01'));
  pub.publish("t/small", "2");
  REQUIRE(wait_until([&] { return r.source->counters().acked.load() == 2; }, 10s));
  auto rejected = ingest.rejected();
  REQUIRE(rejected.size() == 1);
  CHECK_THAT(rejected[0].second, Catch::Contains("(payload 300000 bytes, escaped as JSON) is over the limit of"));
  CHECK(json::parse(rejected[0].first.body) ==
        json{{"topic", "t/ctl"}, {"qos", 1}, {"retain", false}, {"payload_size", 300000}});
  REQUIRE(ingest.count() == 1);
  CHECK(payload_of(ingest.events()[0]) == "2");
}

TEST_CASE("mqtt source: reconnects after a broker restart and keeps its session", "[integration][mqtt]") {
  Mosquitto broker;
  FakeIngest ingest;
  Running r(spec_for(broker, "weir-src-restart"), ingest);
  TestMqttClient pub(broker.url(), "pub-restart");
  pub.publish("t/1", "1");
  REQUIRE(wait_until([&] { return r.source->counters().acked.load() == 1; }, 10s));
  broker.stop();
  broker.start();
  // Published before the source is back: the restored session queues it.
  TestMqttClient pub2(broker.url(), "pub-restart-2");
  pub2.publish("t/2", "2");
  REQUIRE(wait_until([&] { return r.source->counters().acked.load() == 2; }, 20s));
  CHECK(r.source->counters().connects.load() >= 2);
  auto events = ingest.events();
  REQUIRE(events.size() >= 2);
  CHECK(payload_of(events.back()) == "2");
}

TEST_CASE("mqtt source: QoS 0 messages get fresh ids and need no PUBACK", "[integration][mqtt]") {
  Mosquitto broker;
  FakeIngest ingest;
  auto spec = spec_for(broker, "weir-src-qos0");
  spec.qos = 0;
  spec.clean_session = true;
  Running r(spec, ingest);
  TestMqttClient pub(broker.url(), "pub-qos0");
  pub.publish("t/q", "same", 0);
  pub.publish("t/q", "same", 0);
  REQUIRE(wait_until([&] { return ingest.count() == 2; }, 10s));
  auto events = ingest.events();
  CHECK(events[0].id.empty());  // the runtime assigns a fresh id
  CHECK(json::parse(events[0].body)["qos"] == 0);
  CHECK(r.source->counters().acked.load() == 0);
}

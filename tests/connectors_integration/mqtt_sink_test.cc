// The mqtt sink against a real mosquitto: ok only after the PUBACK, every delivery of a
// full window accepted by Paho, retry while the broker is away, dead on a bad topic.
#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <set>

#include "connectors/mqtt/mqtt_sink.h"
#include "tests/support/mosquitto.h"
#include "tests/support/test_mqtt_client.h"

using namespace std::chrono_literals;
using weir::DeliveryResult;
using weir::connectors::MqttSink;
using weir::ctest::Mosquitto;
using weir::ctest::TestMqttClient;
using weir::testing::wait_until;

namespace {

struct Results {
  std::mutex mu;
  std::vector<DeliveryResult> all;
  std::function<void(DeliveryResult)> cb() {
    return [this](DeliveryResult r) {
      std::lock_guard lock(mu);
      all.push_back(std::move(r));
    };
  }
  size_t count(DeliveryResult::Kind k) {
    std::lock_guard lock(mu);
    size_t n = 0;
    for (const auto& r : all) n += r.kind == k;
    return n;
  }
  size_t size() {
    std::lock_guard lock(mu);
    return all.size();
  }
  std::string reasons() {
    std::lock_guard lock(mu);
    std::string s;
    for (const auto& r : all) {
      if (!r.reason.empty()) s += r.reason + "\n";
    }
    return s.substr(0, 2000);
  }
};

// `topic` as a flow file writes it (`out/t`, or `{expr: "…"}`), through the loader.
std::unique_ptr<MqttSink> make_sink(const Mosquitto& m, const std::string& topic) {
  auto loaded = weir::flows::load_flow_text("flow: f\nfrom: { http: { path: /f } }\nto: { out: { mqtt: { broker: \"" +
                                                m.url() + "\", topic: " + topic + " } } }\n",
                                            "f.yaml");
  REQUIRE(loaded.diagnostics.empty());
  weir::flows::MqttSinkSpec s = std::get<weir::flows::MqttSinkSpec>(loaded.flow->sinks()[0].kind);
  s.qos = 1;
  s.client_id = "weir-sink-test";
  weir::connectors::MqttSinkOptions o;
  o.reconnect_min = 50ms;
  o.reconnect_max = 200ms;
  auto r = MqttSink::create(s, "f", "out", o);
  REQUIRE(r.is_ok());
  auto sink = std::move(r.value());
  REQUIRE(sink->start().is_ok());
  REQUIRE(wait_until([&] { return sink->connected(); }, 10s));
  return sink;
}

}  // namespace

// Regression: Paho refused publishes with -12 ("no more messages can be buffered") once
// more than 100 waited in its command queue, so a full window came back as retries.
TEST_CASE("mqtt sink: a full window of deliveries at once is accepted and confirmed", "[integration][mqtt]") {
  Mosquitto broker;
  TestMqttClient sub(broker.url(), "sink-window-sub");
  sub.subscribe("out/w");
  auto sink = make_sink(broker, "out/w");
  Results results;
  const int n = sink->max_in_flight();
  for (int i = 0; i < n; ++i) {
    sink->deliver({"e" + std::to_string(i), "{\"i\":" + std::to_string(i) + "}", 1}, results.cb());
  }
  REQUIRE(wait_until([&] { return results.size() == static_cast<size_t>(n); }, 20s));
  INFO(results.reasons());
  CHECK(results.count(DeliveryResult::Kind::kOk) == static_cast<size_t>(n));
  REQUIRE(wait_until([&] { return sub.count() >= static_cast<size_t>(n); }, 10s));
  // Every payload once, by content: a count alone would pass one duplicate plus one loss.
  std::multiset<std::string> got;
  for (const auto& a : sub.arrivals()) got.insert(a.payload);
  for (int i = 0; i < n; ++i) CHECK(got.count("{\"i\":" + std::to_string(i) + "}") == 1);
  CHECK(got.size() == static_cast<size_t>(n));
  sink->stop();
}

TEST_CASE("mqtt sink: retry while the broker is away - ok again once it is back", "[integration][mqtt]") {
  Mosquitto broker;
  auto sink = make_sink(broker, "out/r");
  broker.stop();
  REQUIRE(wait_until([&] { return !sink->connected(); }, 10s));
  Results away;
  sink->deliver({"e1", "{}", 1}, away.cb());
  REQUIRE(away.size() == 1);
  CHECK(away.all[0].kind == DeliveryResult::Kind::kRetry);
  CHECK(away.all[0].reason.find("not connected") != std::string::npos);
  broker.start();
  REQUIRE(wait_until([&] { return sink->connected(); }, 15s));
  Results back;
  sink->deliver({"e1", "{}", 2}, back.cb());
  REQUIRE(wait_until([&] { return back.size() == 1; }, 10s));
  CHECK(back.all[0].kind == DeliveryResult::Kind::kOk);
}

TEST_CASE("mqtt sink: a topic expression routes each event - a bad result is dead", "[integration][mqtt]") {
  Mosquitto broker;
  TestMqttClient sub(broker.url(), "sink-expr-sub");
  sub.subscribe("devices/#");
  auto sink = make_sink(broker, R"({expr: "'devices/' + this.device + '/cmd'"})");
  Results results;
  sink->deliver({"e1", R"({"device":"d1","on":true})", 1}, results.cb());
  sink->deliver({"e2", R"({"device":"+"})", 1}, results.cb());
  REQUIRE(wait_until([&] { return results.size() == 2; }, 10s));
  CHECK(results.count(DeliveryResult::Kind::kOk) == 1);
  CHECK(results.count(DeliveryResult::Kind::kDead) == 1);
  REQUIRE(wait_until([&] { return sub.count() == 1; }, 10s));
  auto a = sub.arrivals();
  CHECK(a[0].topic == "devices/d1/cmd");
  CHECK(a[0].payload == R"({"device":"d1","on":true})");
}

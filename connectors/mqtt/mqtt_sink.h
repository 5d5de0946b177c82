// MqttSink: the `to: {x: {mqtt: {broker, topic, qos, retain, ...}}}` sink, on Paho MQTT C++
// (async_client). Each delivery is one PUBLISH of the event JSON; `done(ok)` comes only
// when the broker confirmed it (QoS 1: its PUBACK; QoS 0: the packet was written).
//
// Topic: a plain topic (`out/orders`), or an expression over the event when the text
// compiles as one and reads `this` (`"'devices/' + this.device + '/cmd'"`). A quoted
// constant (`"'out/x'"`) is a plain topic. An expression that fails or gives anything
// but a non-empty topic without wildcards makes the delivery dead, with the reason.
//
// Results: not connected, a publish Paho refuses, a failure callback, or no confirmation
// within `ack_timeout` → retry (the sink stage naks with backoff and dead-letters past
// `retries`). MQTT 3.1.1 has no headers, so the event id does not travel with the message.
//
// Connection: clean session (the bus keeps what is not confirmed); the first connect and
// every reconnect after a loss are attempted by the sink's own thread: at once after a
// loss, then every 250 ms, then every 500 ms, so the sink is back within about 1.5 s of its
// broker (Paho adds up to 1 s of its own; docs/adr/0315-broker-sink-health.md), and a broker
// that is down at start does not keep weir from starting. broker_link() says whether it is connected, since when and
// why not, in words (mqtt_errors.h); /status, the dashboard and /readyz show it.
//
// Threading: deliver() from any thread (the sink stage); `done` runs on a Paho thread or
// on the sink's thread ("mqtt-sink", timeouts and reconnects). start()/stop() once each,
// from the owner's thread. stop(): disconnects (1 s for confirmations to arrive), then
// completes every delivery still waiting as retry.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "flows/flow.h"
#include "runtime/ports/sink.h"

namespace weir::connectors {

struct MqttSinkOptions {
  std::chrono::milliseconds ack_timeout{5000};
  std::chrono::milliseconds reconnect_min{250};
  std::chrono::milliseconds reconnect_max{500};
  int max_in_flight = 256;
};

class MqttSink final : public weir::Sink {
 public:
  // Validates the spec: broker URL, topic (plain or expression), qos, credentials' env names.
  static Result<std::unique_ptr<MqttSink>> create(const flows::MqttSinkSpec& spec, std::string flow,
                                                  std::string sink_name, MqttSinkOptions options = {});
  ~MqttSink() override;
  MqttSink(const MqttSink&) = delete;
  MqttSink& operator=(const MqttSink&) = delete;

  Status start() override;  // reads credentials from the environment; connects in the background
  void stop() override;
  int max_in_flight() const override;
  int max_retries() const override;
  void deliver(Delivery delivery, std::function<void(DeliveryResult)> done) override;

  // The topic a delivery of `event_json` goes to, or why there is none (dead). `meta`: the
  // event's request metadata as JSON text (Delivery::meta), read as `meta`.
  Result<std::string> topic_for(const std::string& event_json, const std::string& meta = {}) const;
  bool connected() const;
  std::optional<BrokerLink> broker_link() const override;

  struct Impl;

 private:
  explicit MqttSink(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

Result<std::unique_ptr<weir::Sink>> make_mqtt_sink(const flows::MqttSinkSpec& spec, std::string flow,
                                                   std::string sink_name, MqttSinkOptions options = {});

// True when `topic` is a topic one may publish to (non-empty, no '+' '#' or NUL, UTF-8).
bool valid_publish_topic(std::string_view topic);

}  // namespace weir::connectors

// MqttSource: the `mqtt` source. Subscribes to topic filters on a broker and writes each
// message to the flow's input stream; a QoS 1 message is acknowledged to the broker
// (PUBACK) only after JetStream acknowledged its write (docs/architecture.md, guarantee 1).
//
// Paho C 1.3.12 sends a QoS 1 PUBACK as soon as its messageArrived callback returns and
// offers no manual acknowledgement, so this source speaks MQTT 3.1.1 itself on one socket
// (connectors/mqtt/mqtt_codec.h, mqtt_transport.h); docs/adr/0060-mqtt-source-session.md.
//
// What a flow sees (`this`): {"topic": "...", "payload": <the payload parsed as JSON, or
// its text when it is not JSON>, "qos": 0|1, "retain": bool}; a payload that is not UTF-8
// text comes as "payload_base64" instead of "payload". Headers on the bus: Weir-Topic, and
// Weir-Fence under a lease.
//
// Event ids (docs/adr/0061-mqtt-event-ids.md): a QoS 1 message's id is derived from the
// client id, the topic, the packet id and the payload, so the broker's redelivery of an
// unacknowledged message (same session, same packet id, DUP set) has the same
// Nats-Msg-Id and is stored once. QoS 0 messages are never redelivered and get fresh ids.
//
// Sessions: `clean_session: false` (the default) keeps the subscription and the
// unacknowledged messages in the broker while weir is down; reconnects back off from
// 250 ms to 30 s. The source is a cluster singleton: one connection per client id holds
// the session, and a failover resumes it.
//
// Threading: start/stop from the owner's thread. One thread per source ("mqtt-src") owns
// the socket, reads, writes PUBACKs and PINGREQs, and retries failed publishes; publish
// callbacks (bus threads) only queue a completion and wake it. Callbacks may outlive the
// source: they hold the shared completion queue, never the source.
//
// Limits: at most `max_in_flight` messages are being written at once (then the socket is
// not read, and the broker holds the rest). A message that can never be stored in the
// flow — a payload over `max_payload`, an event that escapes past ~1 MiB, or one the NATS
// server refuses as too large — is dead-lettered (stage `source`) with the reason and a
// small stand-in body, mqtt_unstorable_body(), and PUBACKed once the dead letter is
// stored (docs/adr/0291-mqtt-oversized-dead-letters.md).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include <string_view>

#include "flows/flow.h"
#include "runtime/ports/source.h"

namespace weir::connectors {

struct MqttSourceOptions {
  std::chrono::milliseconds publish_timeout{5000};
  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::milliseconds reconnect_min{250};
  std::chrono::milliseconds reconnect_max{30000};
  std::chrono::seconds keep_alive{30};
  size_t max_in_flight = 1024;
  size_t max_payload = 1000 * 1024;            // under NATS' default 1 MiB max_payload, with room for the envelope
  std::chrono::milliseconds stop_grace{2000};  // stop(): time to finish writes and send their PUBACKs
};

struct MqttSourceCounters {
  std::atomic<uint64_t> received{0};       // PUBLISH packets read
  std::atomic<uint64_t> published{0};      // written to JetStream (PubAck ok, duplicates included)
  std::atomic<uint64_t> acked{0};          // PUBACKs sent
  std::atomic<uint64_t> retries{0};        // publishes retried after a failure
  std::atomic<uint64_t> dead_lettered{0};  // written to the dead-letter stream (too big, too deep)
  std::atomic<uint64_t> dropped{0};        // acknowledged with only a log line: not even the stand-in fit
  std::atomic<uint64_t> connects{0};       // sessions established (CONNACK accepted)
  std::atomic<uint64_t> subscribed{0};     // SUBACKs received (one per session)
};

class MqttSource final : public Source {
 public:
  // Validates the spec (broker URL, topics, QoS, TLS files) — a failure is a clear
  // start-up error. Credentials are read from the environment in start().
  static Result<std::unique_ptr<MqttSource>> create(const flows::MqttSourceSpec& spec, MqttSourceOptions options = {});
  ~MqttSource() override;  // stops
  MqttSource(const MqttSource&) = delete;
  MqttSource& operator=(const MqttSource&) = delete;

  Status start(SourceContext& context) override;
  void stop() override;  // idempotent; no publish starts after it returns
  bool singleton() const override { return true; }
  const MqttSourceCounters& counters() const;

  struct Impl;

 private:
  explicit MqttSource(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

Result<std::unique_ptr<Source>> make_mqtt_source(const flows::MqttSourceSpec& spec, MqttSourceOptions options = {});

// The event a message becomes (exposed for tests).
// `max_depth` bounds the stored event's nesting: a JSON payload that would
// make it deeper returns "" and sets *too_deep to the reason (the caller dead-letters it).
std::string mqtt_event_body(std::string_view topic, std::string_view payload, int qos, bool retain, int max_depth = 128,
                            std::string* too_deep = nullptr);
// The dead letter's body for a message that can never be stored (its payload is not
// kept: it is too big for the flow, maybe for NATS): {"topic", "qos", "retain",
// "payload_size"} — the event's shape without "payload". A topic that is not UTF-8 is
// made printable as in the Weir-Topic header, its invalid bytes as U+FFFD.
std::string mqtt_unstorable_body(std::string_view topic, int qos, bool retain, size_t payload_size);
// `generation` tells apart messages that reuse a packet id within the dedup window (MqttIds).
std::string mqtt_event_id(std::string_view client_id, std::string_view topic, uint16_t packet_id,
                          std::string_view payload, uint32_t generation = 0);

// The ids of QoS 1 messages (docs/adr/0061-mqtt-event-ids.md): the same for the broker's
// redelivery of a message (DUP set, its packet id still unacknowledged, or after a restart),
// different for a new message that reuses a packet id within JetStream's dedup window with
// the same topic and payload (a session above ~182 messages/s wraps the 65,535 ids inside
// the flow streams' 360 s). A packet id's first new message in a window has generation 0
// — the id of ADR 0061, computable again after a kill -9 —, each further one inside the
// window the next generation. Session thread only; 512 KiB per source.
class MqttIds {
 public:
  // How long a packet id's use is remembered: the flow streams' duplicate window (360 s,
  // ADR 0102) and a minute of margin.
  static constexpr std::chrono::seconds kWindow{420};
  std::string next(std::string_view client_id, std::string_view topic, uint16_t packet_id, bool dup,
                   std::string_view payload, std::chrono::steady_clock::time_point now);
  void acknowledged(uint16_t packet_id) { open_[packet_id] = false; }

 private:
  std::vector<std::chrono::steady_clock::time_point> last_new_ = std::vector<std::chrono::steady_clock::time_point>(
      65536);
  std::vector<uint32_t> generation_ = std::vector<uint32_t>(65536, 0);
  std::vector<bool> open_ = std::vector<bool>(65536, false);  // received, not acknowledged
};
// True when `filter` is a valid MQTT topic filter ('+' and '#' only as whole levels, '#' last).
bool valid_topic_filter(std::string_view filter);

}  // namespace weir::connectors

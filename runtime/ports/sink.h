// Sink: the interface every output connector implements (http, mqtt, nats, ...).
//
// The runtime's sink stage receives events from the sink's durable consumer, calls
// `deliver` for each, bounded by `max_in_flight()`, and acts on the result:
//   kOk    → ack on the bus;
//   kRetry → tried again on the retry schedule (or after `retry_after`), dead-lettered past
//            `retries` or `give_up_after`; counts toward the sink's circuit breaker
//            (docs/adr/0294, 0295);
//   kDead  → dead-letter at once with `reason`.
// Lifecycle: constructed from a validated spec, `start()` once, `deliver()` from the sink
// loop's thread, `weir-sinks` or `weir-delivery` (ADR 0258, 0272; a thread of cnats' delivery pool when the Bus's
// loops are off, ADR 0150; one sink's calls never overlap) — it must queue and return,
// never block — `stop()` once, never from that thread (no deliver after). `done` is called
// exactly once per deliver, on a thread of the sink's choosing (the HTTP sink: the thread
// that delivered, ADR 0260); it must be cheap and must not block.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "flows/flow.h"
#include "runtime/base/status.h"

namespace weir {

struct Delivery {
  std::string event_id;  // stable event id; sent as Idempotency-Key where the protocol allows
  std::string body;      // the event as JSON text
  uint64_t attempt = 1;  // 1 on the first delivery, 2 on the first re-send, ...
  // W3C trace context of this delivery's span (the sink stage's child span; ADR 0140):
  // sinks send it on where the protocol has headers. tracestate may be empty.
  std::string traceparent;
  std::string tracestate;
  // The event's request metadata as JSON text (layout::kHeaderMeta); empty when it has none.
  // Sink expressions read it as `meta` (docs/adr/0312-request-metadata.md).
  std::string meta;
};

struct DeliveryResult {
  enum class Kind { kOk, kRetry, kDead };
  Kind kind = Kind::kOk;
  std::string reason;  // kRetry/kDead: why ("HTTP 503", "timeout", ...)
  std::optional<std::chrono::milliseconds> retry_after;
  static DeliveryResult ok() { return {}; }
  static DeliveryResult retry(std::string r, std::optional<std::chrono::milliseconds> after = {}) {
    return {Kind::kRetry, std::move(r), after};
  }
  static DeliveryResult dead(std::string r) { return {Kind::kDead, std::move(r), {}}; }
};

// A broker sink's connection (MQTT, NATS): what /status, the dashboard and /readyz show
// while it is down (docs/adr/0315-broker-sink-health.md). HTTP sinks have none: a receiver
// is judged by its answers (the circuit, ADR 0294).
struct BrokerLink {
  std::string broker;  // host:port, never credentials
  bool connected = false;
  int64_t since_ms = 0;    // wall clock (ms since the epoch) of the last change; 0: the first attempt is under way
  std::string last_error;  // why it is (or last was) down, in words; "" when none yet
};

class Sink {
 public:
  virtual ~Sink() = default;
  virtual Status start() = 0;
  virtual void stop() = 0;
  virtual int max_in_flight() const = 0;
  // `retries: N`, or flows::kNoRetryCap: the attempt cap (dead-lettered after N + 1 attempts).
  virtual int max_retries() const = 0;
  // The waits between an event's attempts and when it is given up (docs/adr/0295).
  virtual flows::RetrySpec retry_policy() const { return {}; }
  // `order_by`: the key whose events go one at a time, in stream order (ADR 0310); null for
  // none. Lives as long as the sink.
  virtual const flows::EventExpression* order_by() const { return nullptr; }
  // Deliveries the sink holds in its own queue (waiting for a connection or, with `rate:`,
  // for a token; ADR 0296) — a gauge, read from any thread. 0 for sinks without a queue.
  virtual int64_t queued() const { return 0; }
  // Broker sinks: the connection's state, read from any thread; nullopt for sinks without one.
  virtual std::optional<BrokerLink> broker_link() const { return std::nullopt; }
  virtual void deliver(Delivery delivery, std::function<void(DeliveryResult)> done) = 0;
};

}  // namespace weir

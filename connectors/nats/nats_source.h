// NatsSource: the `nats` source. Subscribes to a core NATS subject (wildcards allowed) in a
// queue group (default `weir-<flow>`), so the instances of a cluster share the messages,
// and writes each message to the flow's input stream.
//
// What a flow sees (`this`): {"subject": "...", "payload": <the data parsed as JSON, or
// its text>, "headers": {name: value}} ("headers" only when the message has some; a
// repeated header keeps its first value; data that is not UTF-8 text comes as
// "payload_base64"). Event id: the message's `Nats-Msg-Id` header, else its
// `Idempotency-Key` header, else a fresh id.
//
// Confirmation: core NATS has no acknowledgement, so a plain message is at most once from
// the publisher's view. A request (a message with a reply subject) is answered only after
// the PubAck: `{"id": "<event id>"}`, or `{"error": "..."}` when JetStream did not store
// it, so a requester that waits for the answer gets at-least-once. A plain message whose
// write fails is retried with backoff (same id) while the source runs.
//
// Backpressure: at most `max_in_flight` messages wait for their PubAck; past that the
// subscription's delivery thread waits, and cnats' pending limits (then the server's
// slow-consumer rule) apply — core NATS semantics.
//
// Threading: cnats' delivery thread for the subscription runs the message callback (turns
// the message into an event and queues it); one thread of the source's ("nats-src")
// publishes and retries; replies go out from bus threads. Callbacks may outlive the source:
// they hold shared state, and the connection is detached from it under its lock in stop().
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "flows/flow.h"
#include "runtime/ports/source.h"

namespace weir::connectors {

struct NatsSourceOptions {
  std::string url;  // the NATS the runtime uses (RuntimeConfig::nats.url)
  std::string creds_file;
  std::chrono::milliseconds publish_timeout{5000};
  size_t max_in_flight = 4096;
};

Result<std::unique_ptr<Source>> make_nats_source(const flows::NatsSourceSpec& spec, NatsSourceOptions options);

// The event body for one message (exposed for tests). headers: name → first value.
// `max_depth` bounds the stored event's nesting: a JSON payload that would
// make it deeper returns "" and sets *too_deep to the reason (the caller dead-letters it).
std::string nats_event_body(std::string_view subject, std::string_view data,
                            const std::vector<std::pair<std::string, std::string>>& headers, int max_depth = 128,
                            std::string* too_deep = nullptr);

}  // namespace weir::connectors

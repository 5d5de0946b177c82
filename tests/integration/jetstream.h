// Direct JetStream access for tests that must reach past weir: write into a flow's
// stream without ingress, stall a flow by removing its consumer, read a stream's state.
// Each call opens its own connection (slow path, test setup only) and throws
// std::runtime_error on failure.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace weir::itest {

// Publishes `body` with a Weir-Id header and waits for the PubAck.
void js_publish(const std::string& url, const std::string& subject, const std::string& id, const std::string& body);
// Publishes each (id, body) in turn on one connection, waiting for each PubAck.
void js_publish_all(const std::string& url, const std::string& subject,
                    const std::vector<std::pair<std::string, std::string>>& events);
// Deletes a durable consumer.
void js_delete_consumer(const std::string& url, const std::string& stream, const std::string& consumer);

// A durable consumer's AckWait and max_ack_pending.
struct JsConsumerConfig {
  std::chrono::milliseconds ack_wait{0};
  int64_t max_ack_pending = 0;
};
JsConsumerConfig js_consumer_config(const std::string& url, const std::string& stream, const std::string& consumer);
// Sets a durable consumer's AckWait (the rest of its configuration unchanged), as an older
// weir would have left it.
void js_set_consumer_ack_wait(const std::string& url, const std::string& stream, const std::string& consumer,
                              std::chrono::milliseconds ack_wait);

// Replaces a stream's subjects (the rest of its configuration unchanged); returns the old
// ones. A publish to a subject no stream has any more gets "no responders".
std::vector<std::string> js_set_stream_subjects(const std::string& url, const std::string& stream,
                                                const std::vector<std::string>& subjects);

struct JsStreamState {
  int64_t bytes = 0, messages = 0, max_bytes = 0;
};
JsStreamState js_stream_state(const std::string& url, const std::string& stream);

}  // namespace weir::itest

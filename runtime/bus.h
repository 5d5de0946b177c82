// Bus: weir's one wrapper around cnats and JetStream (docs/adr/0002-bus-layout.md).
//
// Owns the NATS connection, tracks whether it is up, sets up the streams and durable
// consumers of the bus layout, and publishes to JetStream *pipelined*: every publish
// carries its own reply inbox, many are in flight at once on one connection, and each
// completes through its own callback (PubAck, JetStream error, timeout, or disconnect).
// cnats' js_PublishAsync has neither per-message callbacks nor per-message deadlines,
// which ingress (answer each HTTP request) and stages (ack each input) both need.
//
// Threading: every method is thread-safe. Publish callbacks run on a cnats delivery
// thread or on the deadline sweeper thread; they must be quick and must not block.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/status.h"

struct __natsConnection;
struct __natsMsg;
struct __natsSubscription;
struct __jsCtx;

namespace weir {

using Headers = std::vector<std::pair<std::string, std::string>>;

// Names of the bus layout. One stream per flow holds its input and its sinks' queues.
namespace layout {
std::string flow_stream(std::string_view flow);                  // weir_<flow>
std::string input_subject(std::string_view flow);                // weir.<flow>.in
std::string output_subject(std::string_view flow, std::string_view sink);  // weir.<flow>.out.<sink>
std::string flow_consumer(std::string_view flow);                // <flow>
std::string sink_consumer(std::string_view flow, std::string_view sink);   // <flow>-to-<sink>
inline constexpr const char* kDlqStream = "weir_dlq";
std::string dlq_subject(std::string_view flow, std::string_view stage);    // weir.dlq.<flow>.<stage>
// Header names carried on bus messages.
inline constexpr const char* kHeaderId = "Weir-Id";             // stable event id
inline constexpr const char* kHeaderMsgId = "Nats-Msg-Id";      // per-hop dedup key
inline constexpr const char* kHeaderVersion = "Weir-Version";
inline constexpr const char* kHeaderIngestUs = "Weir-Ingest-Us";
}  // namespace layout

struct BusOptions {
  std::string url;
  std::string creds_file;                 // optional .creds file
  std::string name = "weir";
  std::chrono::milliseconds reconnect_wait{250};
  int stream_replicas = 1;
  std::chrono::seconds dedup_window{360};  // ≥ webhook timestamp tolerance (5 min) + 1 min skew: replays dedup (ADR 0102)
  int64_t stream_max_bytes = 1LL << 30;   // per flow stream; the bound on a stalled sink's backlog
  std::function<void(bool connected)> on_connection_change;
};

struct PubAck {
  uint64_t sequence = 0;
  bool duplicate = false;
};

using PublishCallback = std::function<void(const Status&, const PubAck&)>;

// A fetched JetStream message. Owns the natsMsg; destroys it in the destructor.
class BusMessage {
 public:
  explicit BusMessage(__natsMsg* msg) : msg_(msg) {}
  ~BusMessage();
  BusMessage(const BusMessage&) = delete;
  BusMessage& operator=(const BusMessage&) = delete;

  std::string_view data() const;
  std::string_view subject() const;
  std::string_view header(const char* name) const;   // "" when absent
  uint64_t deliveries() const;                        // 1 on first delivery
  uint64_t stream_sequence() const;
  uint64_t pending() const;                           // messages left in the consumer after this one
  void ack();
  void nak(std::chrono::milliseconds delay);
  void term();

 private:
  void load_meta() const;
  __natsMsg* msg_;
  mutable bool meta_loaded_ = false;
  mutable uint64_t deliveries_ = 1, sequence_ = 0, pending_ = 0;
};

struct ConsumerOptions {
  std::string stream, durable, filter_subject;
  std::chrono::milliseconds ack_wait{30000};
  int64_t max_ack_pending = 1000;
  int replicas = 0;                       // 0 = as the stream
};

// A durable pull consumer bound by one or more processes (work is shared).
class PullConsumer {
 public:
  ~PullConsumer();
  // Up to `batch` messages; returns as soon as at least one is there, or empty after
  // `wait`. Not thread-safe: one fetcher per PullConsumer.
  Result<std::vector<std::unique_ptr<BusMessage>>> fetch(int batch, std::chrono::milliseconds wait);

 private:
  friend class Bus;
  __natsSubscription* sub_ = nullptr;
};

struct StoredMessage {
  uint64_t sequence = 0;
  std::string subject;
  std::string data;
  Headers headers;
  int64_t time_ns = 0;
};

class Bus {
 public:
  static Result<std::unique_ptr<Bus>> connect(BusOptions options);
  ~Bus();

  bool connected() const { return connected_.load(std::memory_order_acquire); }
  const std::string& url() const { return options_.url; }

  // Stream and consumer setup; idempotent (updates what changed).
  Status ensure_flow_stream(std::string_view flow);
  Status ensure_dlq_stream();
  Result<std::unique_ptr<PullConsumer>> pull_consumer(const ConsumerOptions& options);

  // Pipelined JetStream publish. `done` is called exactly once.
  void publish(std::string_view subject, std::string_view data, const Headers& headers,
               std::chrono::milliseconds timeout, PublishCallback done);

  // Direct stream access (admin/DLQ; synchronous, not for hot paths).
  Result<std::pair<uint64_t, uint64_t>> stream_bounds(const std::string& stream);  // first, last
  Result<StoredMessage> get_message(const std::string& stream, uint64_t seq);
  Status delete_message(const std::string& stream, uint64_t seq);

  __natsConnection* connection() { return nc_; }   // for cluster/ (KV); not owned by the caller
  __jsCtx* jetstream() { return js_; }

  size_t pending_publishes() const;

 private:
  Bus() = default;
  struct Publisher;
  Status add_or_update_stream(const std::string& name, const std::vector<std::string>& subjects,
                              bool work_queue, int64_t max_age_ns);
  void set_connected(bool up);

  BusOptions options_;
  __natsConnection* nc_ = nullptr;
  __jsCtx* js_ = nullptr;
  std::atomic<bool> connected_{false};
  std::atomic<bool> closed_{false};   // set by cnats' closed callback, the last one it delivers
  std::unique_ptr<Publisher> publisher_;
};

// Maps a cnats status to a Status with `what` as context.
Status nats_status(int s, std::string_view what);

}  // namespace weir

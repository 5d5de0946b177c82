// DeadLetters: the dead-letter stream (`weir_dlq`, subjects weir.dlq.<flow>.<stage>).
// Every dead letter carries headers naming flow, version, stage, reason, delivery
// count, event id and the subject it is replayed into; the body is the event as it
// was when it died. Listing and replay are admin operations (synchronous, slow path).
//
// Retention (`dlq: {max_age, max_bytes}`, docs/adr/0090-dlq-retention-holds.md): the
// stream refuses a write past max_bytes (discard-new) instead of dropping the oldest
// dead letter; the stage whose write failed naks its event, which comes back later
// (held, never dropped). `holding()` says so for /readyz and the metrics.
//
// Thread safety: all methods are thread-safe. `publish` completes on a bus thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/nats/bus.h"
#include "runtime/base/status.h"
#include "runtime/base/thread_annotations.h"

namespace weir {

struct DeadLetter {
  std::string flow;
  int64_t version = 0;
  std::string stage;  // "flow" or "sink:<name>"
  std::string reason;
  uint64_t deliveries = 0;
  std::string event_id;
  std::string replay_subject;  // where replay puts it back
  std::string_view body;
  uint64_t source_sequence = 0;  // the dying message's stream sequence (dedup key)
  std::string source_stream;
  std::string source_key;        // instead of the sequence when the event never had one (a source)
  std::string_view traceparent;  // the event's trace context, kept on the dead letter (ADR 0140)
  std::string_view tracestate;
};

// One page of GET /dlq. Dead letters are listed in stream order (oldest first).
struct DeadLetterQuery {
  std::optional<std::string> flow;      // only this flow
  std::optional<std::string> id;        // only dead letters of this event id
  uint64_t after_seq = 0;               // start after this stream sequence (exact cursor)
  std::optional<std::string> after_id;  // start after the first dead letter with this id
  size_t limit = 100;
};

struct DeadLetterPage {
  nlohmann::json items = nlohmann::json::array();  // GET /dlq's shape (docs/admin-api.md) + "seq"
  bool more = false;                               // another matching dead letter follows the last item
  uint64_t last_seq = 0;                           // the cursor for the next page (after_seq)
  std::string last_id;
};

class DeadLetters {
 public:
  static constexpr size_t kMaxPage = 1000;
  // GET /dlq reads the stream in batches of this many when it filters (flow, id, after),
  // and gives up past kListTimeout (503).
  static constexpr size_t kScanBatch = 256;
  static constexpr std::chrono::milliseconds kListTimeout{5000};

  explicit DeadLetters(Bus& bus) : bus_(bus) {}
  // Writes one dead letter; `done` after its PubAck. Only then may the input be acked.
  // `via`: the stage's consumer, whose loop connection carries it (PullConsumer::publish:
  // never a blocking write on a loop thread, and the completion on that loop); null: the
  // Bus's control connection.
  void publish(const DeadLetter& letter, PublishCallback done, PullConsumer* via = nullptr);
  // One page; not_found when `after_id` names no stored dead letter. A few round trips
  // per page (Bus::read_stream), not one per dead letter.
  Result<DeadLetterPage> list(const DeadLetterQuery& query);
  // Puts dead letters back into the stage they died in and removes them from the stream.
  // Selects all, or those of `flow`, or those whose id is in `ids`. Returns how many.
  Result<size_t> replay(const std::optional<std::string>& flow, const std::vector<std::string>& ids);

  // True while the last write to the stream failed, less than kHoldingFor ago (full at
  // max_bytes, or NATS away): stages hold their dead letters-to-be and retry them about
  // every second, so a hold that ended (the events were delivered after all) clears
  // itself. `why` gets the last error.
  static constexpr std::chrono::milliseconds kHoldingFor{10000};
  bool holding(std::string* why) const;
  // weir_dlq_* lines (Prometheus text).
  void render_metrics(std::string& out) const;

 private:
  void record(const Status& s);

  Bus& bus_;
  std::atomic<uint64_t> written_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<bool> holding_{false};
  std::atomic<int64_t> last_refusal_ms_{0};  // steady clock
  mutable Mutex mu_;
  std::string last_error_ GUARDED_BY(mu_);
};

}  // namespace weir

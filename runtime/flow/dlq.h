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
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/flow/backpressure.h"
#include "runtime/nats/bus.h"
#include "runtime/base/status.h"
#include "runtime/base/thread_annotations.h"

namespace weir {

struct DeadLetter {
  std::string flow;
  int64_t version = 0;
  std::string stage;  // "flow" or "sink:<name>"
  std::string reason;
  // The last failed attempt's reason, kept beside the count when the reason is a count
  // ("failed 5 deliveries …"); "" when none is known (a flow error, an invalid event).
  std::string last_error;
  uint64_t deliveries = 0;
  std::string event_id;
  std::string replay_subject;  // where replay puts it back
  std::string_view body;
  uint64_t source_sequence = 0;  // the dying message's stream sequence (dedup key)
  std::string source_stream;
  std::string source_key;        // instead of the sequence when the event never had one (a source)
  std::string_view traceparent;  // the event's trace context, kept on the dead letter (ADR 0140)
  std::string_view tracestate;
  std::string_view meta;  // the event's request metadata (layout::kHeaderMeta), kept for its replay
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

// Which dead letters POST /dlq/replay selects (docs/adr/0298-bulk-replay.md). Every field
// that is set must match (AND); none set selects every dead letter.
struct ReplayFilter {
  std::optional<std::string> flow;    // the dead letter's flow, exactly
  std::optional<std::string> sink;    // died at this sink's stage ("sink:<name>"), in any flow unless `flow`
  std::vector<std::string> ids;       // its event id is one of these; empty: any id
  std::optional<int64_t> since_ms;    // dead-lettered at or after (its `at`, ms since the epoch)
  std::optional<int64_t> until_ms;    // dead-lettered before (half-open: [since, until))
  std::optional<std::string> reason;  // a case-sensitive substring of its reason

  // `stage` as the dead letter records it ("flow", "source", "sink:<name>"); `at_ms` its `at`.
  bool matches(std::string_view flow, std::string_view stage, std::string_view id, int64_t at_ms,
               std::string_view reason) const;
};

// What a replay did, or (dry run) would do.
struct ReplayResult {
  size_t matched = 0;    // dead letters the filter selects that can be replayed
  size_t replayed = 0;   // put back and removed from the dead-letter stream (0 in a dry run)
  size_t remaining = 0;  // matched but left in the stream: their flow's backlog is at its bound
  // flow → stage → how many matched (the dry run's breakdown).
  std::map<std::string, std::map<std::string, size_t>> by_stage;
  // flow whose stream replay stopped writing into → why (its backlog bound).
  std::map<std::string, std::string> held;
};

class DeadLetters {
 public:
  static constexpr size_t kMaxPage = 1000;
  // GET /dlq reads the stream in batches of this many when it filters (flow, id, after),
  // and gives up past kListTimeout (503).
  static constexpr size_t kScanBatch = 256;
  static constexpr std::chrono::milliseconds kListTimeout{5000};
  // POST /dlq/replay selects from the whole stream in one read; past this it is 503.
  static constexpr std::chrono::milliseconds kReplayScanTimeout{30000};

  explicit DeadLetters(Bus& bus) : bus_(bus) {}
  // Writes one dead letter; `done` after its PubAck. Only then may the input be acked.
  // `via`: the stage's consumer, whose loop connection carries it (PullConsumer::publish:
  // never a blocking write on a loop thread, and the completion on that loop); null: the
  // Bus's control connection.
  void publish(const DeadLetter& letter, PublishCallback done, PullConsumer* via = nullptr);
  // One page; not_found when `after_id` names no stored dead letter. A few round trips
  // per page (Bus::read_stream), not one per dead letter.
  Result<DeadLetterPage> list(const DeadLetterQuery& query);
  // Puts the dead letters `filter` selects back into the stage they died in (the subject
  // they were read from) and removes them from the stream, oldest first; `dry_run` counts
  // them and changes nothing. A flow stream whose backlog is at its bound (ADR 0080) takes
  // no more: its dead letters stay and are counted in `remaining` (ADR 0298); the call can
  // be repeated once it drains. Reads the stream in batches, then one get, publish and
  // delete per replayed dead letter; an error midway leaves what was replayed replayed.
  Result<ReplayResult> replay(const ReplayFilter& filter, bool dry_run);
  // The flows' backlogs that replay respects; set once at start, before any replay.
  void set_backlog(BacklogMonitor* backlog) { backlog_ = backlog; }

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
  BacklogMonitor* backlog_ = nullptr;  // null: no bound (tests without a monitor)
  std::atomic<uint64_t> written_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<bool> holding_{false};
  std::atomic<int64_t> last_refusal_ms_{0};  // steady clock
  mutable Mutex mu_;
  std::string last_error_ GUARDED_BY(mu_);
};

}  // namespace weir

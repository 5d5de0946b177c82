// DeadLetters: the dead-letter stream (`weir_dlq`, subjects weir.dlq.<flow>.<stage>).
// Every dead letter carries headers naming flow, version, stage, reason, delivery
// count, event id and the subject it is replayed into; the body is the event as it
// was when it died. Listing and replay are admin operations (synchronous, slow path).
//
// Thread safety: all methods are thread-safe. `publish` completes on a bus thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/bus.h"
#include "runtime/status.h"

namespace weir {

struct DeadLetter {
  std::string flow;
  int64_t version = 0;
  std::string stage;          // "flow" or "sink:<name>"
  std::string reason;
  uint64_t deliveries = 0;
  std::string event_id;
  std::string replay_subject; // where replay puts it back
  std::string_view body;
  uint64_t source_sequence = 0;   // the dying message's stream sequence (dedup key)
  std::string source_stream;
  std::string source_key;         // instead of the sequence when the event never had one (a source)
};

class DeadLetters {
 public:
  explicit DeadLetters(Bus& bus) : bus_(bus) {}
  // Writes one dead letter; `done` after its PubAck. Only then may the input be acked.
  void publish(const DeadLetter& letter, PublishCallback done);
  // Up to `limit` dead letters, oldest first, optionally of one flow, as spec §5 shapes them.
  Result<nlohmann::json> list(const std::optional<std::string>& flow, size_t limit);
  // Puts dead letters back into the stage they died in and removes them from the stream.
  // Selects all, or those of `flow`, or those whose id is in `ids`. Returns how many.
  Result<size_t> replay(const std::optional<std::string>& flow, const std::vector<std::string>& ids);

 private:
  Bus& bus_;
};

}  // namespace weir

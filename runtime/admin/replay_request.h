// POST /dlq/replay's body and answer (docs/admin-api.md, docs/adr/0298-bulk-replay.md).
// Pure functions on the admin io thread (parse) and the worker (answer); no state.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "runtime/flow/dlq.h"

namespace weir {

struct ReplayRequest {
  ReplayFilter filter;
  bool dry_run = false;
};

// Empty (or only whitespace) and {} select every dead letter. Keys: flow, sink, reason
// (non-empty strings), ids (a non-empty array of non-empty strings), since and until (RFC
// 3339 timestamps, or whole milliseconds since the epoch as GET /dlq's `at`; since before
// until), dry_run (a boolean). Anything else — another key, a wrong type, an empty string,
// a time that does not parse — is refused with why: a filter that is ignored would replay
// every dead letter. nullopt: `*out` is the request.
std::optional<std::string> parse_replay_request(std::string_view body, ReplayRequest* out);

// {"dry_run": true, "would_replay": N, "flows": {F: {STAGE: n}}} for a dry run;
// {"replayed": N, "remaining": M} for a real one, with "held": {F: why} when M > 0.
nlohmann::json replay_answer(const ReplayResult& result, bool dry_run);

}  // namespace weir

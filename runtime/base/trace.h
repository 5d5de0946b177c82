// W3C trace context (https://www.w3.org/TR/trace-context/) carried through weir.
//
// An event's `traceparent` (and `tracestate`) travel in its NATS headers from http-in to
// the sinks. Each stage that handles an event makes a child span: same trace id, a new
// span id; the header it passes on names that span as the parent of the next hop
// (docs/adr/0140-trace-context.md). The helpers below work on the header text itself:
// parsing does not allocate; a child is a copy of the 55-byte header with its span id
// rewritten. Ids come from a thread-local generator (no locks). Free functions, any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace weir::trace {

inline constexpr const char* kHeaderTraceparent = "traceparent";
inline constexpr const char* kHeaderTracestate = "tracestate";
inline constexpr size_t kTraceparentSize = 55;  // "00-" 32 hex "-" 16 hex "-" 2 hex
inline constexpr size_t kMaxTracestate = 512;   // W3C: a vendor may drop longer ones

// True for a version-00 traceparent: lower-case hex, trace id and parent id not all
// zero. Any other version, length or character is invalid (weir then starts a new trace).
bool valid_traceparent(std::string_view v);
// Printable ASCII only (no controls: it is re-sent as an HTTP header), at most 512 bytes.
bool valid_tracestate(std::string_view v);

// A new trace: random trace id and span id, flags 01 (sampled).
std::string new_traceparent();
// A child of `parent` (valid): same trace id and flags, a new random span id. An invalid
// `parent` gives a new trace.
std::string child_traceparent(std::string_view parent);

// Parts of a valid traceparent (views into it).
inline std::string_view trace_id(std::string_view tp) { return tp.substr(3, 32); }
inline std::string_view span_id(std::string_view tp) { return tp.substr(36, 16); }

// 16 random lower-case hex digits (a span id, never all zero).
void random_span_id(char out[16]);

}  // namespace weir::trace

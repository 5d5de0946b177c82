// The one place where cnats results become weir::Status (bus, KV stores, tables, cluster/).
//
// Contract: call right after the failing cnats call, on the same thread: the message
// comes from cnats' thread-local last error. The mapping:
//   NATS_OK → ok; NATS_NOT_FOUND → not_found; NATS_TIMEOUT → timeout;
//   "wrong last sequence" (a lost put-if-absent or compare-and-set) → conflict;
//   no server / no responders / closed / disconnected / IO / reconnect buffer full →
//   unavailable; invalid argument / subject → invalid; max payload → too_large; anything
//   else → internal, with the
//   JetStream error code when there is one.
// Messages name the operation and cnats' text; cnats never puts credentials in them.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "runtime/base/status.h"

struct __natsConnection;

namespace weir {

// `s` is a natsStatus, `js_error` a jsErrCode (ints here, so callers need not include
// nats.h): `what` names the operation ("kv update lease.timer"); `js_error` is the
// JetStream API error code when the call reported one (0 otherwise).
Status nats_status(int s, std::string_view what, int js_error = 0);

// True when JetStream refused a create or update for want of storage: error 10047, 10023 or
// 10028, or, for a call that reports no error code (a KV bucket's create), the server's text
// "insufficient ...". Call right after the failing call, like nats_status.
bool nats_storage_refused(int s, int js_error = 0);

// Start-up retries a create that JetStream refused for want of storage this long before it
// reports the refusal: a sizing probe (Bus::plan_stream_sizes, this instance's or a peer's)
// reserves most of the server's storage for a moment, and what is refused meanwhile is
// refused for space that comes back (docs/adr/0290-storage-borrowed-by-probes.md).
inline constexpr std::chrono::milliseconds kBorrowedStorageWait{5000};

// The pause before retry `attempt` (1-based) of such a create: 50 ms doubling to 500 ms,
// short because a probe lives for a few round trips.
std::chrono::milliseconds borrowed_storage_pause(int attempt);

// A failed publish of `body_bytes` (plus headers) on `nc`, right after the call: as
// nats_status, except that NATS_MAX_PAYLOAD (cnats refuses a message larger than the
// server's max_payload before sending it) is too_large naming the limit in bytes. No
// retry can store such an event; callers refuse or drop it (http-in answers 413).
Status nats_publish_status(int s, __natsConnection* nc, size_t body_bytes);

// The connection's last error as cnats recorded it, for the disconnected callback's log
// line. cnats does not record why it dropped a connection after a read/write failure or a
// stale ping (its op-error path leaves the error unset), so this is mostly "not recorded
// by cnats"; NatsLoop logs the failing call's own text for event-loop connections.
std::string nats_disconnect_reason(__natsConnection* nc);

}  // namespace weir

// The one place where cnats results become weir::Status (for cluster/ code).
//
// Contract: call right after the failing cnats call, on the same thread: the message
// comes from cnats' thread-local last error. The mapping:
//   NATS_OK → ok; NATS_NOT_FOUND → not_found; NATS_TIMEOUT → timeout;
//   "wrong last sequence" (a lost put-if-absent or compare-and-set) → conflict;
//   no server / no responders / closed / disconnected / IO → unavailable;
//   invalid argument / subject → invalid; anything else → internal.
// Messages name the operation and cnats' text; cnats never puts credentials in them.
#pragma once

#include <nats/nats.h>

#include <string_view>

#include "runtime/status.h"

namespace weir::cluster {

// `what` names the operation ("kv update lease.timer"); `js_error` is the JetStream
// API error code when the call reported one (0 otherwise).
Status nats_status(natsStatus s, std::string_view what, jsErrCode js_error = static_cast<jsErrCode>(0));

}  // namespace weir::cluster

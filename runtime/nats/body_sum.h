// Body checksums (docs/adr/0286-body-checksums.md): every message weir publishes carries
// the CRC-32C of its body in a `Weir-Sum` header, and every delivery a PullConsumer
// receives is checked against it before a stage sees it.
//
// Why: a loop connection's protocol parser in cnats 3.4.1 survives a reconnect
// (upstream nats-io/nats.c#1007): a message cut by a disconnect is
// completed with the next connection's bytes and delivered under the original's ack
// subject. A stage that acked such a hybrid would lose the original event. Checked, the
// hybrid is naked instead and JetStream redelivers the stored original. Loop connections
// are now rebuilt rather than reconnected (ADR 0287), which removes that cause; the check
// stays as defence in depth.
//
// Threading: pure functions of the message; any thread.
#pragma once

#include <nats/nats.h>

#include <string_view>

#include "runtime/nats/bus.h"

namespace weir {

// A new message for `subject` (reply may be null) with `headers` and the body's Weir-Sum.
natsStatus make_stamped_msg(natsMsg** out, const char* subject, const char* reply, std::string_view body,
                            const Headers& headers);

enum class BodySum {
  kIntact,  // the header is there and the body matches it
  kAbsent,  // no Weir-Sum: published by an older weir or by someone else; not checkable
  kBroken,  // the body does not match, or the header block cannot be read at all
};
BodySum check_body_sum(natsMsg* msg);

}  // namespace weir

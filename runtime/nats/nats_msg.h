// free_nats_msg: frees a cnats message on the calling thread (docs/adr/0257-free-nats-messages-inline.md).
//
// natsMsg_Destroy hands every message to cnats' garbage-collector thread: it takes a
// process-wide mutex, pushes the message and signals the collector, which wakes, frees it
// and sleeps again. At a paced rate that is one wake-up of that thread per message — four
// to six per event (publishes, PubAcks, stage inputs). A message whose free callback is
// cnats' own `natsMsg_free` is freed here instead; any other message (or another cnats
// layout) goes through natsMsg_Destroy unchanged.
//
// Threading: any thread; the message must not be used afterwards (as natsMsg_Destroy).
#pragma once

struct __natsMsg;

namespace weir {

// Returns true when the message was freed on this thread, false when it went to
// natsMsg_Destroy's usual path (null, or a free callback that is not cnats' natsMsg_free).
bool free_nats_msg(__natsMsg* msg);

}  // namespace weir

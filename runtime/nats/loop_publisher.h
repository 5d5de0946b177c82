// LoopPublisher: pipelined JetStream publishes from the io thread on the io thread's own
// data-plane NATS connection (docs/adr/0130-ingress-on-the-io-thread.md).
//
// http-in used to publish through the Bus: its PubAck was read by cnats' reader thread,
// handed to the publish inbox's delivery thread, and the answer posted back to the io
// thread. Here the connection runs on the io thread (NatsLoop): publishes made in one loop
// turn leave in one write, PubAcks land in a *sync* inbox subscription that is drained
// right after each read event, and completions (hence the HTTP answer) run on the io
// thread directly — no other thread, no post, no lock on the path.
//
// Same contract as Bus::publish: `done` runs exactly once, with the PubAck, a JetStream
// error, a timeout past `timeout` (checked every 100 ms), unavailable when the connection
// drops (the write may still be stored: the message says so) or at shutdown.
//
// The same publisher runs the flow stages' loop (docs/adr/0220-flow-stage-on-a-loop.md):
// there the owner of the connection adds its own work after each read event (draining the
// pull consumers' inboxes) and learns of (re)connects through `LoopHooks`.
//
// Threading: publish() and completions on the io thread only (in_loop_thread()).
// connected(), pending() from any thread. fail_pending/shutdown from any thread but the io
// thread; they run on it and wait. Destroy before the IoLoop stops.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/nats/bus.h"

namespace weir {

class IoLoop;
class NatsLoop;

struct LoopHooks {
  // On the io thread after each read event, after the PubAcks read are completed.
  std::function<void()> after_read;
  // When the connection drops (false; a cnats thread) or a new one is in place (true; the
  // io thread).
  std::function<void(bool up)> on_connection;
};

class LoopPublisher {
 public:
  // Connects a new connection with the Bus' options ("<name>-<label>") on `io`.
  static Result<std::unique_ptr<LoopPublisher>> connect(IoLoop& io, const BusOptions& options,
                                                        const std::string& label = "ingress", LoopHooks hooks = {});
  ~LoopPublisher();

  // The connection and its loop, for other work on the same io thread (subscriptions,
  // fire-and-forget publishes). The loop is valid as long as the publisher; the
  // connection (io thread only) until it drops: a new one replaces it, and the owners of
  // subscriptions on it subscribe again when LoopHooks::on_connection(true) tells them
  // (docs/adr/0287-rebuilt-loop-connections.md). connection_ref() shares its ownership
  // with what must outlive a replacement (a message to ack later).
  NatsLoop& loop();
  __natsConnection* connection();
  const std::shared_ptr<__natsConnection>& connection_ref();

  bool in_loop_thread() const;
  bool connected() const;
  size_t pending() const;

  void publish(std::string_view subject, std::string_view data, const Headers& headers,
               std::chrono::milliseconds timeout, PublishCallback done);

  void fail_pending(const std::string& why);
  // From here on every publish fails at once; what is pending fails now. Idempotent.
  void shutdown();

  struct Impl;

 private:
  LoopPublisher() = default;
  std::shared_ptr<Impl> impl_;
};

}  // namespace weir

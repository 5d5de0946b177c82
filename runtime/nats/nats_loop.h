// NatsLoop: runs one cnats connection on an IoLoop's Asio io_context instead of cnats'
// own reader thread (cnats "external event loop": natsOptions_SetEventLoop;
// docs/adr/0130-ingress-on-the-io-thread.md).
//
// What it does for the connection:
//  - no reader thread: each read event of the socket runs natsConnection_ProcessReadEvent
//    (one IOBufSize chunk) on the io thread — and, after a long turn of the loop, again
//    while the socket holds more (docs/adr/0288-flow-batches-in-slices.md) — then
//    `after_read`, where the owner drains its sync subscriptions;
//  - writes coalesced per loop turn: cnats asks for a write event once when its buffer
//    goes non-empty; that posts one flush handler, which writes everything published since
//    with natsConnection_ProcessWriteEvent, and waits for writability only on EAGAIN.
//
// Threading: cnats calls attach/read/write/detach from the io thread, from cnats' timer
// threads (PINGs) and from whoever connects or closes; every callback only sets
// a flag and posts to the io thread. `after_read` and everything touching the socket run
// on the io thread. Never call a blocking cnats API (Request, Flush, js_* management,
// Fetch) on such a connection from the io thread: its reply could only be read by the
// thread that is blocked waiting for it.
//
// One connection after another may run on a NatsLoop: a LoopPublisher replaces a dropped
// connection with a new one (docs/adr/0287-rebuilt-loop-connections.md); each attach
// replaces the last.
//
// Lifetime: create the NatsLoop, `configure` the natsOptions, connect; close the
// connection (natsConnection_Close, any thread but the io thread), then destroy it with
// `run_sync`. The NatsLoop must outlive the connection.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

struct __natsOptions;
struct __natsConnection;

namespace weir {

class IoLoop;

class NatsLoop {
 public:
  explicit NatsLoop(IoLoop& io);
  ~NatsLoop();
  NatsLoop(const NatsLoop&) = delete;
  NatsLoop& operator=(const NatsLoop&) = delete;

  // Puts the options in event-loop mode on this loop. `after_read` runs on the io thread
  // after each read event has been processed. Call once, before connecting.
  void configure(__natsOptions* opts, std::function<void()> after_read);

  bool in_loop_thread() const;          // is the caller the io thread?
  void post(std::function<void()> fn);  // thread-safe
  // Runs `fn` on the io thread and waits for it (directly when the io thread is not running).
  void run_sync(const std::function<void()>& fn);
  // A one-shot timer on the io thread (io thread only); a new call replaces a pending one.
  void set_timer(std::chrono::milliseconds after, std::function<void()> fn);
  // Held acks (docs/adr/0264-held-acks.md). With a delay set, `hold_ack` keeps a "+ACK"
  // for `reply` instead of writing it: held acks go out with the connection's next write
  // (a publish, a pull request), or `delay` after the first of them at the latest, or at
  // once when 8 are held (a smaller burst of acks, i.e. of deletes, for nats-server) — at
  // moderate rates several acks per write instead of a write each. They are written on
  // the connection attached then (a rebuilt one too). A held ack the
  // connection does not take when it is written counts in `*failures` (may be null; must
  // outlive the loop's connection). 0 (the default) = no holding: hold_ack returns false.
  void set_ack_delay(std::chrono::milliseconds delay);  // before use, once
  // Io thread only. False (nothing done) when holding is off: the caller acks itself.
  bool hold_ack(std::string_view reply, std::atomic<uint64_t>* failures);
  // Writes the held acks now (any thread; runs on the io thread and waits). Called before
  // the connection closes.
  void release_acks();
  // A second, periodic timer: `fn` on the io thread every `period` until the NatsLoop is
  // destroyed (the flow loop's pull-request deadlines). Any thread; once.
  void every(std::chrono::milliseconds period, std::function<void()> fn);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace weir

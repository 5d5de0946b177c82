// IoLoop: one thread running one Asio io_context, the event loop below every part of weir
// that does network I/O without blocking: the HTTP servers (http-in, admin), the NATS loop
// connections and their publishers, and the HTTP sinks. It lives in a room of its own so
// that HTTP and NATS can both sit on it without including each other.
//
// Threading: start()/stop() from the owner's thread; native() hands the io_context to the
// layer that registers sockets on it; current(), attachment() and Batch from any thread as
// documented on each.
#pragma once

#include <functional>
#include <memory>

namespace weir {

// A named io thread: http-in and admin run on one ("weir-io"), the delivery stages on one
// or two more (docs/adr/0272-one-delivery-loop-on-small-machines.md).
class IoLoop {
 public:
  // `thread_name`: the io thread's name (at most 15 characters).
  explicit IoLoop(const char* thread_name = "weir-io");
  ~IoLoop();
  // Before start(): the thread runs `steps` nice steps (Linux, per thread) below the thread
  // that calls start(), capped at 19 (ADR 0268). Threads it starts inherit that. 0: equal.
  void set_nice(int steps);
  void start();    // spawns the io thread
  void stop();     // stops and joins, then destroys the attachments
  void* native();  // boost::asio::io_context*

  // The IoLoop whose thread calls this, or nullptr on any other thread.
  static IoLoop* current();
  // A per-loop object of another layer, found by `key` (the address of something of that
  // layer's): made by `make` on first use (nullptr is not kept), then the same object until
  // stop(), which destroys it after the io thread has ended and before the io_context, so
  // its handlers never run on a destroyed object. Any thread. (The HTTP sinks' curl loop
  // rides the sink loop this way: connectors/http/http_sink.cc.)
  std::shared_ptr<void> attachment(const void* key, const std::function<std::shared_ptr<void>()>& make);

  // Work a handler leaves for when it returns, instead of a post: a posted handler costs
  // the loop one more turn, and with it an epoll_wait, per event. A handler that may
  // leave such work (NatsLoop's read handler: the flush of what its messages published,
  // the HTTP sinks' round for what they delivered) holds a Batch while it runs; when the
  // outermost Batch of the thread ends, the work left runs there, in order (work it
  // leaves in turn included). at_batch_end() returns false when no Batch is open on this
  // thread: the caller posts then. `obj` is kept alive until `fn(obj.get())` has run.
  class Batch {
   public:
    Batch();
    ~Batch();
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;
  };
  static bool at_batch_end(void (*fn)(void*), std::shared_ptr<void> obj);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir

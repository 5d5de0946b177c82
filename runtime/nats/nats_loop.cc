#include <utility>  // before Asio (platform notes)

#include "runtime/nats/nats_loop.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio.hpp>
#include <nats/nats.h>

#include "runtime/loop/io_loop.h"
#include "runtime/base/log.h"

namespace weir {

namespace asio = boost::asio;

struct NatsLoop::Impl : std::enable_shared_from_this<Impl> {
  explicit Impl(asio::io_context& c) : ioc(c), timer(c), ticker(c), ack_timer(c) {}

  asio::io_context& ioc;
  std::function<void()> after_read;
  asio::steady_timer timer;        // io thread
  std::function<void()> timer_fn;  // io thread
  asio::steady_timer ticker;       // io thread: every()
  std::chrono::milliseconds tick_period{0};
  std::function<void()> tick_fn;  // io thread; null once destroyed

  void arm_ticker() {
    ticker.expires_after(tick_period);
    ticker.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || !self->tick_fn) return;
      self->tick_fn();
      if (self->tick_fn) self->arm_ticker();
    });
  }

  // Held acks (NatsLoop::hold_ack), io thread only.
  struct HeldAck {
    std::string reply;
    std::atomic<uint64_t>* failures;
  };
  std::chrono::milliseconds ack_delay{0};  // set before use
  // More held than this are written at once: nats-server handles the acks of one read in
  // one go (a work-queue delete each), and larger bursts delay the events behind them.
  static constexpr size_t kMostHeld = 8;
  std::vector<HeldAck> held, spare;
  asio::steady_timer ack_timer;
  bool ack_timer_armed = false;

  // Into cnats' buffer: they leave with the write that is about to happen (from flush())
  // or that their publish asks for (from the timer).
  // On the connection attached now: an ack is a publish to the message's reply subject,
  // good on any connection to the server, so acks held across a rebuilt connection
  // (docs/adr/0287-rebuilt-loop-connections.md) leave on the new one.
  void release_held() {
    if (held.empty()) return;
    spare.swap(held);
    for (const HeldAck& h : spare) {
      if ((nc == nullptr || natsConnection_PublishString(nc, h.reply.c_str(), "+ACK") != NATS_OK) &&
          h.failures != nullptr) {
        h.failures->fetch_add(1, std::memory_order_relaxed);
      }
    }
    spare.clear();
  }

  void arm_ack_timer() {
    if (ack_timer_armed) return;
    ack_timer_armed = true;
    ack_timer.expires_after(ack_delay);
    ack_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      self->ack_timer_armed = false;
      if (!ec) self->release_held();
    });
  }

  // Set by cnats' callbacks (any thread), read on the io thread.
  std::atomic<bool> write_wanted{false};
  std::atomic<bool> flush_posted{false};

  // io thread only.
  natsConnection* nc = nullptr;                                   // null once detached
  std::optional<asio::posix::stream_descriptor> desc;             // on a dup() of cnats' socket
  uint64_t generation = 0;                                        // bumps at every attach/detach
  std::chrono::steady_clock::time_point last_read{};              // on_readable's, for kBusyGap
  static constexpr auto kBusyGap = std::chrono::milliseconds(2);  // a flow slice's length
  static constexpr int kMostExtraReads = 16;
  bool read_armed = false, write_armed = false;

  // Our own descriptor is a dup(): cnats closes its fd on a disconnect, and the fd number
  // may be reused at once (by the reconnect or an HTTP accept); deregistering a number we
  // do not own would take another socket out of epoll.
  void close_desc() {
    if (desc) {
      boost::system::error_code ec;
      desc->close(ec);
      desc.reset();
    }
    read_armed = write_armed = false;
  }

  // `mine`: our dup() of cnats' socket; the descriptor owns it.
  void attach(natsConnection* conn, int mine) {
    close_desc();
    ++generation;
    nc = conn;
    if (mine < 0) return;  // out of descriptors: cnats' ping timeout reconnects later
    desc.emplace(ioc, mine);
    arm_read();
    if (write_wanted.load()) flush();
  }

  void detach() {
    ++generation;
    nc = nullptr;
    close_desc();
  }

  void arm_read() {
    if (read_armed || !desc) return;
    read_armed = true;
    desc->async_wait(asio::posix::stream_descriptor::wait_read,
                     [self = shared_from_this(), gen = generation](const boost::system::error_code& ec) {
                       if (gen != self->generation) return;
                       self->read_armed = false;
                       if (ec) return;
                       self->on_readable();
                     });
  }

  // One read per readiness event (more only after a long turn, below). Asio watches
  // descriptors edge-triggered, yet bytes
  // left in the socket are not lost: arm_read()'s async_wait is a non-speculative reactor
  // op, and Asio starts each one with EPOLL_CTL_MOD (boost/asio/detail/impl/
  // epoll_reactor.ipp, start_op), which makes the kernel look at the socket again and
  // report it at once if it still has bytes. Checking for them here (FIONREAD) cost a
  // system call on every read event, nearly always to find none (docs/bench.md);
  // tests/runtime/nats_loop_test.cc sends more than one read's worth at once.
  void on_readable() {
    if (!nc || !desc) return;
    const uint64_t gen = generation;
    {
      // What the read's messages publish (outputs, acks, PONGs) is written when they have
      // all been handled, not by a posted flush: two loop turns fewer per event on
      // weir-flows (docs/adr/0261-fewer-loop-turns-per-event.md). Ends before the re-arm below.
      IoLoop::Batch batch;
      natsConnection_ProcessReadEvent(nc);
      // After a long turn (a flow's slice ran, docs/adr/0288-flow-batches-in-slices.md)
      // the socket holds more than one read: take what is there now, a few reads at most,
      // so a message behind another flow's backlog is not a round of the loop per read
      // away. On a loop that keeps up, read events come closer together than this and
      // cost no extra system call.
      const auto now = std::chrono::steady_clock::now();
      if (now - last_read > kBusyGap) {
        int waiting = 0;
        for (int extra = 0; extra < kMostExtraReads && nc != nullptr && desc &&
                            natsConnection_Status(nc) == NATS_CONN_STATUS_CONNECTED &&
                            ::ioctl(desc->native_handle(), FIONREAD, &waiting) == 0 && waiting > 0;
             ++extra) {
          natsConnection_ProcessReadEvent(nc);
        }
      }
      last_read = now;
      if (after_read) after_read();
    }
    if (gen != generation || !nc || !desc) return;
    if (natsConnection_Status(nc) != NATS_CONN_STATUS_CONNECTED) {
      note_drop("read");
      // cnats dropped this socket and is reconnecting: let go of our dup too (the
      // server then sees the close), the reconnect's attach brings a new one.
      close_desc();
      return;
    }
    arm_read();
  }

  // cnats does not keep why it dropped a connection (its disconnected callback sees no
  // error); the failing call's text is in this thread's error stack right after it.
  static void note_drop(const char* op) {
    natsStatus last = NATS_OK;
    const char* text = nats_GetLastError(&last);
    // NATS_OK: another thread dropped it (cnats' ping timer: a stale connection); the
    // disconnected callback's line says so.
    if (last == NATS_OK) return;
    log::warn("nats connection dropped", {{"op", op}, {"error", text != nullptr ? text : natsStatus_GetText(last)}});
  }

  // From a Batch on this loop's own thread (its read handler), at the batch's end;
  // otherwise posted.
  void schedule_flush() {
    if (flush_posted.exchange(true)) return;
    if (ioc.get_executor().running_in_this_thread() &&
        IoLoop::at_batch_end([](void* impl) { static_cast<Impl*>(impl)->flush(); }, shared_from_this())) {
      return;
    }
    asio::post(ioc, [self = shared_from_this()] { self->flush(); });
  }

  void flush() {
    // Held acks ride along; before the flag drops, so their publishes' write request
    // (cb_write) does not post another flush.
    release_held();
    flush_posted.store(false);
    if (!nc || !desc) return;
    // Never with an empty buffer: cnats takes send()'s 0 for a zero-length write as a
    // closed connection and reconnects. A posted flush and a write-readiness wait can both
    // be pending while another thread's publish re-arms cnats' write interest: the first
    // writes everything and the second would find nothing (seen as the ingress and writer
    // connections dropping under load). Only this thread empties the buffer, so a non-zero
    // count here is still non-zero in ProcessWriteEvent.
    if (natsConnection_Buffered(nc) <= 0) return;
    // Writes cnats' whole buffer; on success cnats removes the write event (our callback
    // clears write_wanted), on EAGAIN it keeps it and we wait for writability.
    natsConnection_ProcessWriteEvent(nc);
    if (natsConnection_Status(nc) != NATS_CONN_STATUS_CONNECTED) note_drop("write");
    if (write_wanted.load() && !write_armed && desc) {
      write_armed = true;
      desc->async_wait(asio::posix::stream_descriptor::wait_write,
                       [self = shared_from_this(), gen = generation](const boost::system::error_code& ec) {
                         if (gen != self->generation) return;
                         self->write_armed = false;
                         if (!ec) self->flush();
                       });
    }
  }

  // ---- cnats callbacks: any thread; post everything ----
  static natsStatus cb_attach(void** user, void* loop, natsConnection* conn, natsSock fd) {
    auto* self = static_cast<Impl*>(loop);
    *user = self;
    // cnats closes `fd` only on the next disconnect, after this post has run or been
    // superseded; dup() it now so the descriptor is ours whatever happens to the number.
    int mine = ::dup(fd);
    asio::post(self->ioc, [s = self->shared_from_this(), conn, mine] { s->attach(conn, mine); });
    return NATS_OK;
  }
  static natsStatus cb_read(void* user, bool add) {
    auto* self = static_cast<Impl*>(user);
    if (add) {
      asio::post(self->ioc, [s = self->shared_from_this()] { s->arm_read(); });
    }
    return NATS_OK;
  }
  static natsStatus cb_write(void* user, bool add) {
    auto* self = static_cast<Impl*>(user);
    self->write_wanted.store(add);
    if (add) self->schedule_flush();
    return NATS_OK;
  }
  static natsStatus cb_detach(void* user) {
    auto* self = static_cast<Impl*>(user);
    asio::post(self->ioc, [s = self->shared_from_this()] { s->detach(); });
    return NATS_OK;
  }
};

NatsLoop::NatsLoop(IoLoop& io) : impl_(std::make_shared<Impl>(*static_cast<asio::io_context*>(io.native()))) {}

NatsLoop::~NatsLoop() {
  run_sync([impl = impl_] {
    impl->timer.cancel();
    impl->timer_fn = nullptr;
    impl->ticker.cancel();
    impl->tick_fn = nullptr;
    impl->ack_timer.cancel();
    impl->held.clear();  // released before the connection closed (LoopPublisher)
    impl->after_read = nullptr;
    impl->detach();
  });
}

void NatsLoop::configure(natsOptions* opts, std::function<void()> after_read) {
  impl_->after_read = std::move(after_read);
  natsOptions_SetEventLoop(opts, impl_.get(), &Impl::cb_attach, &Impl::cb_read, &Impl::cb_write, &Impl::cb_detach);
}

bool NatsLoop::in_loop_thread() const { return impl_->ioc.get_executor().running_in_this_thread(); }

void NatsLoop::post(std::function<void()> fn) { asio::post(impl_->ioc, std::move(fn)); }

void NatsLoop::run_sync(const std::function<void()>& fn) {
  if (in_loop_thread() || impl_->ioc.stopped()) {
    fn();
    return;
  }
  auto done = std::make_shared<std::promise<void>>();
  auto f = done->get_future();
  asio::post(impl_->ioc, [&fn, done] {
    fn();
    done->set_value();
  });
  // The io thread may stop between the check and the post: then nothing runs it, and
  // running it here is safe (nothing else runs io-thread work).
  while (f.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (impl_->ioc.stopped()) {
      fn();
      return;
    }
  }
}

void NatsLoop::set_timer(std::chrono::milliseconds after, std::function<void()> fn) {
  impl_->timer_fn = std::move(fn);
  impl_->timer.expires_after(after);
  impl_->timer.async_wait([impl = impl_.get()](const boost::system::error_code& ec) {
    if (ec || !impl->timer_fn) return;
    auto f = std::move(impl->timer_fn);
    impl->timer_fn = nullptr;
    f();
  });
}

void NatsLoop::set_ack_delay(std::chrono::milliseconds delay) { impl_->ack_delay = delay; }

bool NatsLoop::hold_ack(std::string_view reply, std::atomic<uint64_t>* failures) {
  Impl& i = *impl_;
  if (i.ack_delay.count() <= 0) return false;
  i.held.push_back(Impl::HeldAck{std::string(reply), failures});
  if (i.held.size() >= Impl::kMostHeld) {
    i.release_held();  // their publishes ask for a write
    return true;
  }
  i.arm_ack_timer();
  return true;
}

void NatsLoop::release_acks() {
  run_sync([impl = impl_] {
    impl->release_held();
    impl->flush();
  });
}

void NatsLoop::every(std::chrono::milliseconds period, std::function<void()> fn) {
  post([impl = impl_, period, fn = std::move(fn)]() mutable {
    impl->tick_period = period;
    impl->tick_fn = std::move(fn);
    impl->arm_ticker();
  });
}

}  // namespace weir

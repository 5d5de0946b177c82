// NatsLoop (runtime/nats/nats_loop.h): a cnats connection in event-loop mode on an IoLoop,
// written from several threads at once, against a real nats-server.
#include <catch2/catch.hpp>

#include <nats/nats.h>

#include <atomic>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "runtime/nats/bus.h"
#include "runtime/loop/io_loop.h"
#include "runtime/nats/nats_loop.h"
#include "tests/support/support.h"

using namespace weir;
using namespace weir::testing;

namespace {

// A cnats connection in event-loop mode on `loop`; `extra` sets more options first.
natsConnection* connect_on_loop(NatsLoop& loop, const std::string& url, const char* name,
                                const std::function<void(natsOptions*)>& extra = {}) {
  natsOptions* opts = nullptr;
  REQUIRE(natsOptions_Create(&opts) == NATS_OK);
  BusOptions bo;
  bo.url = url;
  REQUIRE(set_connection_options(opts, bo, name));
  loop.configure(opts, nullptr);
  if (extra) extra(opts);
  natsConnection* nc = nullptr;
  REQUIRE(natsConnection_Connect(&nc, opts) == NATS_OK);
  natsOptions_Destroy(opts);
  return nc;
}

// `nc` subscribed to `subject`, counting what arrives in `n`.
natsSubscription* count_messages(natsConnection* nc, const char* subject, std::atomic<int>& n) {
  natsSubscription* sub = nullptr;
  REQUIRE(natsConnection_Subscribe(
              &sub, nc, subject,
              [](natsConnection*, natsSubscription*, natsMsg* m, void* counter) {
                static_cast<std::atomic<int>*>(counter)->fetch_add(1);
                natsMsg_Destroy(m);
              },
              &n) == NATS_OK);
  natsSubscription_SetPendingLimits(sub, -1, -1);
  return sub;
}

}  // namespace

// Regression: a posted flush and a write-readiness wait could both be pending when another
// thread's publish re-armed cnats' write interest; the second flush then handed cnats an
// empty buffer, send() wrote 0 bytes and cnats took that for a closed connection. Seen as
// http-in's connection dropping mid-run (503s at 5,000 events/s) and, with several
// publishing threads, as a reconnect every few hundred milliseconds.
TEST_CASE("an event-loop connection written from several threads at once never drops", "[nats_loop]") {
  NatsServer nats;
  IoLoop io("weir-test-io");
  io.start();
  NatsLoop loop(io);

  std::atomic<int> disconnects{0}, closed{0};
  natsConnection* nc = connect_on_loop(loop, nats.url(), "nats-loop-test", [&](natsOptions* opts) {
    natsOptions_SetDisconnectedCB(
        opts, [](natsConnection*, void* n) { static_cast<std::atomic<int>*>(n)->fetch_add(1); }, &disconnects);
    natsOptions_SetClosedCB(
        opts, [](natsConnection*, void* n) { static_cast<std::atomic<int>*>(n)->fetch_add(1); }, &closed);
  });

  // A plain connection counts what arrives.
  natsConnection* reader = nullptr;
  REQUIRE(natsConnection_ConnectTo(&reader, nats.url().c_str()) == NATS_OK);
  std::atomic<int> received{0};
  natsSubscription* sub = count_messages(reader, "loop.>", received);
  REQUIRE(natsConnection_Flush(reader) == NATS_OK);

  // Short bursts with gaps: every burst re-arms cnats' write interest from an idle loop,
  // which is when a second flush could be queued behind the first.
  constexpr int kThreads = 4, kEach = 40000, kBurst = 8;
  std::atomic<int> refused{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      const std::string subject = "loop." + std::to_string(t);
      for (int i = 0; i < kEach; ++i) {
        if (natsConnection_PublishString(nc, subject.c_str(), "0123456789abcdef") != NATS_OK) ++refused;
        if (i % kBurst == kBurst - 1) std::this_thread::yield();
      }
    });
  }
  for (auto& w : writers) w.join();
  CHECK(wait_until([&] { return received.load() + refused.load() == kThreads * kEach; }, 30s));
  CHECK(disconnects.load() == 0);
  CHECK(refused.load() == 0);
  CHECK(received.load() == kThreads * kEach);

  natsSubscription_Destroy(sub);
  natsConnection_Destroy(reader);
  natsConnection_Close(nc);
  REQUIRE(wait_until([&] { return closed.load() == 1; }, 5s));
  loop.run_sync([&] { natsConnection_Destroy(nc); });
}

// The loop reads once per readiness event and relies on Asio re-arming its (edge-triggered)
// wait with EPOLL_CTL_MOD, which reports bytes still in the socket at once (nats_loop.cc,
// on_readable). Here far more than one read's worth (cnats reads 32 KiB by default) waits
// in the socket when the loop's thread comes back: every message must still arrive.
TEST_CASE("an event-loop connection reads everything that piled up in its socket", "[nats_loop]") {
  NatsServer nats;
  IoLoop io("weir-test-io");
  io.start();
  NatsLoop loop(io);

  natsConnection* nc = connect_on_loop(loop, nats.url(), "nats-loop-read-test");
  std::atomic<int> received{0};
  natsSubscription* sub = count_messages(nc, "pile.up", received);
  REQUIRE(natsConnection_Flush(nc) == NATS_OK);  // the server has the subscription

  // Hold the loop's thread while a plain connection sends 4 MiB to it.
  std::promise<void> release;
  std::promise<void> held;
  loop.post([&] {
    held.set_value();
    release.get_future().wait();
  });
  held.get_future().wait();
  natsConnection* writer = nullptr;
  REQUIRE(natsConnection_ConnectTo(&writer, nats.url().c_str()) == NATS_OK);
  constexpr int kMessages = 4096;
  const std::string body(1024, 'x');
  for (int i = 0; i < kMessages; ++i) REQUIRE(natsConnection_PublishString(writer, "pile.up", body.c_str()) == NATS_OK);
  REQUIRE(natsConnection_Flush(writer) == NATS_OK);  // the server has them all
  release.set_value();

  CHECK(wait_until([&] { return received.load() == kMessages; }, 30s));
  CHECK(received.load() == kMessages);

  natsConnection_Destroy(writer);
  natsSubscription_Destroy(sub);
  natsConnection_Close(nc);
  loop.run_sync([&] { natsConnection_Destroy(nc); });
}

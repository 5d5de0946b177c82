// A loop connection is rebuilt, never reconnected by cnats (docs/adr/0287-rebuilt-loop-
// connections.md): against a scripted NATS server that sends half a message and closes the
// connection, then on the next connection one whole message, the subscriber gets exactly
// that one message, intact. With cnats' own reconnect in event-loop mode the parser kept
// the half message and completed it with the next connection's bytes (upstream
// nats-io/nats.c#1007).
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <nats/nats.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/loop/io_loop.h"
#include "runtime/nats/loop_publisher.h"
#include "runtime/nats/nats_loop.h"
#include "runtime/nats/nats_msg.h"
#include "tests/support/support.h"

using namespace weir;
using namespace weir::testing;

namespace {

// One client connection of the scripted server, read line by line.
class ScriptedConn {
 public:
  explicit ScriptedConn(int fd) : fd_(fd) {}
  ~ScriptedConn() { close_now(); }
  ScriptedConn(const ScriptedConn&) = delete;
  ScriptedConn& operator=(const ScriptedConn&) = delete;

  bool send_all(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // The next protocol line from the client (without CRLF), answering PINGs on the way;
  // "" after `timeout` or when the client closed.
  std::string line(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (size_t eol = buf_.find("\r\n"); eol != std::string::npos) {
        std::string l = buf_.substr(0, eol);
        buf_.erase(0, eol + 2);
        if (l == "PING") {
          send_all("PONG\r\n");
          continue;
        }
        return l;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                              std::chrono::steady_clock::now());
      if (left.count() <= 0) return {};
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[4096];
      ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0) return {};
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }
  // INFO, then CONNECT and PING answered with PONG (cnats' handshake). True when done.
  bool handshake(int port) {
    send_all(R"(INFO {"server_id":"scripted","version":"2.9.10","go":"go1.19","host":"127.0.0.1","port":)" +
             std::to_string(port) + R"(,"headers":true,"max_payload":1048576,"proto":1})" + "\r\n");
    for (;;) {
      std::string l = line(std::chrono::seconds(5));
      if (l.empty()) return false;
      if (l.rfind("CONNECT ", 0) == 0) break;
    }
    // cnats sends PING right after CONNECT and waits for the PONG: line() answers it, but
    // only when it reads it, so read on until the first SUB (the client's first line after).
    return true;
  }
  // The sid of the client's SUB for a subject starting with `subject` (lines are read
  // until that one).
  std::string sid_of(const std::string& subject) {
    for (;;) {
      std::string l = line(std::chrono::seconds(5));
      if (l.empty()) return {};
      if (l.rfind("SUB " + subject, 0) == 0) return l.substr(l.rfind(' ') + 1);
    }
  }
  void close_now() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
  std::string buf_;
};

// Accepts on 127.0.0.1:port; accept() waits at most `timeout`.
class ScriptedServer {
 public:
  ScriptedServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd_, 4) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
  }
  ~ScriptedServer() { ::close(fd_); }
  ScriptedServer(const ScriptedServer&) = delete;
  ScriptedServer& operator=(const ScriptedServer&) = delete;
  int port() const { return port_; }
  std::unique_ptr<ScriptedConn> accept_one(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return nullptr;
    int c = ::accept(fd_, nullptr, nullptr);
    return c < 0 ? nullptr : std::make_unique<ScriptedConn>(c);
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// What the test's subscription on the loop connection received.
struct Received {
  std::mutex mu;
  std::vector<std::string> bodies;
  size_t size() {
    std::lock_guard lock(mu);
    return bodies.size();
  }
};

}  // namespace

TEST_CASE("a loop connection cut inside a message is rebuilt: the next connection's message arrives whole, once",
          "[nats_loop][faults]") {
  ScriptedServer server;
  IoLoop io("weir-test-io");
  io.start();

  Received got;
  natsSubscription* sub = nullptr;  // io thread
  LoopPublisher* lp_raw = nullptr;
  std::atomic<int> subscribe_failures{0};
  auto subscribe = [&] {  // io thread: no REQUIRE there
    if (natsConnection_SubscribeSync(&sub, lp_raw->connection(), "big.x") != NATS_OK) ++subscribe_failures;
    else natsSubscription_SetPendingLimits(sub, -1, -1);
  };
  LoopHooks hooks;
  hooks.after_read = [&] {
    for (;;) {
      int msgs = 0, bytes = 0;
      if (sub == nullptr || natsSubscription_GetPending(sub, &msgs, &bytes) != NATS_OK || msgs <= 0) return;
      natsMsg* m = nullptr;
      if (natsSubscription_NextMsg(&m, sub, 0) != NATS_OK || m == nullptr) return;
      std::lock_guard lock(got.mu);
      got.bodies.emplace_back(natsMsg_GetData(m), static_cast<size_t>(natsMsg_GetDataLength(m)));
      free_nats_msg(m);
    }
  };
  std::atomic<int> ups{0};
  hooks.on_connection = [&](bool up) {
    if (!up) return;
    // The io thread, the new connection in place: subscribe on it (as consumers do).
    if (sub != nullptr) natsSubscription_Destroy(sub);
    sub = nullptr;
    subscribe();
    ++ups;
  };

  BusOptions bo;
  bo.url = "nats://127.0.0.1:" + std::to_string(server.port());
  bo.name = "rebuild-test";
  bo.reconnect_wait = std::chrono::milliseconds(50);
  std::unique_ptr<LoopPublisher> lp;
  std::thread client([&] {  // connect() blocks in cnats' handshake, which this test scripts
    auto made = LoopPublisher::connect(io, bo, "loop", hooks);
    if (made) lp = std::move(made.value());
  });

  // Connection 1: the handshake, the subscriptions, then half of a 64 KB message.
  auto first = server.accept_one(std::chrono::seconds(5));
  REQUIRE(first);
  REQUIRE(first->handshake(server.port()));
  first->sid_of("_INBOX.");  // the publisher's PubAck inbox: connect() returns after it
  client.join();
  REQUIRE(lp);
  lp_raw = lp.get();
  lp->loop().run_sync(subscribe);
  const std::string sid1 = first->sid_of("big.x");
  REQUIRE_FALSE(sid1.empty());
  std::string payload(64 * 1024, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>('a' + i % 26);
  REQUIRE(first->send_all("MSG big.x " + sid1 + " " + std::to_string(payload.size()) + "\r\n" +
                          payload.substr(0, payload.size() / 2)));
  first->close_now();

  // Connection 2: a new handshake; then one whole message with a different body.
  auto second = server.accept_one(std::chrono::seconds(10));
  REQUIRE(second);
  REQUIRE(second->handshake(server.port()));
  const std::string sid2 = second->sid_of("big.x");
  REQUIRE_FALSE(sid2.empty());
  CHECK(ups.load() == 1);
  CHECK(subscribe_failures.load() == 0);
  const std::string whole(1000, 'z');
  REQUIRE(second->send_all("MSG big.x " + sid2 + " " + std::to_string(whole.size()) + "\r\n" + whole + "\r\n"));

  REQUIRE(wait_until([&] { return got.size() >= 1; }, 5s));
  // Then a PING through the same connection: its PONG proves everything before it was read.
  REQUIRE(second->send_all("PING\r\n"));
  CHECK(second->line(std::chrono::seconds(5)) == "PONG");
  {
    std::lock_guard lock(got.mu);
    REQUIRE(got.bodies.size() == 1);
    CHECK(got.bodies[0] == whole);
  }
  lp->loop().run_sync([&] {
    if (sub != nullptr) natsSubscription_Destroy(sub);
    sub = nullptr;
  });
  lp.reset();
  io.stop();
}

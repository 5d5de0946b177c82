// systemd's Type=notify through the documented $NOTIFY_SOCKET datagram protocol, with the
// test holding the socket (docs/adr/0304-readiness-notification.md): weir sends READY=1
// once /readyz answers 200 and STOPPING=1 when SIGTERM starts its drain; a NOTIFY_SOCKET it
// cannot use is a warning, never a failed start.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::TempDir;
using weir::testing::wait_until;

namespace {

// A datagram socket bound to a path (or, with a leading '@', an abstract name), as a
// service manager holds it.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& name) : name_(name) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error("socket failed");
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (name.size() >= sizeof addr.sun_path) throw std::runtime_error("socket name too long: " + name);
    std::memcpy(addr.sun_path, name.data(), name.size());
    if (name[0] == '@') addr.sun_path[0] = '\0';
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
    if (::bind(fd_, reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
      throw std::runtime_error("bind " + name + ": " + std::strerror(errno));
    }
  }
  ~NotifySocket() { ::close(fd_); }
  NotifySocket(const NotifySocket&) = delete;
  NotifySocket& operator=(const NotifySocket&) = delete;

  // The next datagram, or nullopt when none came within `timeout`.
  std::optional<std::string> receive(std::chrono::milliseconds timeout) const {
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) return std::nullopt;
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0) return std::nullopt;
    return std::string(buf, static_cast<size_t>(n));
  }

 private:
  std::string name_;
  int fd_ = -1;
};

bool has_line(const std::string& datagram, const std::string& line) {
  return ("\n" + datagram + "\n").find("\n" + line + "\n") != std::string::npos;
}

WeirOptions options(const std::string& nats_url, const std::string& sink_url, const std::string& notify) {
  return WeirOptions{.nats_url = nats_url,
                     .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink_url)}},
                     .config = "drain_timeout: 2s\n",
                     .env = {{"NOTIFY_SOCKET", notify}}};
}

// READY=1 first, with /readyz already 200; an event delivered; STOPPING=1 on SIGTERM, exit 0.
void ready_then_stopping(WeirProcess& weir, const NotifySocket& socket, const SinkProcess& sink) {
  weir.spawn();
  INFO(weir.describe());
  auto first = socket.receive(30s);
  REQUIRE(first.has_value());
  CHECK(has_line(*first, "READY=1"));
  CHECK(has_line(*first, "STATUS=ready: 1 flows"));
  // Sent after the switch /readyz reads: at READY=1 it answers 200 at once.
  CHECK(weir.admin("GET", "/readyz").status == 200);
  REQUIRE(weir.post("/in/orders", json{{"id", "n-1"}}.dump()).status == 202);
  REQUIRE(wait_until([&] { return sink.ids().count("n-1") == 1; }, 20s, 20ms));
  CHECK_FALSE(socket.receive(0ms).has_value());  // nothing more while it runs

  weir.process().signal(SIGTERM);
  auto second = socket.receive(15s);
  REQUIRE(second.has_value());
  CHECK(has_line(*second, "STOPPING=1"));
  CHECK(weir.process().wait_exit(15s) == std::optional<int>(0));
  CHECK_FALSE(socket.receive(0ms).has_value());
}

}  // namespace

TEST_CASE("weir sends READY=1 and STOPPING=1 to a NOTIFY_SOCKET path", "[integration][notify]") {
  NatsServer nats;
  SinkProcess sink;
  TempDir dir;
  NotifySocket socket(dir.file("notify.sock"));
  WeirProcess weir(options(nats.url(), sink.url("/out"), dir.file("notify.sock")));
  ready_then_stopping(weir, socket, sink);
}

TEST_CASE("weir sends READY=1 and STOPPING=1 to an abstract NOTIFY_SOCKET", "[integration][notify]") {
  SinkProcess sink;
  // Abstract names are per network namespace, not per directory: unique by pid.
  const std::string name = "@weir-notify-test-" + std::to_string(::getpid());
  NotifySocket socket(name);
  // The embedded nats-server, as the package runs it: the server is not the service.
  WeirProcess weir(options("", sink.url("/out"), name));
  ready_then_stopping(weir, socket, sink);
}

TEST_CASE("a NOTIFY_SOCKET weir cannot use is a warning, not a failed start", "[integration][notify]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir(options(nats.url(), sink.url("/out"), "relative/notify.sock"));
  weir.start();
  INFO(weir.describe());
  REQUIRE(weir.post("/in/orders", json{{"id", "r-1"}}.dump()).status == 202);
  REQUIRE(wait_until([&] { return sink.ids().count("r-1") == 1; }, 20s, 20ms));
  CHECK(weir.log().find("service manager notification failed") != std::string::npos);
  CHECK(weir.log().find("NOTIFY_SOCKET is not an absolute path") != std::string::npos);
  CHECK(weir.terminate(15s) == std::optional<int>(0));
}

// libFuzzer target: raw bytes through the real HTTP server (runtime/http/http_server.cc: the
// raw header check, Beast's parser, the framing checks and the limits) on a loopback
// socket. One server for the whole run; each input is sent on a fresh connection, the
// send side is shut, and the answer is read until the server closes.
// Invariants beyond "no crash, no sanitizer report": the server always closes the
// connection (no hang past the read timeout); every answer starts with a status line
// of a status the server gives (200 from the handler, 400, 413, 431, 503); and a
// request that reached the handler had a body within max_body.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "runtime/http/http_server.h"

namespace {

constexpr int64_t kMaxBody = 2 << 20;
// The server closes within its 500 ms read timeout; 30 s leaves room for a starved CPU
// (a niced run on a busy machine stalled 5 s once) and stays under fuzz.sh's -timeout.
constexpr int kHang = 30000;

struct Server {
  Server() {
    weir::HttpServerOptions o;
    o.listen = "127.0.0.1:0";
    o.max_body = kMaxBody;
    o.max_header = 16 * 1024;
    o.read_timeout = std::chrono::milliseconds(500);
    loop.start();
    auto r = weir::HttpServer::create(loop, o, [](weir::HttpRequest& req, weir::Responder respond) {
      if (static_cast<int64_t>(req.body().size()) > kMaxBody) std::abort();  // a limit was bypassed
      respond(weir::HttpResponse::json(200, "{\"n\":" + std::to_string(req.body().size()) + "}"));
    });
    if (!r) std::abort();
    server = std::move(r.value());
    port = std::stoi(server->address().substr(server->address().rfind(':') + 1));
  }
  weir::IoLoop loop;
  std::unique_ptr<weir::HttpServer> server;
  int port = 0;
};

Server& server() {
  static Server* s = new Server();  // lives for the process: libFuzzer exits without unwinding
  return *s;
}

bool known_status(const std::string& answer) {
  for (const char* s :
       {"HTTP/1.1 200 ", "HTTP/1.0 200 ", "HTTP/1.1 400 ", "HTTP/1.1 413 ", "HTTP/1.1 431 ", "HTTP/1.1 503 "}) {
    if (answer.compare(0, std::strlen(s), s) == 0) return true;
  }
  return false;
}

// poll() that retries when a signal interrupts it (libFuzzer's -timeout alarm, SIGALRM,
// lands every few seconds: an EINTR is not a hang). Returns poll's result, 0 after kHang.
int poll_one(pollfd* p) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kHang);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      errno = ETIMEDOUT;
      return 0;
    }
    int r = ::poll(p, 1, static_cast<int>(left.count()));
    if (r >= 0 || errno != EINTR) return r;
  }
}

// Aborts with what failed (and errno, when a call failed): a harness failure must say
// which one it was.
[[noreturn]] void fail(const char* what, bool with_errno = true) {
  std::fprintf(stderr, "fuzz_http_request: %s%s%s\n", what, with_errno ? ": " : "",
               with_errno ? std::strerror(errno) : "");
  std::abort();
}

// A connected socket to the server. Two outcomes of connect() are the harness's, not
// the server's: EINTR, when the -timeout alarm (every timeout/2 + 1 s) lands during the
// handshake (the handshake goes on in the kernel: wait for writability and read
// SO_ERROR); and EADDRNOTAVAIL, when every local port is still in TIME_WAIT from
// earlier inputs (thousands of connections a second; a kernel without loopback
// tcp_tw_reuse keeps each port for 60 s): a fresh socket is tried until a port frees
// up or kHang passes. Anything else aborts with its errno.
int connect_to(const sockaddr_in& addr) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kHang);
  for (;;) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fail("socket");
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) return fd;
    if (errno == EINTR) {
      pollfd p{fd, POLLOUT, 0};
      if (poll_one(&p) <= 0) fail("connect interrupted, then no handshake");
      int err = 0;
      socklen_t len = sizeof err;
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) fail("getsockopt");
      if (err == 0) return fd;
      errno = err;
      fail("connect (after a signal)");
    }
    if (errno != EADDRNOTAVAIL || std::chrono::steady_clock::now() > deadline) fail("connect");
    ::close(fd);
    ::poll(nullptr, 0, 10);  // no event says "a TIME_WAIT port expired": look again shortly
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Server& s = server();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(s.port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = connect_to(addr);
  // Send what the server takes; it may answer and close early (413, 400): then stop.
  size_t sent = 0;
  std::string answer;
  char buf[65536];
  while (sent < size) {
    pollfd p{fd, POLLOUT | POLLIN, 0};
    if (poll_one(&p) <= 0) fail("send: neither writable nor answering");  // a hang
    if (p.revents & POLLIN) break;
    ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll_one(&p) <= 0) fail("the server did not close within its read timeout");
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // closed (or reset after an early answer)
    if (answer.size() < 1 << 20) answer.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (!answer.empty() && !known_status(answer)) fail("an answer with a status the server does not give", false);
  return 0;
}

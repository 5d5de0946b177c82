// HttpServer (runtime/http/http_server.h) on a real loopback socket: answers, limits, framing
// (request smuggling), chunk extensions and trailers, the connection caps (in all and per
// client address), the connection age, check_header, a Responder called from another
// thread, a handler that throws. Raw bytes through TcpClient; curl for well-formed requests.
#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/http/http_server.h"
#include "tests/support/support.h"

using namespace std::chrono_literals;
using weir::HeaderScan;
using weir::HttpResponse;
using weir::HttpServer;
using weir::HttpServerOptions;
using weir::IoLoop;
using weir::scan_header_block;
using weir::testing::http_request;
using weir::testing::parse_status_line;
using weir::testing::TcpClient;
using weir::testing::wait_until;

namespace {

// An io thread and one server on 127.0.0.1:0; the handler echoes method, path and body
// length unless the test gives its own.
struct Server {
  explicit Server(HttpServerOptions o = {}, weir::Handler h = nullptr) {
    o.listen = "127.0.0.1:0";
    if (!h) {
      h = [this](weir::HttpRequest& req, weir::Responder respond) {
        ++requests;
        respond(HttpResponse::json(200, "{\"method\":\"" + std::string(req.method()) + "\",\"path\":\"" +
                                            std::string(req.path()) +
                                            "\",\"body\":" + std::to_string(req.body().size()) + "}"));
      };
    }
    loop.start();
    auto r = HttpServer::create(loop, o, std::move(h));
    if (!r) throw std::runtime_error(r.status().message());
    server = std::move(r.value());
  }
  ~Server() {
    server.reset();
    loop.stop();
  }
  int port() const { return std::stoi(server->address().substr(server->address().rfind(':') + 1)); }
  std::string url(const std::string& path) const { return "http://" + server->address() + path; }

  IoLoop loop;
  std::unique_ptr<HttpServer> server;
  std::atomic<int> requests{0};
};

const std::string kHead = "POST /p HTTP/1.1\r\nHost: x\r\n";

// Sends raw bytes on a fresh connection; returns what came back until the server closed
// (empty when it did not close within 5 s).
std::string exchange_until_closed(int port, const std::string& bytes, bool* closed) {
  TcpClient c(port);
  c.send(bytes);
  std::string got;
  *closed = c.wait_closed(5s, &got);
  return got;
}

}  // namespace

TEST_CASE("scan_header_block finds the end of the header and rejects bad line endings", "[http_server]") {
  CHECK(scan_header_block("GET / HTTP/1.1\r\nHost: x\r\n\r\n").state == HeaderScan::kComplete);
  CHECK(scan_header_block("GET / HTTP/1.1\r\nHost: x\r\n\r\nBODY").offset == 27);
  CHECK(scan_header_block("GET / HTTP/1.1\r\nHost: x\r\n").state == HeaderScan::kNeedMore);
  CHECK(scan_header_block("GET / HTTP/1.1\r").state == HeaderScan::kNeedMore);
  CHECK(scan_header_block("GET / HTTP/1.1\r\nHost: x\r\n\r").state == HeaderScan::kNeedMore);
  // Resuming where the last scan stopped gives the same answer as a full scan.
  std::string full = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  auto partial = scan_header_block(full.substr(0, 20));
  REQUIRE(partial.state == HeaderScan::kNeedMore);
  auto resumed = scan_header_block(full, partial.offset);
  CHECK(resumed.state == HeaderScan::kComplete);
  CHECK(resumed.offset == full.size());
  // Bad: bare LF (anywhere in the header), CR without LF, obs-fold.
  CHECK(scan_header_block("GET / HTTP/1.1\nHost: x\n\n").state == HeaderScan::kBad);
  CHECK(scan_header_block("GET / HTTP/1.1\r\nHost: x\n\r\n").state == HeaderScan::kBad);
  CHECK(scan_header_block("GET / HTTP/1.1\r\nA: 1\rB: 2\r\n\r\n").state == HeaderScan::kBad);
  CHECK(scan_header_block("GET / HTTP/1.1\r\nA: 1\r\n 2\r\n\r\n").state == HeaderScan::kBad);
  CHECK(scan_header_block("GET / HTTP/1.1\r\nA: 1\r\n\t2\r\n\r\n").state == HeaderScan::kBad);
  CHECK(std::string(scan_header_block("GET / HTTP/1.1\r\nA: 1\r\n 2\r\n\r\n").why).find("obs-fold") !=
        std::string::npos);
}

TEST_CASE("is_loopback_listen", "[http_server]") {
  CHECK(weir::is_loopback_listen("127.0.0.1:8081"));
  CHECK(weir::is_loopback_listen("127.1.2.3:0"));
  CHECK(weir::is_loopback_listen("localhost:8081"));
  CHECK(weir::is_loopback_listen(":8081"));
  CHECK(weir::is_loopback_listen("[::1]:8081"));
  CHECK_FALSE(weir::is_loopback_listen("0.0.0.0:8081"));
  CHECK_FALSE(weir::is_loopback_listen("10.0.0.5:8081"));
  CHECK_FALSE(weir::is_loopback_listen("[::]:8081"));
  CHECK_FALSE(weir::is_loopback_listen("example.com:8081"));
  CHECK_FALSE(weir::is_loopback_listen("127.0.0.1.evil.example:8081"));
  CHECK(weir::is_loopback_listen("[::1]"));
  CHECK(weir::is_loopback_listen("127.0.0.1"));
}

TEST_CASE("http server: requests, keep-alive, limits and a slow client", "[http_server]") {
  HttpServerOptions o;
  o.max_body = 1000;
  o.max_header = 2000;
  o.read_timeout = 500ms;
  Server s(o);
  auto r = http_request("POST", s.url("/a?x=1"), "hello", {"Content-Type: text/plain"});
  CHECK(r.status == 200);
  CHECK(r.body == R"({"method":"POST","path":"/a","body":5})");
  // Two pipelined requests, one of them chunked: two answers in order on one connection.
  {
    TcpClient c(s.port());
    c.send("GET /one HTTP/1.1\r\nHost: x\r\n\r\n" + kHead + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
    std::string got = c.recv(5s, "\"body\":3}");
    CHECK(got.find("/one") != std::string::npos);
    CHECK(got.find("\"body\":3") != std::string::npos);
  }
  bool closed = false;
  // Body over max_body: 413 and close; header over max_header: 431.
  CHECK(parse_status_line(exchange_until_closed(
            s.port(), kHead + "Content-Length: 1001\r\n\r\n" + std::string(1001, 'b'), &closed)) == 413);
  CHECK(closed);
  CHECK(parse_status_line(
            exchange_until_closed(s.port(), kHead + "X: " + std::string(3000, 'h') + "\r\n\r\n", &closed)) == 431);
  CHECK(closed);
  // A client that stops halfway is disconnected after read_timeout.
  {
    TcpClient slow(s.port());
    slow.send(kHead + "Content-Length: 10\r\n\r\nabc");
    CHECK(slow.wait_closed(3s));
  }
  CHECK(s.requests.load() == 2 + 1);  // the curl POST and the two pipelined ones
}

TEST_CASE("http server: ambiguous framing is a 400 and a closed connection", "[http_server]") {
  Server s;
  const std::string chunk = "3\r\nabc\r\n0\r\n\r\n";
  const std::string smuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"TE chunked, identity", kHead + "Transfer-Encoding: chunked, identity\r\n\r\n" + chunk + smuggled},
      {"TE identity", kHead + "Transfer-Encoding: identity\r\n\r\n" + chunk + smuggled},
      {"TE gzip, chunked", kHead + "Transfer-Encoding: gzip, chunked\r\n\r\n" + chunk + smuggled},
      {"two TE fields", kHead + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk + smuggled},
      {"CL + TE", kHead + "Content-Length: 13\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk + smuggled},
      {"TE + CL", kHead + "Transfer-Encoding: chunked\r\nContent-Length: 13\r\n\r\n" + chunk + smuggled},
      {"TE identity + CL", kHead + "Transfer-Encoding: identity\r\nContent-Length: 3\r\n\r\nabc" + smuggled},
      {"CL twice, same", kHead + "Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc" + smuggled},
      {"CL list", kHead + "Content-Length: 3, 3\r\n\r\nabc" + smuggled},
      {"CL twice, different", kHead + "Content-Length: 3\r\nContent-Length: 0\r\n\r\nabc" + smuggled},
      {"chunk size -1", kHead + "Transfer-Encoding: chunked\r\n\r\n-1\r\nabc\r\n0\r\n\r\n" + smuggled},
      {"chunk size 0x3", kHead + "Transfer-Encoding: chunked\r\n\r\n0x3\r\nabc\r\n0\r\n\r\n" + smuggled},
      {"chunk size overflow", kHead + "Transfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\nabc\r\n" + smuggled},
      {"chunk size empty", kHead + "Transfer-Encoding: chunked\r\n\r\n\r\nabc\r\n0\r\n\r\n" + smuggled},
      {"chunk longer than its size", kHead + "Transfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n" + smuggled},
      {"bare LF", "POST /p HTTP/1.1\nHost: x\nContent-Length: 3\n\nabc" + smuggled},
      {"obs-fold", kHead + "X-A: 1\r\n 2\r\nContent-Length: 3\r\n\r\nabc" + smuggled},
  };
  for (const auto& [name, bytes] : cases) {
    INFO(name);
    bool closed = false;
    std::string got = exchange_until_closed(s.port(), bytes, &closed);
    INFO(got);
    CHECK(parse_status_line(got) == 400);
    CHECK(closed);
    CHECK(got.find("/smuggled") == std::string::npos);
  }
  CHECK(s.requests.load() == 0);  // no case reached the handler
  // Exactly "chunked" in any case, and surrounding whitespace, is fine.
  TcpClient c(s.port());
  c.send(kHead + "Transfer-Encoding:  CHUNKED \r\n\r\n" + chunk);
  CHECK(parse_status_line(c.recv(5s, "}")) == 200);
}

TEST_CASE("http server: past max_connections a connection gets 503 with Retry-After and is closed", "[http_server]") {
  HttpServerOptions o;
  o.max_connections = 3;
  o.max_connections_per_client = 3;  // the cap in all (every client here is 127.0.0.1)
  Server s(o);
  std::vector<std::unique_ptr<TcpClient>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(std::make_unique<TcpClient>(s.port()));
    // A request answered on each proves the server counted it before the next connect.
    held.back()->send("GET /held HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(parse_status_line(held.back()->recv(5s, "}")) == 200);
  }
  CHECK(s.server->open_connections() == 3);
  bool closed = false;
  std::string got = exchange_until_closed(s.port(), "GET /extra HTTP/1.1\r\nHost: x\r\n\r\n", &closed);
  CHECK(parse_status_line(got) == 503);
  CHECK(got.find("Retry-After: 1") != std::string::npos);
  CHECK(closed);
  CHECK(s.requests.load() == 3);
  // A freed slot is usable again.
  held.pop_back();
  CHECK(wait_until([&] { return s.server->open_connections() == 2; }, 5s));
  CHECK(http_request("GET", s.url("/again")).status == 200);
}

// Beast holds a chunk-size line (with its extensions) and the trailer section whole and
// counts them against neither limit: the read buffer's bound (max_header + 64 KiB) is
// what stops them, long before 64 MiB.
TEST_CASE("http server: chunk extensions and trailers past the read buffer are a 431 and a close", "[http_server]") {
  HttpServerOptions o;
  o.max_header = 16 * 1024;
  Server s(o);
  const std::string chunked = kHead + "Transfer-Encoding: chunked\r\n\r\n";
  struct Case {
    std::string name, head, filler;
  };
  const std::vector<Case> cases = {
      {"chunk extension", chunked + "1;", std::string(64 * 1024, 'e')},
      {"extension of the last chunk", chunked + "1\r\nx\r\n0;", std::string(64 * 1024, 'e')},
      {"trailer section", chunked + "1\r\nx\r\n0\r\n", "X-Trailer: " + std::string(1000, 't') + "\r\n"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    TcpClient client(s.port());
    auto f = client.flood(c.head, c.filler, size_t{64} << 20, 30s);
    INFO("sent " << f.sent << " bytes; answer: " << f.answer.substr(0, 200));
    CHECK(parse_status_line(f.answer) == 431);
    CHECK(f.closed);
    CHECK(f.sent < (size_t{16} << 20));
  }
  CHECK(s.requests.load() == 0);
  // Extensions and trailers of ordinary size still pass.
  TcpClient ok(s.port());
  ok.send(chunked + "3;name=value\r\nabc\r\n0\r\nX-Sum: 1\r\n\r\n");
  CHECK(parse_status_line(ok.recv(5s, "}")) == 200);
  CHECK(s.requests.load() == 1);
}

TEST_CASE("http server: past max_connections_per_client one address gets 503 and another address is served",
          "[http_server]") {
  HttpServerOptions o;
  o.max_connections = 8;  // max_connections_per_client 0: a quarter, 2
  Server s(o);
  std::vector<std::unique_ptr<TcpClient>> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(std::make_unique<TcpClient>(s.port()));
    held.back()->send("GET /held HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(parse_status_line(held.back()->recv(5s, "}")) == 200);
  }
  bool closed = false;
  std::string got = exchange_until_closed(s.port(), "GET /extra HTTP/1.1\r\nHost: x\r\n\r\n", &closed);
  CHECK(parse_status_line(got) == 503);
  CHECK(got.find("Retry-After: 1") != std::string::npos);
  CHECK(got.find("from this client") != std::string::npos);
  CHECK(closed);
  CHECK(s.requests.load() == 2);
  // Another client address (127.0.0.2 is loopback too) is not counted against the first.
  TcpClient other(s.port(), "127.0.0.2");
  other.send("GET /other HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(parse_status_line(other.recv(5s, "}")) == 200);
  // A slot freed by the first client is its own again.
  held.pop_back();
  CHECK(wait_until([&] { return s.server->open_connections() == 2; }, 5s));
  TcpClient again(s.port());
  again.send("GET /again HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(parse_status_line(again.recv(5s, "}")) == 200);
}

TEST_CASE("http server: a connection past max_connection_age is closed after its next answer", "[http_server]") {
  HttpServerOptions o;
  o.max_connection_age = 1s;
  o.read_timeout = 5s;
  Server s(o);
  TcpClient c(s.port());
  const auto start = std::chrono::steady_clock::now();
  int answered = 0;
  bool closed = false;
  std::string last;
  // A request every 100 ms keeps the connection busy: only its age ends it.
  while (!closed && std::chrono::steady_clock::now() - start < 10s) {
    if (!c.send("GET /trickle HTTP/1.1\r\nHost: x\r\n\r\n")) break;
    last = c.recv(5s, "}");
    if (parse_status_line(last) == 200) ++answered;
    if (last.find("Connection: close") != std::string::npos) closed = c.wait_closed(5s);
    if (!closed) std::this_thread::sleep_for(100ms);  // the trickle's pace, not a wait for a condition
  }
  const auto lived = std::chrono::steady_clock::now() - start;
  INFO("answered " << answered << ", lived " << std::chrono::duration_cast<std::chrono::milliseconds>(lived).count()
                   << " ms; last answer: " << last.substr(0, 200));
  CHECK(closed);
  CHECK(answered > 2);  // kept alive before its age
  CHECK(lived >= 1s);   // not before it
  CHECK(lived < 5s);    // its age and one request more
}

TEST_CASE("http server: check_header answers from the header alone and the body is not read", "[http_server]") {
  HttpServerOptions o;
  o.max_body = 8 << 20;
  o.check_header = [](const weir::HttpRequest& req) -> std::optional<HttpResponse> {
    if (req.header("X-Key") == "k") return std::nullopt;
    CHECK(req.body().empty());
    return HttpResponse::error(401, "no key");
  };
  Server s(o);
  // 4 MiB announced, none sent: the answer can only come from the header.
  TcpClient c(s.port());
  REQUIRE(c.send(kHead + "Content-Length: 4194304\r\n\r\n"));
  std::string got;
  CHECK(c.wait_closed(5s, &got));
  CHECK(parse_status_line(got) == 401);
  CHECK(got.find("Connection: close") != std::string::npos);
  CHECK(s.requests.load() == 0);
  TcpClient keyed(s.port());
  keyed.send(kHead + "X-Key: k\r\nContent-Length: 3\r\n\r\nabc");
  CHECK(parse_status_line(keyed.recv(5s, "}")) == 200);
  CHECK(s.requests.load() == 1);
}

// The answer is written with a non-blocking send first and asynchronously for what the
// socket did not take (ADR 0262): an answer far larger than loopback's socket buffers, to a
// client that reads only after sending, must still arrive whole, and the connection must
// go on with the next (pipelined) request.
TEST_CASE("http server: an answer larger than the socket takes at once arrives whole, then the next one",
          "[http_server]") {
  const std::string big(24 << 20, 'x');
  Server s({}, [&](weir::HttpRequest& req, weir::Responder respond) {
    if (req.path() == "/big") {
      respond(HttpResponse{200, "text/plain", big, {}, false});
      return;
    }
    respond(HttpResponse::json(200, "{\"path\":\"" + std::string(req.path()) + "\"}"));
  });
  TcpClient c(s.port());
  REQUIRE(c.send("GET /big HTTP/1.1\r\nHost: x\r\n\r\nGET /small HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  std::string got;
  REQUIRE(c.wait_closed(30s, &got));
  CHECK(parse_status_line(got) == 200);
  const size_t body_at = got.find("\r\n\r\n");
  REQUIRE(body_at != std::string::npos);
  CHECK(got.compare(body_at + 4, big.size(), big) == 0);
  const std::string rest = got.substr(body_at + 4 + big.size());
  CHECK(parse_status_line(rest) == 200);
  CHECK(rest.find("{\"path\":\"/small\"}") != std::string::npos);
}

TEST_CASE("http server: a Responder may answer from another thread, and a throwing handler is a 500", "[http_server]") {
  std::vector<std::thread> threads;
  std::mutex mu;
  Server s({}, [&](weir::HttpRequest& req, weir::Responder respond) {
    if (req.path() == "/throw") throw std::runtime_error("boom");
    std::lock_guard lock(mu);
    threads.emplace_back([respond = std::move(respond)] {
      std::this_thread::sleep_for(50ms);  // the scenario: an answer that comes later
      HttpResponse r = HttpResponse::json(202, "{}");
      r.headers.emplace_back("X-From", "worker");
      respond(std::move(r));
    });
  });
  auto r = http_request("POST", s.url("/later"), "{}", {"Content-Type: application/json"});
  CHECK(r.status == 202);
  CHECK(r.header("x-from") == "worker");
  auto boom = http_request("GET", s.url("/throw"));
  CHECK(boom.status == 500);
  CHECK(boom.body.find("boom") == std::string::npos);  // no internals in the answer
  std::lock_guard lock(mu);
  for (auto& t : threads) t.join();
}

namespace {
struct Trail {
  std::vector<std::string> steps;
};
}  // namespace

// IoLoop::Batch: work left by a handler runs when its outermost batch ends, in order,
// including work that work leaves; outside a batch the caller is told to post.
TEST_CASE("io loop batch: work left runs when the outermost batch ends, in order", "[http_server]") {
  auto trail = std::make_shared<Trail>();
  CHECK_FALSE(IoLoop::at_batch_end(
      +[](void*) {}, trail));  // no batch open: post instead
  {
    IoLoop::Batch outer;
    CHECK(IoLoop::at_batch_end(
        +[](void* t) { static_cast<Trail*>(t)->steps.emplace_back("a"); }, trail));
    {
      IoLoop::Batch inner;
      CHECK(IoLoop::at_batch_end(
          +[](void* t) { static_cast<Trail*>(t)->steps.emplace_back("b"); }, trail));
    }
    CHECK(trail->steps.empty());  // the inner batch ending runs nothing
    // Work that leaves work: the second runs in the same end.
    CHECK(IoLoop::at_batch_end(
        +[](void* t) {
          static_cast<Trail*>(t)->steps.emplace_back("c");
          auto keep = std::shared_ptr<void>(std::shared_ptr<void>(), t);
          IoLoop::at_batch_end(
              +[](void* t2) { static_cast<Trail*>(t2)->steps.emplace_back("d"); }, keep);
        },
        trail));
    CHECK(trail->steps.empty());
  }
  CHECK(trail->steps == std::vector<std::string>{"a", "b", "c", "d"});
  CHECK_FALSE(IoLoop::at_batch_end(
      +[](void*) {}, trail));  // closed again
}

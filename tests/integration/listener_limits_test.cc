// Bounded requests on weir's two HTTP listeners (http-in and the admin API), through the
// weir binary (docs/reliability.md, abuse cases): 64 MiB of chunk extension or of
// trailer fields is a 431 and a close long before it is sent, with weir's resident memory
// flat; the admin token is checked from the header, before a body is read; one client
// address gets a share of the connections (503 past it), and a connection that trickles
// requests is closed at its age. The figures (bytes sent, VmRSS and VmHWM before and
// after) are printed with WARN so a run shows them.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::parse_status_line;
using weir::testing::proc_usage;
using weir::testing::TcpClient;
using weir::testing::wait_until;

namespace {

constexpr size_t kFlood = size_t{64} << 20;  // what the client offers to send
constexpr int64_t kMaxGrowthKb = 16 * 1024;  // what weir's RSS and its peak may grow by

struct Flooding {
  std::string name;
  int port;
  std::string head, filler;
  int want;  // the status
};

// Floods each case on a fresh connection; checks the answer, the close, how little was
// sent, and weir's VmRSS / VmHWM before and after.
void check_floods(WeirProcess& weir, const std::vector<Flooding>& cases) {
  const pid_t pid = weir.process().pid();
  for (const auto& c : cases) {
    INFO(c.name);
    auto before = proc_usage(pid);
    TcpClient client(c.port);
    auto f = client.flood(c.head, c.filler, kFlood, 60s);
    auto after = proc_usage(pid);
    WARN(c.name << ": answered " << parse_status_line(f.answer) << " after " << f.sent << " of " << kFlood
                << " bytes; weir VmRSS " << before.rss_kb << " -> " << after.rss_kb << " KiB, VmHWM " << before.hwm_kb
                << " -> " << after.hwm_kb << " KiB");
    INFO("answer: " << f.answer.substr(0, 300));
    CHECK(parse_status_line(f.answer) == c.want);
    CHECK(f.closed);
    CHECK(f.sent < kFlood / 4);
    REQUIRE(before.rss_kb > 0);
    REQUIRE(after.rss_kb > 0);
    CHECK(after.rss_kb - before.rss_kb < kMaxGrowthKb);
    CHECK(after.hwm_kb - before.hwm_kb < kMaxGrowthKb);
  }
  CHECK(weir.running());
}

std::string chunked_head(const std::string& request_line, const std::vector<std::string>& headers = {}) {
  std::string h = request_line + "\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
  for (const auto& x : headers) h += x + "\r\n";
  return h + "Transfer-Encoding: chunked\r\n\r\n";
}

const std::string kExtension(64 * 1024, 'e');
const std::string kTrailerField = "X-Trailer: " + std::string(1000, 't') + "\r\n";

}  // namespace

TEST_CASE("http-in and the admin API: 64 MiB of chunk extension or trailer is a 431 and a close with RSS flat",
          "[integration][ingress][admin]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"plain.yaml", http_flow("plain", "/in/plain", sink.url("/plain"))}},
                    .config = "http: { read_timeout: 30s }\n"});
  weir.start();
  INFO(weir.describe());
  const std::string in = chunked_head("POST /in/plain HTTP/1.1");
  const std::string admin = chunked_head("POST /dlq/replay HTTP/1.1");  // no token configured: open on loopback
  check_floods(weir, {
                         {"http-in, chunk extension", weir.http_port(), in + "1;", kExtension, 431},
                         {"http-in, trailer", weir.http_port(), in + "1\r\n{\r\n0\r\n", kTrailerField, 431},
                         {"admin, chunk extension", weir.admin_port(), admin + "1;", kExtension, 431},
                         {"admin, trailer", weir.admin_port(), admin + "1\r\n{\r\n0\r\n", kTrailerField, 431},
                     });
  // Both still serve.
  CHECK(weir.post("/in/plain", R"({"id":"after-floods"})").status == 202);
  CHECK(weir.admin("GET", "/healthz").status == 200);
  CHECK(wait_until([&] { return sink.ids().count("after-floods") == 1; }, 20s, 50ms));
}

TEST_CASE("admin with a token: a call without it is a 401 before its body is read", "[integration][admin]") {
  NatsServer nats;
  SinkProcess sink;
  const std::string token = "tok-limits-51c3";
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"plain.yaml", http_flow("plain", "/in/plain", sink.url("/plain"))}},
                    .config = "admin: { token_env: LIMITS_TOKEN }\n",
                    .env = {{"LIMITS_TOKEN", token}}});
  weir.start();
  INFO(weir.describe());

  // 4 MiB announced (the admin API's max_body) and not one byte of it sent: an answer can
  // only come from the header. Bounded by a condition: the close, within 5 s.
  for (const std::string auth : {"", "Authorization: Bearer wrong\r\n"}) {
    INFO("auth: " << auth);
    TcpClient c(weir.admin_port());
    REQUIRE(c.send("PUT /flows/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + auth +
                   "Content-Length: 4194304\r\n\r\n"));
    std::string got;
    CHECK(c.wait_closed(5s, &got));
    INFO("answer: " << got.substr(0, 300));
    CHECK(parse_status_line(got) == 401);
    CHECK(got.find("WWW-Authenticate: Bearer") != std::string::npos);
  }
  // A chunked body of 64 MiB without the token: refused at the header, memory flat.
  check_floods(weir, {{"admin without token, chunked 64 MiB", weir.admin_port(),
                       chunked_head("POST /dlq/replay HTTP/1.1"), std::string(64 * 1024, '{'), 401}});
  // With the token the same call is read and answered.
  auto ok = weir.admin("GET", "/flows", "", {"Authorization: Bearer " + token});
  CHECK(ok.status == 200);
}

TEST_CASE("a client gets its share of http-in's connections and cannot hold one for ever", "[integration][ingress]") {
  NatsServer nats;
  SinkProcess sink;
  // max_connections_per_client unset: a quarter of max_connections, 2.
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"plain.yaml", http_flow("plain", "/in/plain", sink.url("/plain"))}},
                    .config = "http: { max_connections: 8, max_connection_age: 2s, read_timeout: 5s }\n"});
  weir.start();
  INFO(weir.describe());
  auto post = [](const std::string& id) {
    const std::string body = R"({"id":")" + id + R"("})";
    return "POST /in/plain HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  std::vector<std::unique_ptr<TcpClient>> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(std::make_unique<TcpClient>(weir.http_port()));
    REQUIRE(held.back()->send(post("held-" + std::to_string(i))));
    CHECK(parse_status_line(held.back()->recv(5s, "}")) == 202);
  }
  const auto trickle_start = std::chrono::steady_clock::now();
  {
    TcpClient third(weir.http_port());
    third.send(post("third"));
    std::string got;
    CHECK(third.wait_closed(5s, &got));
    INFO("answer: " << got.substr(0, 300));
    CHECK(parse_status_line(got) == 503);
    CHECK(got.find("Retry-After: ") != std::string::npos);
    CHECK(got.find("from this client") != std::string::npos);
  }
  // Another address is another client: served while the first is at its share.
  {
    TcpClient other(weir.http_port(), "127.0.0.2");
    REQUIRE(other.send(post("other-client")));
    CHECK(parse_status_line(other.recv(5s, "}")) == 202);
  }
  // One held connection trickles a request every 500 ms, each within read_timeout: its
  // age (2 s) ends it, with Connection: close on an answer.
  int answered = 0;
  bool closed = false;
  std::string last;
  while (!closed && std::chrono::steady_clock::now() - trickle_start < 20s) {
    if (!held[0]->send(post("trickle-" + std::to_string(answered)))) break;
    last = held[0]->recv(5s, "}");
    if (parse_status_line(last) == 202) ++answered;
    if (last.find("Connection: close") != std::string::npos) closed = held[0]->wait_closed(5s);
    if (!closed) std::this_thread::sleep_for(500ms);  // the trickle's pace, not a wait for a condition
  }
  const auto lived = std::chrono::steady_clock::now() - trickle_start;
  WARN("trickling connection: " << answered << " requests answered, closed after "
                                << std::chrono::duration_cast<std::chrono::milliseconds>(lived).count() << " ms");
  INFO("last answer: " << last.substr(0, 300));
  CHECK(closed);
  CHECK(answered >= 2);
  CHECK(lived < 2s + 5s);  // its age, then at most one more request's read_timeout
  // The slot it held is free again: the client may connect anew.
  held.erase(held.begin());
  CHECK(wait_until(
      [&] {
        TcpClient again(weir.http_port());
        again.send(post("again"));
        return parse_status_line(again.recv(5s, "}")) == 202;
      },
      10s, 100ms));
  CHECK(weir.running());
}

// Every request-smuggling case answers 400 and
// closes the connection, without storing the request or the one smuggled behind it;
// past max_connections a connection gets 503 with Retry-After and is closed; weir keeps
// serving afterwards. Raw bytes over TcpClient: curl would not send these requests.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::http_request;
using weir::testing::NatsServer;
using weir::testing::parse_status_line;
using weir::testing::TcpClient;
using weir::testing::wait_until;

namespace {

// A request whose body (as a naive parser would frame it) hides a second, complete
// request carrying {"id": smuggled}.
std::string smuggled_request(const std::string& id) {
  std::string body = "{\"id\":\"" + id + "\"}";
  return "POST /in/plain HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// "5\r\nhello\r\n0\r\n\r\n" for "hello".
std::string chunked(const std::string& body) {
  char len[16];
  std::snprintf(len, sizeof len, "%zx", body.size());
  return std::string(len) + "\r\n" + body + "\r\n0\r\n\r\n";
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
  return n;
}

struct Case {
  std::string name;
  std::string request;  // raw bytes, smuggled request included where it fits
};

}  // namespace

TEST_CASE("request smuggling: every ambiguous framing is a 400 and a closed connection", "[integration][ingress]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"plain.yaml", http_flow("plain", "/in/plain", sink.url("/plain"))}},
                    .config = "http: { read_timeout: 3s }\n"});
  weir.start();
  INFO(weir.describe());

  const std::string head = "POST /in/plain HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
  const std::string outer = R"({"id":"outer"})";
  std::vector<Case> cases;
  int n = 0;
  auto smuggle = [&] { return smuggled_request("smuggled-" + std::to_string(++n)); };
  // Transfer-Encoding other than exactly "chunked" (Beast 1.74 reads these as "no body":
  // the chunked bytes would become the next request).
  for (std::string te : {"chunked, identity", "identity", "gzip, chunked", "gzip", "chunked;q=1", "chunked chunked",
                         "xchunked", "chunked,"}) {
    cases.push_back({"TE: " + te, head + "Transfer-Encoding: " + te + "\r\n\r\n" + chunked(outer) + smuggle()});
  }
  cases.push_back({"two TE fields", head + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n" +
                                        chunked(outer) + smuggle()});
  cases.push_back(
      {"TE chunked then identity field",
       head + "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n" + chunked(outer) + smuggle()});
  // Transfer-Encoding with Content-Length, in either order and with any coding.
  {
    std::string chunk = chunked(outer);
    std::string cl = "Content-Length: " + std::to_string(chunk.size()) + "\r\n";
    cases.push_back({"CL then TE chunked", head + cl + "Transfer-Encoding: chunked\r\n\r\n" + chunk + smuggle()});
    cases.push_back({"TE chunked then CL", head + "Transfer-Encoding: chunked\r\n" + cl + "\r\n" + chunk + smuggle()});
    cases.push_back({"TE identity with CL", head + "Transfer-Encoding: identity\r\n" + "Content-Length: " +
                                                std::to_string(outer.size()) + "\r\n\r\n" + outer + smuggle()});
  }
  // More than one Content-Length, equal or not.
  {
    std::string cl = std::to_string(outer.size());
    cases.push_back({"duplicate CL, same value",
                     head + "Content-Length: " + cl + "\r\nContent-Length: " + cl + "\r\n\r\n" + outer + smuggle()});
    cases.push_back({"duplicate CL, other value",
                     head + "Content-Length: " + cl + "\r\nContent-Length: 0\r\n\r\n" + outer + smuggle()});
    cases.push_back({"CL list", head + "Content-Length: " + cl + ", " + cl + "\r\n\r\n" + outer + smuggle()});
    cases.push_back({"CL not a number", head + "Content-Length: +" + cl + "\r\n\r\n" + outer + smuggle()});
  }
  // Bad chunk sizes.
  for (std::string size : {"-1", "0x0e", "zz", "fffffffffffffffffff", "e e", ""}) {
    cases.push_back({"chunk size '" + size + "'", head + "Transfer-Encoding: chunked\r\n\r\n" + size + "\r\n" + outer +
                                                      "\r\n0\r\n\r\n" + smuggle()});
  }
  cases.push_back({"chunk shorter than its size",
                   head + "Transfer-Encoding: chunked\r\n\r\n" + "5\r\n" + outer + "\r\n0\r\n\r\n" + smuggle()});
  // Bare LF line endings and obs-fold.
  cases.push_back({"bare LF everywhere",
                   "POST /in/plain HTTP/1.1\nHost: 127.0.0.1\nContent-Type: application/json\n"
                   "Content-Length: " +
                       std::to_string(outer.size()) + "\n\n" + outer + smuggle()});
  cases.push_back({"bare LF after one header",
                   head + "X-A: 1\nContent-Length: " + std::to_string(outer.size()) + "\r\n\r\n" + outer + smuggle()});
  cases.push_back(
      {"bare CR", head + "X-A: 1\rContent-Length: " + std::to_string(outer.size()) + "\r\n\r\n" + outer + smuggle()});
  cases.push_back({"obs-fold", head + "X-Folded: a\r\n b\r\nContent-Length: " + std::to_string(outer.size()) +
                                   "\r\n\r\n" + outer + smuggle()});
  cases.push_back({"obs-fold of Transfer-Encoding",
                   head + "Transfer-Encoding: identity\r\n\tchunked\r\n\r\n" + chunked(outer) + smuggle()});
  cases.push_back({"space before colon", head + "Transfer-Encoding : chunked\r\n\r\n" + chunked(outer) + smuggle()});

  for (const auto& c : cases) {
    INFO("case: " << c.name);
    TcpClient client(weir.http_port());
    client.send(c.request);
    std::string got;
    bool closed = client.wait_closed(8s, &got);
    INFO("answer: " << got.substr(0, 400));
    CHECK(parse_status_line(got) == 400);
    CHECK(closed);
    // One answer only: the smuggled request was never read as a request.
    CHECK(count_of(got, "HTTP/1.1 ") == 1);
  }

  // Exactly chunked (any case) is still fine, and so is one Content-Length.
  {
    TcpClient client(weir.http_port());
    client.send(head + "Transfer-Encoding: Chunked\r\n\r\n" + chunked(R"({"id":"chunked-ok"})"));
    std::string got = client.recv(5s, "}");
    CHECK(parse_status_line(got) == 202);
  }
  auto r = weir.post("/in/plain", R"({"id":"after"})");
  CHECK(r.status == 202);
  CHECK(weir.running());

  // Nothing but the two accepted events reached the sink: no "outer", no smuggled one.
  std::set<std::string> accepted{"chunked-ok", "after"};
  REQUIRE(wait_until([&] { return missing(accepted, sink.ids()).empty(); }, 20s, 50ms));
  std::set<std::string> ids = sink.ids();
  CHECK(ids == accepted);
}

TEST_CASE("connections past max_connections get 503 and are closed and weir keeps serving", "[integration][ingress]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"plain.yaml", http_flow("plain", "/in/plain", sink.url("/plain"))}},
                    // The cap in all: every client here is 127.0.0.1, so no per-client cap below it.
                    .config = "http: { max_connections: 8, max_connections_per_client: 8, read_timeout: 20s }\n"
                              "admin: { max_connections: 4, max_connections_per_client: 4 }\n"});
  weir.start();
  INFO(weir.describe());

  // Fill the ingress cap with idle connections; a request on one of them proves it was
  // accepted (the answer comes from a session, not from the refusal path).
  std::vector<std::unique_ptr<TcpClient>> held;
  for (int i = 0; i < 8; ++i) held.push_back(std::make_unique<TcpClient>(weir.http_port()));
  const std::string post =
      "POST /in/plain HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: 2\r\n\r\n{}";
  REQUIRE(held[0]->send(post));
  CHECK(parse_status_line(held[0]->recv(5s, "}")) == 202);

  auto expect_refused = [&](int port) {
    TcpClient extra(port);
    extra.send(post);
    std::string got;
    bool closed = extra.wait_closed(5s, &got);
    INFO("answer: " << got.substr(0, 300));
    CHECK(parse_status_line(got) == 503);
    CHECK(got.find("Retry-After: ") != std::string::npos);
    CHECK(closed);
  };
  expect_refused(weir.http_port());

  // A flood far past the cap: each gets a 503 or (past the refusals in progress) a plain
  // close; never a 2xx, never a hang.
  {
    std::vector<std::unique_ptr<TcpClient>> flood;
    for (int i = 0; i < 200; ++i) flood.push_back(std::make_unique<TcpClient>(weir.http_port()));
    int refused = 0;
    for (auto& c : flood) {
      std::string got;
      CHECK(c->wait_closed(10s, &got));
      int status = parse_status_line(got);
      CHECK((status == 503 || status == 0));
      refused += status == 503;
    }
    CHECK(refused > 0);
  }
  // The admin API has its own cap and still answers while ingress is full.
  CHECK(http_request("GET", weir.admin_url("/healthz")).status == 200);
  {
    std::vector<std::unique_ptr<TcpClient>> admin_held;
    for (int i = 0; i < 4; ++i) admin_held.push_back(std::make_unique<TcpClient>(weir.admin_port()));
    REQUIRE(admin_held[0]->send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    CHECK(parse_status_line(admin_held[0]->recv(5s, "\r\n")) == 200);
    TcpClient extra(weir.admin_port());
    extra.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    std::string got;
    CHECK(extra.wait_closed(5s, &got));
    CHECK(parse_status_line(got) == 503);
  }
  CHECK(wait_until([&] { return http_request("GET", weir.admin_url("/healthz")).status == 200; }, 5s, 50ms));

  // Freed slots serve again.
  held.clear();
  HttpReply after;
  CHECK(wait_until(
      [&] {
        after = weir.post("/in/plain", R"({"id":"after-flood"})");
        return after.status == 202;
      },
      10s, 50ms));
  CHECK(weir.running());
  std::set<std::string> want{"after-flood"};
  CHECK(wait_until([&] { return missing(want, sink.ids()).empty(); }, 20s, 50ms));
}

// Every row of the ingress answers (docs/admin-api.md), with the process still
// serving afterwards and nothing stored for a rejected request.
#include <catch2/catch.hpp>
#include <csignal>
#include <ctime>
#include <regex>
#include <thread>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::http_request;
using weir::testing::NatsServer;
using weir::testing::parse_status_line;
using weir::testing::TcpClient;
using weir::testing::wait_until;

namespace {

const std::string kGithubSecret = "It's a Secret to Everybody";
const std::string kStandardKey = "standard-webhooks-key-0123456789";  // raw key bytes
const std::string kBearer = "tok-3d9f1c-secret";

// True when `text` names a number within [lo, hi] (the parse position, in whatever
// base the runtime counts: offset or column).
bool names_number_in(const std::string& text, long lo, long hi) {
  static const std::regex kNumber(R"(\d+)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kNumber); it != std::sregex_iterator(); ++it) {
    long v = std::stol(it->str());
    if (v >= lo && v <= hi) return true;
  }
  return false;
}

std::string raw_post(const std::string& path, const std::string& body, const std::string& extra_headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n" + extra_headers + "\r\n" + body;
}

}  // namespace

TEST_CASE("ingress answers every documented row and keeps serving", "[integration][ingress]") {
  NatsServer nats;
  SinkProcess sink;
  const std::string standard_secret = "whsec_" + base64(kStandardKey);
  WeirProcess weir({
      .nats_url = nats.url(),
      .flows =
          {
              {"plain.yaml", http_flow("plain", "/in/plain", sink.url("/plain"))},
              {"github.yaml", http_flow("github", "/in/github", sink.url("/github"), "retries: 8, " WEIR_TEST_RETRY,
                                        "hmac: { secret_env: GH_SECRET }")},
              {"standard.yaml",
               http_flow("standard", "/in/standard", sink.url("/standard"), "retries: 8, " WEIR_TEST_RETRY,
                         "hmac: { secret_env: SW_SECRET, scheme: standard }")},
              {"bearer.yaml", http_flow("bearer", "/in/bearer", sink.url("/bearer"), "retries: 8, " WEIR_TEST_RETRY,
                                        "bearer: { token_env: IN_TOKEN }")},
          },
      .config = "http: { max_body: 4KiB, read_timeout: 1s }\n",
      .env = {{"GH_SECRET", kGithubSecret}, {"SW_SECRET", standard_secret}, {"IN_TOKEN", kBearer}},
  });
  weir.start();
  INFO(weir.describe());

  // Body "id" of every 202 (weir-sink counts deliveries by it). Every rejected body
  // carries an id too, so anything stored by mistake shows up in the sink's counts.
  std::set<std::string> accepted;
  auto accept = [&](const HttpReply& r, const std::string& body_id) {
    CHECK_FALSE(id_from_reply(r).empty());
    CHECK(accepted.insert(body_id).second);
  };

  SECTION("rows") {
    // --- POST to a flow's path, stored → 202 {"id"}
    {
      auto r = weir.post("/in/plain", R"({"id":"ok"})");
      CHECK(r.status == 202);
      CHECK(r.header("content-type").find("json") != std::string::npos);
      accept(r, "ok");
      auto keyed = weir.post("/in/plain", R"({"id":"row-keyed-1"})", {"Idempotency-Key: row-keyed-1"});
      CHECK(keyed.status == 202);
      CHECK(id_from_reply(keyed) == "row-keyed-1");
      accept(keyed, "row-keyed-1");
    }

    // --- body not valid JSON → 400 with the parse position
    {
      const std::string bad = R"({"id": "bad", "b": [1, 2,, 3]})";
      long pos = static_cast<long>(bad.find(",,")) + 1;  // 0-based offset of the offending ','
      auto r = weir.post("/in/plain", bad);
      CHECK(r.status == 400);
      INFO("400 body: " << r.body);
      CHECK(names_number_in(r.body, pos - 1, pos + 2));
      auto truncated = weir.post("/in/plain", R"({"a": )");
      CHECK(truncated.status == 400);
      auto empty = weir.post("/in/plain", "");
      CHECK(empty.status == 400);
    }

    // --- body over max_body → 413, connection closed, nothing stored
    {
      json big = {{"id", "big"}, {"pad", std::string(8000, 'x')}};
      TcpClient c(weir.http_port());
      c.send(raw_post("/in/plain", big.dump()));
      std::string got;
      bool closed = c.wait_closed(5s, &got);
      INFO("answer: " << got.substr(0, 300));
      CHECK(parse_status_line(got) == 413);
      CHECK(closed);
      // Chunked, so the size is only known while reading.
      TcpClient chunked(weir.http_port());
      std::string body = big.dump();
      std::string req =
          "POST /in/plain HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          "Transfer-Encoding: chunked\r\n\r\n";
      for (size_t off = 0; off < body.size(); off += 1000) {
        std::string part = body.substr(off, 1000);
        char len[16];
        std::snprintf(len, sizeof len, "%zx", part.size());
        req += std::string(len) + "\r\n" + part + "\r\n";
      }
      req += "0\r\n\r\n";
      chunked.send(req);
      std::string got2;
      CHECK(chunked.wait_closed(5s, &got2));
      CHECK(parse_status_line(got2) == 413);
      // Just under the limit is accepted.
      json fits = {{"id", "fits"}, {"pad", std::string(3000, 'y')}};
      auto r = weir.post("/in/plain", fits.dump());
      CHECK(r.status == 202);
      accept(r, "fits");
    }

    // --- headers over the limit → 431
    {
      TcpClient c(weir.http_port());
      std::string huge = "X-Huge: " + std::string(64 * 1024, 'h') + "\r\n";
      c.send(raw_post("/in/plain", R"({"id":"h431"})", huge));
      std::string got = c.recv(5s, "\r\n");
      INFO("answer: " << got.substr(0, 300));
      CHECK(parse_status_line(got) == 431);
      // Many moderate headers add up the same way.
      TcpClient many(weir.http_port());
      std::string lots;
      for (int i = 0; i < 2000; ++i) lots += "X-H" + std::to_string(i) + ": " + std::string(40, 'v') + "\r\n";
      many.send(raw_post("/in/plain", R"({"id":"h431b"})", lots));
      std::string got2 = many.recv(5s, "\r\n");
      CHECK(parse_status_line(got2) == 431);
    }

    // --- GitHub HMAC: wrong or missing → 401, right → 202
    {
      const std::string body = R"({"id":"gh-1","action":"opened","number":42})";
      const std::string sig = "X-Hub-Signature-256: sha256=" + hmac_sha256_hex(kGithubSecret, body);
      CHECK(weir.post("/in/github", body).status == 401);
      CHECK(weir.post("/in/github", body, {"X-Hub-Signature-256: sha256=" + std::string(64, '0')}).status == 401);
      CHECK(weir.post("/in/github", body, {"X-Hub-Signature-256: " + hmac_sha256_hex(kGithubSecret, body)}).status ==
            401);  // without "sha256="
      CHECK(weir.post("/in/github", R"({"id":"gh-2","action":"opened","number":43})", {sig}).status ==
            401);  // other body
      CHECK(weir.post("/in/github", body, {"X-Hub-Signature-256: sha256=" + hmac_sha256_hex("wrong", body)}).status ==
            401);
      auto r = weir.post("/in/github", body, {sig});
      CHECK(r.status == 202);
      accept(r, "gh-1");
    }

    // --- Standard Webhooks: wrong, missing or stale → 401, right → 202 (webhook-id is the id)
    {
      const std::string body = R"({"id":"sw-1","type":"invoice.paid","amount":1200})";
      const std::string body2 = R"({"id":"sw-2","type":"invoice.paid","amount":1300})";
      auto headers_for = [&](const std::string& id, long ts, const std::string& key, const std::string& signed_body) {
        std::string t = std::to_string(ts);
        return std::vector<std::string>{
            "webhook-id: " + id, "webhook-timestamp: " + t,
            "webhook-signature: v1," + hmac_sha256_base64(key, id + "." + t + "." + signed_body)};
      };
      long now = static_cast<long>(std::time(nullptr));
      CHECK(weir.post("/in/standard", body).status == 401);
      CHECK(weir.post("/in/standard", body, headers_for("msg_wrong", now, "not-the-key", body)).status == 401);
      CHECK(weir.post("/in/standard", body, headers_for("msg_stale", now - 600, kStandardKey, body)).status == 401);
      CHECK(weir.post("/in/standard", body, headers_for("msg_future", now + 600, kStandardKey, body)).status == 401);
      CHECK(weir.post("/in/standard", body2, headers_for("msg_other", now, kStandardKey, body)).status == 401);
      auto r = weir.post("/in/standard", body, headers_for("msg_2Yk1", now, kStandardKey, body));
      CHECK(r.status == 202);
      CHECK(id_from_reply(r) == "msg_2Yk1");
      accept(r, "sw-1");
      // Key rotation: several space-separated signatures, one of them right.
      auto rot = headers_for("msg_rot", now - 30, kStandardKey, body2);
      rot[2] = "webhook-signature: v1," + base64(std::string(32, 'z')) + " " + rot[2].substr(19);
      auto r2 = weir.post("/in/standard", body2, rot);
      CHECK(r2.status == 202);
      accept(r2, "sw-2");
    }

    // --- bearer token: wrong or missing → 401, right → 202
    {
      const std::string body = R"({"id":"bearer-1"})";
      CHECK(weir.post("/in/bearer", body).status == 401);
      CHECK(weir.post("/in/bearer", body, {"Authorization: Bearer wrong-token"}).status == 401);
      CHECK(weir.post("/in/bearer", body, {"Authorization: Bearer " + kBearer + "x"}).status == 401);
      CHECK(weir.post("/in/bearer", body, {"Authorization: Basic " + base64("u:" + kBearer)}).status == 401);
      auto r = weir.post("/in/bearer", body, {"Authorization: Bearer " + kBearer});
      CHECK(r.status == 202);
      accept(r, "bearer-1");
    }

    // --- unknown path → 404, wrong method → 405
    {
      CHECK(weir.post("/in/nope", R"({})").status == 404);
      CHECK(weir.post("/", R"({})").status == 404);
      CHECK(http_request("GET", weir.ingress_url("/in/plain")).status == 405);
      CHECK(http_request("PUT", weir.ingress_url("/in/plain"), R"({})", {"Content-Type: application/json"}).status ==
            405);
    }

    // --- client slower than read_timeout (1s) → connection closed; others still served
    {
      TcpClient slow_headers(weir.http_port());
      slow_headers.send("POST /in/plain HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty");
      TcpClient slow_body(weir.http_port());
      slow_body.send(
          "POST /in/plain HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
          "{\"id\":\"slow\",");
      TcpClient idle(weir.http_port());  // connects and sends nothing
      // While they hang, a normal client is served.
      auto r = weir.post("/in/plain", R"({"id":"during-slow"})");
      CHECK(r.status == 202);
      accept(r, "during-slow");
      auto t0 = std::chrono::steady_clock::now();
      CHECK(slow_headers.wait_closed(6s));
      CHECK(slow_body.wait_closed(6s));
      CHECK(idle.wait_closed(6s));
      CHECK(std::chrono::steady_clock::now() - t0 < 6s);
      // The slow request was never stored: nothing answered 202 on it.
    }

    // --- after all of these, a normal POST still gets 202 and the process serves
    {
      auto r = weir.post("/in/plain", R"({"id":"after"})");
      CHECK(r.status == 202);
      accept(r, "after");
      CHECK(weir.running());
      CHECK(http_request("GET", weir.admin_url("/healthz")).status == 200);
    }

    // Exactly the accepted events reach the sink: nothing stored for any rejection.
    std::vector<std::string> lost;
    bool delivered = wait_until(
        [&] {
          lost = missing(accepted, sink.ids());
          return lost.empty();
        },
        20s, 50ms);
    CHECK(delivered);
    CHECK(lost.empty());
    // One more event, posted last, flushes anything a rejected request might have stored.
    auto last = weir.post("/in/plain", R"({"id":"last"})");
    REQUIRE(last.status == 202);
    accept(last, "last");
    REQUIRE(wait_until([&] { return missing(accepted, sink.ids()).empty(); }, 20s, 50ms));
    json stats = sink.stats();
    INFO("sink: " << stats.dump());
    CHECK(stats.value("unique", 0) == static_cast<int64_t>(accepted.size()));
    CHECK(stats.value("received", 0) == static_cast<int64_t>(accepted.size()));

    // No configured secret in the (text) log, whatever was rejected above.
    std::string log = weir.log();
    CHECK(log.find(kGithubSecret) == std::string::npos);
    CHECK(log.find(standard_secret) == std::string::npos);
    CHECK(log.find(base64(kStandardKey)) == std::string::npos);
    CHECK(log.find(kBearer) == std::string::npos);
  }
}

TEST_CASE("keep-alive connections survive rejected requests", "[integration][ingress]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir(
      {.nats_url = nats.url(), .flows = {{"plain.yaml", http_flow("plain", "/in/plain", sink.url("/plain"))}}});
  weir.start();
  INFO(weir.describe());
  weir::testing::HttpClient client;
  std::vector<std::string> json_ct{"Content-Type: application/json"};
  CHECK(client.request("POST", weir.ingress_url("/in/plain"), R"({"a":1})", json_ct).status == 202);
  CHECK(client.request("POST", weir.ingress_url("/in/plain"), R"({"a":)", json_ct).status == 400);
  CHECK(client.request("POST", weir.ingress_url("/in/nope"), R"({"a":1})", json_ct).status == 404);
  CHECK(client.request("GET", weir.ingress_url("/in/plain")).status == 405);
  CHECK(client.request("POST", weir.ingress_url("/in/plain"), R"({"a":2})", json_ct).status == 202);
  // A 400/404/405 is an answer, not a reason to drop the connection.
  CHECK(client.connects() == 1);

  // Two requests written back to back on one connection get two answers, in order.
  TcpClient raw(weir.http_port());
  std::string two = raw_post("/in/plain", R"({"id":"pipelined-1"})") + raw_post("/in/plain", R"({"id":"pipelined-2"})");
  REQUIRE(raw.send(two));
  std::string got = raw.recv(5s);
  size_t first = got.find("HTTP/1.1 202");
  CHECK(first != std::string::npos);
  CHECK(got.find("HTTP/1.1 202", first == std::string::npos ? 0 : first + 1) != std::string::npos);
  std::set<std::string> ids{"pipelined-1", "pipelined-2"};
  CHECK(wait_until([&] { return missing(ids, sink.ids()).empty(); }, 20s, 50ms));
}

TEST_CASE("a 503 for an event that may be stored says its id, and a resend with it stores the event once",
          "[integration][ingress]") {
  NatsServer nats;
  SinkProcess sink;
  WeirOptions o;
  o.nats_url = nats.url();
  o.flows = {{"plain.yaml", http_flow("plain", "/in/plain", sink.url("/out"))}};
  o.config = "http: { ack_timeout: 300ms }\n";
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());
  REQUIRE(weir.post("/in/plain", R"({"id":"warm"})").status == 202);
  REQUIRE(wait_until([&] { return sink.ids().count("warm") == 1; }, 20s, 20ms));

  // The server reads nothing while stopped: the publish is written, its PubAck never comes.
  REQUIRE(::kill(nats.pid(), SIGSTOP) == 0);
  auto r = weir.post("/in/plain", R"({"id":"unsure"})");
  REQUIRE(::kill(nats.pid(), SIGCONT) == 0);
  INFO(r.status << " " << r.body);
  REQUIRE(r.status == 503);
  CHECK(!r.header("retry-after").empty());
  json b = json::parse(r.body);
  CHECK(b.value("stored", "") == "unknown");
  const std::string id = b.value("id", "");
  REQUIRE_FALSE(id.empty());
  CHECK(b.value("hint", "").find(id) != std::string::npos);

  // Resent with that id (weir stored the first write once the server woke, or not): one event.
  REQUIRE(
      wait_until([&] { return weir.post("/in/plain", R"({"id":"unsure"})", {"Idempotency-Key: " + id}).status == 202; },
                 20s, 100ms));
  REQUIRE(weir.post("/in/plain", R"({"id":"after"})").status == 202);
  REQUIRE(wait_until([&] { return sink.ids().count("after") == 1 && sink.ids().count("unsure") == 1; }, 20s, 20ms));
  int copies = 0;
  for (const auto& req : sink.requests(1000)) {
    json got = body_of(req);
    if (got.is_object() && got.value("id", "") == "unsure") ++copies;
  }
  CHECK(copies == 1);
}

// An event that fits http.max_body but not the NATS server's max_payload can never be
// stored: a resend would fail the same way, so it is a 413 naming the server's limit, not a
// 503 with Retry-After. Below it, events are stored and delivered as usual.
TEST_CASE("an event larger than the NATS server's max_payload is a 413 naming the limit, not a 503",
          "[integration][ingress]") {
  constexpr int64_t kMaxPayload = 65536;
  NatsServer nats("", 0, kMaxPayload);
  SinkProcess sink;
  WeirOptions o;
  o.nats_url = nats.url();
  o.flows = {{"plain.yaml", http_flow("plain", "/in/plain", sink.url("/out"))}};
  o.config = "http: { max_body: 256KiB }\n";
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());

  // Well over the limit, and a body that fits alone but not with the event's headers.
  const auto body_of_size = [](const std::string& id, size_t n) {
    std::string b = R"({"id":")" + id + R"(","pad":")";
    return b + std::string(n - b.size() - 2, 'x') + "\"}";
  };
  for (size_t size : {static_cast<size_t>(100'000), static_cast<size_t>(kMaxPayload - 40)}) {
    auto r = weir.post("/in/plain", body_of_size("big-" + std::to_string(size), size));
    INFO(size << " bytes: " << r.status << " " << r.body);
    CHECK(r.status == 413);
    CHECK(r.header("retry-after").empty());
    json b = json::parse(r.body);
    const std::string error = b.value("error", "");
    CHECK(error.find("larger than the NATS server accepts") != std::string::npos);
    CHECK(error.find(std::to_string(kMaxPayload) + " bytes") != std::string::npos);
  }

  REQUIRE(weir.post("/in/plain", R"({"id":"small"})").status == 202);
  REQUIRE(wait_until([&] { return sink.ids().count("small") == 1; }, 20s, 20ms));
  CHECK(sink.ids().size() == 1);
  CHECK(weir.admin("GET", "/readyz").status == 200);
  CHECK(weir.running());
}

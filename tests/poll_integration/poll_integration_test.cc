// The poll source end to end: weir (the binary) polls a local API started by the test and
// delivers to weir-sink; a local OAuth2 token endpoint issues short-lived tokens.
//  - ETag unchanged → 304, no new events; the validators survive a restart (KV state).
//  - Tokens expiring every second are replaced; a revoked one (401) is refreshed once and
//    the request repeated; no 401 answer becomes an event; no secret or token is logged.
//  - Two instances in one cluster: kill -9 of the holder in the middle of a paginated walk;
//    the other resumes from the stored cursor (see the test for exactly what is asserted).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "runtime/base/thread_annotations.h"
#include "tests/support/scripted_http_server.h"
#include "tests/support/harness.h"
#include "tests/support/support.h"

using weir::Mutex;
using weir::MutexLock;
using weir::itest::json;
using weir::itest::SinkProcess;
using weir::itest::WeirOptions;
using weir::itest::WeirProcess;
using weir::testing::NatsServer;
using weir::testing::ScriptedHttpServer;
using weir::testing::ScriptedReply;
using weir::testing::ScriptedRequest;
using weir::testing::wait_until;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

std::string query_param(const std::string& target, const std::string& name) {
  const auto q = target.find('?');
  if (q == std::string::npos) return "";
  const std::string rest = target.substr(q + 1);
  size_t pos = 0;
  for (;;) {
    const size_t amp = rest.find('&', pos);
    const std::string kv = rest.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
    if (kv.rfind(name + "=", 0) == 0) return kv.substr(name.size() + 1);
    if (amp == std::string::npos) return "";
    pos = amp + 1;
  }
}

std::string random_hex(size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::random_device rd;
  std::string out;
  for (size_t i = 0; i < n; ++i) out += kHex[rd() % 16];
  return out;
}

// What a local server saw and answered, with arrival times.
struct Seen {
  Clock::time_point at;
  std::string target;
  std::string authorization;
  std::string if_none_match;
  int status = 0;
};

class Log {
 public:
  void add(Seen s) {
    MutexLock lock(mu_);
    seen_.push_back(std::move(s));
  }
  std::vector<Seen> all() const {
    MutexLock lock(mu_);
    return seen_;
  }
  size_t count(int status) const {
    MutexLock lock(mu_);
    return std::count_if(seen_.begin(), seen_.end(), [&](const Seen& s) { return s.status == status; });
  }
  size_t size() const {
    MutexLock lock(mu_);
    return seen_.size();
  }

 private:
  mutable Mutex mu_;
  std::vector<Seen> seen_ GUARDED_BY(mu_);
};

std::string sink_flow(const std::string& name, const std::string& poll, const std::string& sink_url) {
  return "flow: " + name + "\nfrom:\n  poll:\n" + poll + "steps: []\nto: { out: { http: { url: \"" + sink_url +
         "\", retries: 8, timeout: 2s } } }\n";
}

int64_t stat(const json& stats, const std::string& key) {
  return stats.contains(key) && stats[key].is_number() ? stats[key].get<int64_t>() : 0;
}

}  // namespace

TEST_CASE("poll: an unchanged ETag gives no events, also after a restart", "[integration][poll]") {
  NatsServer nats;
  SinkProcess sink;
  std::atomic<int> version{1};
  Log log;
  ScriptedHttpServer api([&](const ScriptedRequest& r) {
    const int v = version.load();
    const std::string etag = "\"v" + std::to_string(v) + "\"";
    Seen s{Clock::now(), r.target, "", r.header("If-None-Match"), 0};
    ScriptedReply reply;
    if (s.if_none_match == etag) {
      reply = ScriptedReply::with_status(304);
    } else {
      json items = json::array();
      for (int i = 0; i < v + 1; ++i) items.push_back({{"id", "v" + std::to_string(v) + "-" + std::to_string(i)}});
      reply = ScriptedReply::with_status(200, json{{"data", {{"items", items}}}}.dump());
      reply.headers = {{"ETag", etag}, {"Content-Type", "application/json"}};
    }
    s.status = reply.status;
    log.add(s);
    return reply;
  });

  WeirOptions o;
  o.nats_url = nats.url();
  o.flows["items.yaml"] = sink_flow(
      "items", "    url: \"" + api.url("/items?key=K") + "\"\n    every: 100ms\n    split: data.items\n",
      sink.url("/out"));
  WeirProcess weir(o);
  weir.start();

  REQUIRE(wait_until([&] { return sink.stat("unique") == 2; }, 20s));
  // Several more polls, all answered 304: nothing new reaches the sink.
  REQUIRE(wait_until([&] { return log.count(304) >= 5; }, 20s));
  CHECK(log.count(200) == 1);
  CHECK(sink.stat("received") == 2);
  CHECK(sink.ids() == std::set<std::string>{"v1-0", "v1-1"});

  version = 2;  // a new ETag and three new items
  REQUIRE(wait_until([&] { return sink.stat("unique") == 5; }, 20s));
  const size_t answered = log.count(304);
  REQUIRE(wait_until([&] { return log.count(304) >= answered + 3; }, 20s));
  CHECK(log.count(200) == 2);
  CHECK(sink.stat("received") == 5);

  // The validators live in KV: a restarted weir asks with If-None-Match from its first poll.
  REQUIRE(weir.terminate() == 0);
  const size_t before = log.size();
  weir.start();
  REQUIRE(wait_until([&] { return log.size() >= before + 2; }, 20s));
  const auto seen = log.all();
  CHECK(seen[before].if_none_match == "\"v2\"");
  CHECK(seen[before].status == 304);
  CHECK(sink.stat("received") == 5);
  CHECK(weir.terminate() == 0);
}

TEST_CASE("poll: OAuth2 tokens expiring mid-run are replaced - a 401 never becomes an event", "[integration][poll]") {
  NatsServer nats;
  SinkProcess sink;
  const std::string client_id = "client-" + random_hex(8);
  const std::string secret = "SECRET-" + random_hex(24);
  const std::string token_prefix = "TOKEN-" + random_hex(16) + "-";

  struct {
    Mutex mu;
    std::map<std::string, Clock::time_point> issued GUARDED_BY(mu);
  } tokens;  // issued by `auth`, checked by `api` (each on its own server thread)
  std::atomic<int> issued_count{0};
  std::atomic<int> bad_client{0};
  ScriptedHttpServer auth([&](const ScriptedRequest& r) {
    const std::string want = "grant_type=client_credentials&client_id=" + client_id + "&client_secret=" + secret +
                             "&scope=read%20feed";
    if (r.method != "POST" || r.body != want || r.header("Content-Type") != "application/x-www-form-urlencoded") {
      ++bad_client;
      return ScriptedReply::with_status(401, R"({"error": "invalid_client"})");
    }
    const int n = ++issued_count;
    const std::string token = token_prefix + std::to_string(n);
    {
      MutexLock lock(tokens.mu);
      tokens.issued[token] = Clock::now();
    }
    return ScriptedReply::with_status(
        200, json{{"access_token", token}, {"token_type", "Bearer"}, {"expires_in", 1}}.dump());
  });

  // Tokens live 1 s (plus a grace for a loaded machine); token 2 is revoked at once.
  Log log;
  std::atomic<int> served{0};
  std::atomic<bool> frozen{false};  // no new items: lets the sink catch up before the checks
  ScriptedHttpServer api([&](const ScriptedRequest& r) {
    Seen s{Clock::now(), r.target, r.header("Authorization"), "", 0};
    std::string token = s.authorization.rfind("Bearer ", 0) == 0 ? s.authorization.substr(7) : "";
    bool valid = false;
    {
      MutexLock lock(tokens.mu);
      auto it = tokens.issued.find(token);
      valid = it != tokens.issued.end() && Clock::now() - it->second < 1500ms && token != token_prefix + "2";
    }
    ScriptedReply reply = ScriptedReply::with_status(401, R"({"error": "invalid_token"})");
    if (valid && frozen.load()) reply = ScriptedReply::with_status(200, "[]");
    if (valid && !frozen.load()) {
      reply = ScriptedReply::with_status(200, json::array({{{"id", "r" + std::to_string(++served)}}}).dump());
    }
    s.status = reply.status;
    log.add(s);
    return reply;
  });

  WeirOptions o;
  o.nats_url = nats.url();
  o.env = {{"POLL_CLIENT_ID", client_id}, {"POLL_CLIENT_SECRET", secret}};
  o.flows["feed.yaml"] = sink_flow(
      "feed",
      "    url: \"" + api.url("/feed") +
          "\"\n    every: 100ms\n"
          "    oauth2: { token_url: \"" +
          auth.url("/oauth/token") +
          "\", insecure_http: true, client_id_env: POLL_CLIENT_ID, client_secret_env: POLL_CLIENT_SECRET, "
          "scopes: [read, feed] }\n",
      sink.url("/out"));
  WeirProcess weir(o);
  weir.start();

  // A few seconds of polling: several tokens, events all along.
  REQUIRE(wait_until([&] { return issued_count.load() >= 5 && sink.stat("unique") >= 20; }, 30s));
  const auto metrics = weir.admin("GET", "/metrics").body;
  CHECK(metrics.find(secret) == std::string::npos);
  CHECK(metrics.find(token_prefix) == std::string::npos);
  frozen = true;
  REQUIRE(wait_until([&] { return sink.stat("unique") == served.load(); }, 20s));
  REQUIRE(weir.terminate() == 0);

  CHECK(bad_client.load() == 0);
  const auto seen = log.all();
  // Token 2 was refused exactly once: weir fetched token 3 and asked again.
  size_t revoked = 0;
  for (size_t i = 0; i < seen.size(); ++i) {
    if (seen[i].status != 401) continue;
    INFO("401 for " << seen[i].authorization.substr(0, 7) << "... at request " << i);
    if (seen[i].authorization == "Bearer " + token_prefix + "2") ++revoked;
    // Every refusal is followed by a request with another token that succeeds.
    REQUIRE(i + 1 < seen.size());
    CHECK(seen[i + 1].authorization != seen[i].authorization);
    CHECK(seen[i + 1].status == 200);
  }
  CHECK(revoked == 1);
  // Each event is one item of a 200 answer: nothing from a 401 body reached the sink.
  std::set<std::string> want;
  for (int i = 1; i <= served.load(); ++i) want.insert("r" + std::to_string(i));
  const std::set<std::string> got = sink.ids();
  CHECK(got.size() == want.size());
  CHECK(weir::itest::missing(want, got).empty());
  CHECK(stat(sink.stats(), "received") == static_cast<int64_t>(want.size()));
  // No secret and no token in weir's log (nor in its metrics, checked while it ran).
  const std::string weir_log = weir.log();
  CHECK(weir_log.find(secret) == std::string::npos);
  CHECK(weir_log.find(token_prefix) == std::string::npos);
}

TEST_CASE("poll: a bad client secret is a clear error and never logged", "[integration][poll]") {
  NatsServer nats;
  SinkProcess sink;
  const std::string secret = "WRONG-" + random_hex(24);
  ScriptedHttpServer auth([&](const ScriptedRequest&) {
    return ScriptedReply::with_status(
        401, R"({"error": "invalid_client", "error_description": "bad secret )" + secret + "\"}");
  });
  std::atomic<int> api_calls{0};
  ScriptedHttpServer api([&](const ScriptedRequest&) {
    ++api_calls;
    return ScriptedReply::with_status(200, "[]");
  });
  WeirOptions o;
  o.nats_url = nats.url();
  o.env = {{"CID", "someone"}, {"CSECRET", secret}};
  o.flows["feed.yaml"] = sink_flow("feed",
                                   "    url: \"" + api.url("/feed") +
                                       "\"\n    every: 100ms\n    oauth2: { token_url: \"" + auth.url("/token") +
                                       "\", insecure_http: true, client_id_env: CID, client_secret_env: CSECRET }\n",
                                   sink.url("/out"));
  WeirProcess weir(o);
  weir.start();
  REQUIRE(weir.process().wait_log("invalid_client", 20s));
  auto metrics = weir.admin("GET", "/metrics");
  CHECK(metrics.body.find(secret) == std::string::npos);
  REQUIRE(weir.terminate() == 0);
  CHECK(api_calls.load() == 0);  // no token, no request
  CHECK(weir.log().find(secret) == std::string::npos);
  CHECK(weir.log().find("HTTP 401") != std::string::npos);

  // A missing variable stops weir at start with the variable's name.
  WeirOptions missing = o;
  missing.env = {{"CID", "someone"}};
  WeirProcess bad(missing);
  bad.spawn();
  auto code = bad.process().wait_exit(30s);
  REQUIRE(code);
  CHECK(*code == 2);
  CHECK(bad.log().find("CSECRET") != std::string::npos);
}

TEST_CASE("poll: kill -9 of the holder mid-pagination - the other instance resumes from the stored cursor",
          "[integration][poll]") {
  // Pages 0..kPages-1 hold kItems items each ("<page>-<i>") and name the next page; page
  // kPages is empty and names itself (the feed is caught up). Each page takes 100 ms, so
  // the walk is still going when the holder is killed. Until `open`, the feed is empty.
  constexpr int kPages = 12;
  constexpr int kItems = 5;
  NatsServer nats;
  SinkProcess sink;
  std::atomic<bool> open{false};
  Log log;  // requests after `open`
  ScriptedHttpServer api([&](const ScriptedRequest& r) {
    if (!open.load()) return ScriptedReply::with_status(200, R"({"items": [], "next": null})");
    const std::string c = query_param(r.target, "cursor");
    const int page = c.empty() ? 0 : std::atoi(c.c_str() + 1);
    json body;
    if (page >= kPages) {
      body = {{"items", json::array()}, {"next", "p" + std::to_string(kPages)}};
    } else {
      json items = json::array();
      for (int i = 0; i < kItems; ++i) items.push_back({{"id", std::to_string(page) + "-" + std::to_string(i)}});
      body = {{"items", items}, {"next", "p" + std::to_string(page + 1)}};
    }
    log.add(Seen{Clock::now(), std::to_string(page), "", "", 200});
    ScriptedReply reply = ScriptedReply::with_status(200, body.dump());
    reply.delay = 100ms;
    return reply;
  });

  WeirOptions o;
  o.nats_url = nats.url();
  o.config = "cluster: { name: c1, lease_ttl: 1s }\n";
  o.flows["feed.yaml"] = sink_flow("feed",
                                   "    url: \"" + api.url("/feed") +
                                       "\"\n    every: 100ms\n    split: items\n"
                                       "    cursor_field: next\n    cursor_param: cursor\n",
                                   sink.url("/out"));
  std::vector<std::unique_ptr<WeirProcess>> weirs;
  for (int i = 0; i < 2; ++i) {
    weirs.push_back(std::make_unique<WeirProcess>(o));
    weirs.back()->start();
  }
  auto holds = [](WeirProcess& w) {
    auto r = w.admin("GET", "/status");
    if (r.status != 200) return false;
    json j = json::parse(r.body, nullptr, false);
    if (!j.is_object() || !j.contains("members")) return false;
    for (const auto& l : j["members"].value("leases", json::array())) {
      if (l.value("key", "") == "source.feed" && l.value("held_here", false)) return true;
    }
    return false;
  };
  int holder = -1;
  REQUIRE(wait_until(
      [&] {
        for (int i = 0; i < 2; ++i) {
          if (holds(*weirs[i])) holder = i;
        }
        return holder >= 0;
      },
      20s, 50ms));
  WeirProcess& first = *weirs[holder];
  WeirProcess& second = *weirs[1 - holder];

  open = true;
  REQUIRE(wait_until([&] { return log.size() >= 5; }, 20s, 5ms));
  first.kill9();
  const auto killed_at = Clock::now();

  // The other instance takes the lease and walks the rest; every item arrives.
  REQUIRE(wait_until([&] { return sink.stat("unique") == kPages * kItems; }, 60s));
  const size_t until_caught_up = log.size();
  REQUIRE(wait_until([&] { return log.size() >= until_caught_up + 2; }, 20s));
  REQUIRE(second.terminate() == 0);

  // Requests up to the kill (plus slack for one on the wire) were the first holder's; the
  // second instance starts polling only after the 1 s lease has expired.
  std::vector<int> before, after;
  for (const auto& s : log.all()) (s.at < killed_at + 300ms ? before : after).push_back(std::stoi(s.target));
  INFO("first holder's pages: " << json(before).dump() << "; second's: " << json(after).dump());
  REQUIRE_FALSE(before.empty());
  REQUIRE_FALSE(after.empty());
  // The first holder walked 0..j in order, each page once.
  for (size_t i = 0; i < before.size(); ++i) CHECK(before[i] == static_cast<int>(i));
  const int j = before.back();
  // Asserted: the second instance resumes at the stored cursor, which is the page in flight
  // at the kill (j: fetched, maybe published, cursor not yet stored) or the one after it.
  // No page before j is ever requested again. Page j itself may be fetched twice: kill -9
  // can land between its PubAcks and the cursor write, and no protocol can rule that out;
  // its events then carry the same ids, so JetStream deduplicates them (checked below).
  CHECK((after.front() == j || after.front() == j + 1));
  for (size_t i = 0; i + 1 < after.size(); ++i) {
    if (after[i] < kPages) CHECK(after[i + 1] == after[i] + 1);  // each page once, in order
    else CHECK(after[i + 1] == kPages);                          // caught up: the empty page
  }
  CHECK(after.back() == kPages);
  // Every item once at the sink; a re-send (the killed instance's sink stage may have
  // delivered without acking) carries the same Idempotency-Key, never a new id.
  const json stats = sink.stats();
  CHECK(stat(stats, "unique") == kPages * kItems);
  CHECK(stat(stats, "resends_with_other_key") == 0);
  std::set<std::string> want;
  for (int p = 0; p < kPages; ++p) {
    for (int i = 0; i < kItems; ++i) want.insert(std::to_string(p) + "-" + std::to_string(i));
  }
  CHECK(weir::itest::missing(want, sink.ids()).empty());
}

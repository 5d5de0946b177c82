// The poll source: its pure parts (split paths, cursors, ids, state records, the token
// cache on a manual clock) and the source itself against ScriptedHttpServer on loopback,
// with an in-memory Ingest and SourceState. No sleeps: every wait is for a condition.
#include "connectors/poll/poll_source.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/scripted_http_server.h"

using weir::IngestEvent;
using weir::Result;
using weir::SourceContext;
using weir::SourceState;
using weir::Status;
using weir::connectors::PollSource;
using weir::connectors::PollSourceOptions;
using weir::flows::Json;
using weir::flows::PollSourceSpec;
using weir::testing::ScriptedHttpServer;
using weir::testing::ScriptedReply;
using weir::testing::ScriptedRequest;
namespace poll = weir::connectors::poll;
using namespace std::chrono_literals;

namespace {

constexpr auto kWait = 20s;  // a deadline, not an expected duration

template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = kWait) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(2ms);  // polling interval, not a wait for an outcome
  }
  return true;
}

// Records events; acks them at once, or holds them until release(), or fails them.
class FakeIngest final : public weir::Ingest {
 public:
  enum class Mode { kAck, kHold, kFail };
  using Done = std::function<void(const Status&, const std::string&)>;

  void publish(IngestEvent event, std::chrono::milliseconds, Done done) override {
    std::string id = event.id;
    Mode mode;
    {
      std::lock_guard lock(mu_);
      events_.push_back(std::move(event));
      mode = mode_;
      if (mode == Mode::kHold) held_.emplace_back(std::move(done), id);
    }
    if (mode == Mode::kAck) done(Status::ok(), id);
    if (mode == Mode::kFail) done(Status::unavailable("told to fail"), id);
  }
  bool ready() const override { return true; }

  void set_mode(Mode m) {
    std::lock_guard lock(mu_);
    mode_ = m;
  }
  void release_all() {
    std::deque<std::pair<Done, std::string>> held;
    {
      std::lock_guard lock(mu_);
      held.swap(held_);
    }
    for (auto& [done, id] : held) done(Status::ok(), id);
  }
  size_t held() const {
    std::lock_guard lock(mu_);
    return held_.size();
  }
  std::vector<IngestEvent> events() const {
    std::lock_guard lock(mu_);
    return events_;
  }
  size_t size() const {
    std::lock_guard lock(mu_);
    return events_.size();
  }
  std::vector<Json> bodies() const {
    std::vector<Json> out;
    for (const auto& e : events()) out.push_back(Json::parse(e.body));
    return out;
  }

 private:
  mutable std::mutex mu_;
  Mode mode_ = Mode::kAck;
  std::vector<IngestEvent> events_;
  std::deque<std::pair<Done, std::string>> held_;
};

class MemoryState final : public SourceState {
 public:
  Result<std::optional<std::string>> get(const std::string& key) override {
    std::lock_guard lock(mu_);
    auto it = values_.find(key);
    if (it == values_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }
  Status put(const std::string& key, const std::string& value) override {
    std::lock_guard lock(mu_);
    if (conflict_) return Status::conflict("another writer");
    values_[key] = value;
    writes_.push_back(value);
    return Status::ok();
  }
  void set(const std::string& key, const std::string& value) {
    std::lock_guard lock(mu_);
    values_[key] = value;
  }
  void set_conflict(bool c) {
    std::lock_guard lock(mu_);
    conflict_ = c;
  }
  std::optional<poll::PollState> state(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    return poll::PollState::from_json(it->second);
  }
  size_t writes() {
    std::lock_guard lock(mu_);
    return writes_.size();
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> writes_;
  bool conflict_ = false;
};

std::string query_param(const std::string& target, const std::string& name) {
  const auto q = target.find('?');
  if (q == std::string::npos) return "";
  std::string rest = target.substr(q + 1);
  size_t pos = 0;
  while (pos <= rest.size()) {
    size_t amp = rest.find('&', pos);
    std::string kv = rest.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
    if (kv.rfind(name + "=", 0) == 0) return kv.substr(name.size() + 1);
    if (amp == std::string::npos) break;
    pos = amp + 1;
  }
  return "";
}

SourceContext context_for(FakeIngest& ingest, SourceState* state = nullptr) {
  SourceContext c;
  c.flow = "f";
  c.ingest = &ingest;
  c.state = state;
  return c;
}

PollSourceOptions fast_options() {
  PollSourceOptions o;
  o.backoff_min = 20ms;
  o.backoff_max = 100ms;
  o.env = [](const std::string& name) -> std::optional<std::string> {
    if (name == "CID") return "client-1";
    if (name == "CSECRET") return "s3cret&=+";
    return std::nullopt;
  };
  return o;
}

}  // namespace

// ---- Pure parts ------------------------------------------------------------------------

TEST_CASE("poll select: dotted paths, array indexes, missing segments", "[poll]") {
  Json body = Json::parse(R"({"data": {"items": [{"a": 1}, {"a": 2}]}, "n": null, "k.dot": 3})");
  REQUIRE(poll::select(body, "") == &body);
  REQUIRE(*poll::select(body, "data.items.1.a") == 2);
  REQUIRE(poll::select(body, "data.items")->size() == 2);
  CHECK(poll::select(body, "data.missing") == nullptr);
  CHECK(poll::select(body, "data.items.5") == nullptr);
  CHECK(poll::select(body, "data.items.x") == nullptr);
  CHECK(poll::select(body, "n.deeper") == nullptr);
  CHECK(poll::select(body, "k.dot") == nullptr);  // dots always separate
}

TEST_CASE("poll split: array items, one event for a non-array, none when missing", "[poll]") {
  Json body = Json::parse(R"({"data": [{"id": 1}, 2, "three"], "one": {"x": 1}, "none": null})");
  auto items = poll::split(body, "data");
  REQUIRE(items.size() == 3);
  CHECK(items[0] == Json::parse(R"({"id": 1})"));
  CHECK(items[2] == "three");
  CHECK(poll::split(body, "one") == std::vector<Json>{Json::parse(R"({"x": 1})")});
  CHECK(poll::split(body, "none").empty());
  CHECK(poll::split(body, "missing").empty());
  // "" = the whole body: an array splits, an object is one event.
  CHECK(poll::split(Json::parse("[1, 2]"), "").size() == 2);
  CHECK(poll::split(body, "").size() == 1);
  CHECK(poll::split(Json::parse("[]"), "").empty());
  CHECK(poll::split(Json(), "").empty());  // empty body
}

TEST_CASE("poll cursor_of: strings and integers - empty, null and other types end pagination", "[poll]") {
  Json body = Json::parse(R"({"next": "c2", "meta": {"next": 42}, "empty": "", "nil": null, "f": 1.5, "o": {}})");
  CHECK(poll::cursor_of(body, "next") == "c2");
  CHECK(poll::cursor_of(body, "meta.next") == "42");
  CHECK(poll::cursor_of(body, "empty").empty());
  CHECK(poll::cursor_of(body, "nil").empty());
  CHECK(poll::cursor_of(body, "f").empty());
  CHECK(poll::cursor_of(body, "o").empty());
  CHECK(poll::cursor_of(body, "missing").empty());
  CHECK(poll::cursor_of(body, "").empty());
}

TEST_CASE("poll page_url: appends the encoded cursor, keeps query and fragment", "[poll]") {
  CHECK(poll::page_url("http://h/x", "cursor", "") == "http://h/x");
  CHECK(poll::page_url("http://h/x", "cursor", "a b/c") == "http://h/x?cursor=a%20b%2Fc");
  CHECK(poll::page_url("http://h/x?limit=5", "after", "z") == "http://h/x?limit=5&after=z");
  CHECK(poll::page_url("http://h/x?", "after", "z") == "http://h/x?after=z");
  CHECK(poll::page_url("http://h/x#top", "c", "1") == "http://h/x?c=1#top");
  CHECK(poll::url_encode("a+b=c&d~") == "a%2Bb%3Dc%26d~");
}

TEST_CASE("poll event ids: the item's own id, else a hash of url, cursor, index and item", "[poll]") {
  const Json a = Json::parse(R"({"id": "o-17", "x": 1})");
  CHECK(poll::event_id("f", "http://h/x", "c1", 0, a) == "f-id-o-17");
  CHECK(poll::event_id("f", "http://h/x", "c9", 5, a) == "f-id-o-17");  // wherever it appears
  CHECK(poll::event_id("f", "u", "", 0, Json::parse(R"({"id": 42})")) == "f-id-42");
  // Odd or long ids are hashed rather than copied into headers.
  const std::string odd = poll::event_id("f", "u", "", 0, Json::parse(R"({"id": "a b\r\n"})"));
  CHECK(odd.rfind("f-id-h", 0) == 0);
  CHECK(odd.size() == std::string("f-id-h").size() + 32);
  CHECK(poll::event_id("f", "u", "", 0, Json{{"id", std::string(200, 'x')}}).rfind("f-id-h", 0) == 0);

  const Json b = Json::parse(R"({"x": 1})");
  const std::string id = poll::event_id("f", "http://h/x", "c1", 3, b);
  CHECK(id.rfind("f-page-", 0) == 0);
  CHECK(id.size() == std::string("f-page-").size() + 32);
  CHECK(poll::event_id("f", "http://h/x", "c1", 3, b) == id);  // stable: a re-fetch deduplicates
  CHECK(poll::event_id("f", "http://h/x", "c1", 4, b) != id);
  CHECK(poll::event_id("f", "http://h/x", "c2", 3, b) != id);
  CHECK(poll::event_id("f", "http://h/y", "c1", 3, b) != id);
  CHECK(poll::event_id("f", "http://h/x", "c1", 3, Json::parse(R"({"x": 2})")) != id);  // changed item
  CHECK(poll::event_id("g", "http://h/x", "c1", 3, b) != id);
  // A null or float id is no id.
  CHECK(poll::event_id("f", "u", "", 0, Json::parse(R"({"id": null})")).rfind("f-page-", 0) == 0);
  CHECK(poll::event_id("f", "u", "", 0, Json::parse(R"({"id": 1.5})")).rfind("f-page-", 0) == 0);
}

TEST_CASE("poll state: key per flow and url, JSON round trip, validators by url", "[poll]") {
  const std::string key = poll::state_key("orders", "http://h/x?api_key=SECRET");
  CHECK(key.rfind("poll.orders.", 0) == 0);
  CHECK(key.size() == std::string("poll.orders.").size() + 16);
  CHECK(key.find("SECRET") == std::string::npos);
  CHECK(poll::state_key("orders", "http://h/y") != key);

  poll::PollState s;
  s.cursor = "c3";
  s.first = {poll::sha256_hex("http://h/x?api_key=SECRET"), "\"e1\"", ""};
  s.last = {poll::sha256_hex("http://h/x?api_key=SECRET&c=c2"), "", "Wed, 21 Oct 2015 07:28:00 GMT"};
  const std::string text = s.to_json();
  CHECK(text.find("SECRET") == std::string::npos);  // URLs are stored as hashes
  auto back = poll::PollState::from_json(text);
  REQUIRE(back);
  CHECK(*back == s);
  REQUIRE(s.validators_for("http://h/x?api_key=SECRET") != nullptr);
  CHECK(s.validators_for("http://h/x?api_key=SECRET")->etag == "\"e1\"");
  CHECK(s.validators_for("http://h/x?api_key=SECRET&c=c2")->last_modified == "Wed, 21 Oct 2015 07:28:00 GMT");
  CHECK(s.validators_for("http://h/z") == nullptr);

  CHECK_FALSE(poll::PollState::from_json("not json"));
  CHECK_FALSE(poll::PollState::from_json(R"({"v": 2, "cursor": "x"})"));
  CHECK_FALSE(poll::PollState::from_json(R"({"v": 1, "cursor": 5})"));
  CHECK(poll::PollState::from_json(R"({"v": 1})")->cursor.empty());
}

TEST_CASE("poll create: validates the spec and names missing env variables, never values", "[poll]") {
  PollSourceSpec spec;
  spec.url = "http://127.0.0.1:1/x";
  CHECK(PollSource::create(spec, "f", fast_options()));

  auto bad = spec;
  bad.url = "ftp://h/x";
  CHECK_FALSE(PollSource::create(bad, "f", fast_options()));
  bad = spec;
  bad.every = 0ms;
  CHECK_FALSE(PollSource::create(bad, "f", fast_options()));
  bad = spec;
  bad.cursor_field = "next";
  CHECK_FALSE(PollSource::create(bad, "f", fast_options()));
  bad = spec;
  bad.headers["Bad Name"] = "v";
  CHECK_FALSE(PollSource::create(bad, "f", fast_options()));
  bad = spec;
  bad.headers["X-Key"] = "SECRETVALUE\r\nInjected: 1";
  auto r = PollSource::create(bad, "f", fast_options());
  REQUIRE_FALSE(r);
  CHECK(r.status().message().find("SECRETVALUE") == std::string::npos);

  bad = spec;
  bad.oauth2 = PollSourceSpec::OAuth2{"http://127.0.0.1:1/token", "CID", "NOPE_NOT_SET", {}};
  r = PollSource::create(bad, "f", fast_options());
  REQUIRE_FALSE(r);
  CHECK(r.status().message().find("NOPE_NOT_SET") != std::string::npos);
  bad.oauth2->client_secret_env = "CSECRET";
  CHECK(PollSource::create(bad, "f", fast_options()));
}

// ---- The source against a scripted API ---------------------------------------------------

TEST_CASE("poll source: splits a page into events and sends the spec's headers", "[poll]") {
  ScriptedHttpServer api(
      [](const ScriptedRequest&) { return ScriptedReply::with_status(200, R"({"data": [{"id": "a"}, {"v": 2}]})"); });
  PollSourceSpec spec;
  spec.url = api.url("/items?api_key=K1");
  spec.every = 1h;  // one poll: the first fires at start
  spec.split = "data";
  spec.headers["X-Api-Key"] = "k";
  FakeIngest ingest;
  MemoryState state;
  auto source = PollSource::create(spec, "f", fast_options());
  REQUIRE(source);
  SourceContext ctx;
  ctx.flow = "f";
  ctx.ingest = &ingest;
  ctx.state = &state;
  REQUIRE(source.value()->start(ctx));
  REQUIRE(eventually([&] { return ingest.size() == 2; }));
  source.value()->stop();

  auto events = ingest.events();
  CHECK(events[0].id == "f-id-a");
  CHECK(Json::parse(events[0].body) == Json::parse(R"({"id": "a"})"));
  CHECK(events[1].id.rfind("f-page-", 0) == 0);
  CHECK(events[1].headers.empty());  // no fence outside a cluster
  REQUIRE(api.request_count() == 1);
  const auto req = api.requests()[0];
  CHECK(req.method == "GET");
  CHECK(req.target == "/items?api_key=K1");
  CHECK(req.header("X-Api-Key") == "k");
  CHECK(req.header("Accept") == "application/json");
  CHECK(source.value()->events_published() == 2);
}

TEST_CASE("poll source: ETag and Last-Modified are sent back - 304 gives no events", "[poll]") {
  std::atomic<int> version{1};
  ScriptedHttpServer api([&](const ScriptedRequest& r) {
    const std::string etag = "\"v" + std::to_string(version.load()) + "\"";
    if (r.header("If-None-Match") == etag) return ScriptedReply::with_status(304);
    ScriptedReply reply = ScriptedReply::with_status(200, "[{\"v\": " + std::to_string(version.load()) + "}]");
    reply.headers = {{"ETag", etag}, {"Last-Modified", "Wed, 21 Oct 2015 07:28:00 GMT"}};
    return reply;
  });
  PollSourceSpec spec;
  spec.url = api.url("/x");
  spec.every = 5ms;
  FakeIngest ingest;
  MemoryState state;
  auto source = PollSource::create(spec, "f", fast_options());
  REQUIRE(source);
  SourceContext ctx = context_for(ingest, &state);
  REQUIRE(source.value()->start(ctx));
  REQUIRE(eventually([&] { return api.request_count() >= 5; }));
  CHECK(ingest.size() == 1);  // four 304s after the first answer
  version = 2;
  REQUIRE(eventually([&] { return ingest.size() == 2; }));
  const size_t seen = api.request_count();
  REQUIRE(eventually([&] { return api.request_count() >= seen + 3; }));
  source.value()->stop();
  CHECK(ingest.size() == 2);
  CHECK(ingest.bodies()[1] == Json::parse(R"({"v": 2})"));
  const auto reqs = api.requests();
  CHECK_FALSE(reqs[0].has_header("If-None-Match"));
  CHECK(reqs[1].header("If-None-Match") == "\"v1\"");
  CHECK(reqs[1].header("If-Modified-Since") == "Wed, 21 Oct 2015 07:28:00 GMT");
  CHECK(reqs.back().header("If-None-Match") == "\"v2\"");
  // One state write per change, not per poll.
  CHECK(state.writes() == 2);
  // A new source (the next lease holder) starts with the stored validators: 304 at once.
  auto again = PollSource::create(spec, "f", fast_options());
  REQUIRE(again);
  const size_t before = api.request_count();
  REQUIRE(again.value()->start(ctx));
  REQUIRE(eventually([&] { return api.request_count() >= before + 2; }));
  again.value()->stop();
  CHECK(ingest.size() == 2);
  CHECK(api.requests()[before].header("If-None-Match") == "\"v2\"");
}

TEST_CASE("poll source: cursor pagination stores each cursor only after the page's PubAcks", "[poll]") {
  // Three pages; the last has no cursor, so a walk ends and the next poll starts over.
  ScriptedHttpServer api([](const ScriptedRequest& r) {
    const std::string c = query_param(r.target, "after");
    if (c.empty()) return ScriptedReply::with_status(200, R"({"items": [{"id": 1}, {"id": 2}], "next": "p2"})");
    if (c == "p2") return ScriptedReply::with_status(200, R"({"items": [{"id": 3}], "meta": 1, "next": "p3"})");
    if (c == "p3") return ScriptedReply::with_status(200, R"({"items": [{"id": 4}], "next": null})");
    return ScriptedReply::with_status(404);
  });
  PollSourceSpec spec;
  spec.url = api.url("/list");
  spec.every = 1h;
  spec.split = "items";
  spec.cursor_field = "next";
  spec.cursor_param = "after";
  FakeIngest ingest;
  ingest.set_mode(FakeIngest::Mode::kHold);
  MemoryState state;
  const std::string key = poll::state_key("f", spec.url);
  auto source = PollSource::create(spec, "f", fast_options());
  REQUIRE(source);
  SourceContext ctx = context_for(ingest, &state);
  REQUIRE(source.value()->start(ctx));

  // Page 1 is published but not acknowledged: no cursor stored, page 2 not requested.
  REQUIRE(eventually([&] { return ingest.held() == 2; }));
  CHECK_FALSE(state.state(key));
  CHECK(api.request_count() == 1);
  ingest.release_all();
  REQUIRE(eventually([&] { return state.state(key) && state.state(key)->cursor == "p2"; }));
  REQUIRE(eventually([&] { return ingest.held() == 1; }));  // page 2's event
  CHECK(state.state(key)->cursor == "p2");
  ingest.set_mode(FakeIngest::Mode::kAck);
  ingest.release_all();
  // Page 3 has no next cursor: the walk is complete, the next poll starts at page 1.
  REQUIRE(eventually([&] { return api.request_count() == 3 && state.writes() == 3; }));
  source.value()->stop();
  CHECK(state.state(key)->cursor.empty());
  std::vector<std::string> targets;
  for (const auto& r : api.requests()) targets.push_back(r.target);
  CHECK(targets == std::vector<std::string>{"/list", "/list?after=p2", "/list?after=p3"});
  std::vector<std::string> ids;
  for (const auto& e : ingest.events()) ids.push_back(e.id);
  CHECK(ids == std::vector<std::string>{"f-id-1", "f-id-2", "f-id-3", "f-id-4"});
}

TEST_CASE("poll source: a new source resumes at the stored cursor - a failed publish repeats the page", "[poll]") {
  std::atomic<bool> fail_page3{true};
  ScriptedHttpServer api([&](const ScriptedRequest& r) {
    const std::string c = query_param(r.target, "c");
    if (c == "p3") return ScriptedReply::with_status(200, R"({"items": [{"n": 3}], "next": "p4"})");
    if (c == "p4") return ScriptedReply::with_status(200, R"({"items": [], "next": "p4"})");
    return ScriptedReply::with_status(500);
  });
  PollSourceSpec spec;
  spec.url = api.url("/feed");
  spec.every = 1h;
  spec.split = "items";
  spec.cursor_field = "next";
  spec.cursor_param = "c";
  FakeIngest ingest;
  MemoryState state;
  const std::string key = poll::state_key("f", spec.url);
  poll::PollState stored;
  stored.cursor = "p3";
  state.set(key, stored.to_json());

  ingest.set_mode(FakeIngest::Mode::kFail);
  auto source = PollSource::create(spec, "f", fast_options());
  REQUIRE(source);
  SourceContext ctx = context_for(ingest, &state);
  REQUIRE(source.value()->start(ctx));
  // Publishing fails: the cursor stays, the page is fetched again after a backoff.
  REQUIRE(eventually([&] { return api.request_count() >= 2; }));
  CHECK(state.state(key)->cursor == "p3");
  ingest.set_mode(FakeIngest::Mode::kAck);
  // The empty page p4 with the same cursor ends the poll; the feed continues from p4.
  REQUIRE(eventually([&] { return state.state(key)->cursor == "p4"; }));
  REQUIRE(eventually([&] { return api.requests().back().target == "/feed?c=p4"; }));
  source.value()->stop();
  for (const auto& r : api.requests()) CHECK(r.target != "/feed");  // never restarted from scratch
  // Every attempt at page 3 carried the same event id: JetStream stores it once.
  std::set<std::string> ids;
  for (const auto& e : ingest.events()) ids.insert(e.id);
  CHECK(ids.size() == 1);
}

TEST_CASE("poll source: a state conflict (another holder) stops polling", "[poll]") {
  ScriptedHttpServer api([](const ScriptedRequest& r) {
    if (query_param(r.target, "c").empty()) return ScriptedReply::with_status(200, R"({"items": [1], "next": "p2"})");
    return ScriptedReply::with_status(200, R"({"items": [2], "next": "p3"})");
  });
  PollSourceSpec spec;
  spec.url = api.url("/feed");
  spec.every = 1ms;
  spec.split = "items";
  spec.cursor_field = "next";
  spec.cursor_param = "c";
  FakeIngest ingest;
  MemoryState state;
  state.set_conflict(true);
  auto source = PollSource::create(spec, "f", fast_options());
  REQUIRE(source);
  SourceContext ctx = context_for(ingest, &state);
  REQUIRE(source.value()->start(ctx));
  REQUIRE(eventually([&] { return ingest.size() == 1; }));
  // Give it the chance to misbehave (many 1 ms poll intervals), then check nothing moved.
  REQUIRE_FALSE(eventually([&] { return api.request_count() > 1; }, 100ms));
  source.value()->stop();
  CHECK(api.request_count() == 1);
  CHECK(ingest.size() == 1);
}

TEST_CASE("poll source: fenced out (lease not held) it neither polls nor publishes", "[poll]") {
  ScriptedHttpServer api([](const ScriptedRequest&) { return ScriptedReply::with_status(200, "[1]"); });
  PollSourceSpec spec;
  spec.url = api.url("/x");
  spec.every = 1ms;
  FakeIngest ingest;
  std::atomic<bool> held{false};
  auto source = PollSource::create(spec, "f", fast_options());
  REQUIRE(source);
  SourceContext ctx;
  ctx.flow = "f";
  ctx.ingest = &ingest;
  ctx.fence = [&]() -> std::optional<uint64_t> {
    if (held.load()) return 7;
    return std::nullopt;
  };
  REQUIRE(source.value()->start(ctx));
  REQUIRE_FALSE(eventually([&] { return api.request_count() > 0; }, 100ms));
  held = true;
  REQUIRE(eventually([&] { return ingest.size() >= 1; }));
  source.value()->stop();
  auto e = ingest.events()[0];
  REQUIRE(e.headers.size() == 1);
  CHECK(e.headers[0] == std::pair<std::string, std::string>{"Weir-Fence", "7"});
}

TEST_CASE("poll source: OAuth2 client credentials, cached token, one refresh on 401", "[poll]") {
  std::atomic<int> issued{0};
  std::atomic<int> revoked_below{0};  // tokens numbered below this are rejected by the API
  std::atomic<int> rejected{0};
  std::mutex mu;
  std::vector<std::string> token_bodies;
  ScriptedHttpServer auth([&](const ScriptedRequest& r) {
    if (r.method != "POST") return ScriptedReply::with_status(405);
    {
      std::lock_guard lock(mu);
      token_bodies.push_back(r.body);
    }
    const int n = ++issued;
    return ScriptedReply::with_status(
        200, R"({"access_token": "tok)" + std::to_string(n) + R"(", "token_type": "Bearer", "expires_in": 3600})");
  });
  ScriptedHttpServer api([&](const ScriptedRequest& r) {
    const std::string h = r.header("Authorization");
    if (h.rfind("Bearer tok", 0) != 0) return ScriptedReply::with_status(401);
    if (std::stoi(h.substr(10)) < revoked_below.load()) {
      ++rejected;
      return ScriptedReply::with_status(401);
    }
    return ScriptedReply::with_status(200, R"([{"ok": true}])");
  });
  PollSourceSpec spec;
  spec.url = api.url("/x");
  spec.every = 5ms;
  spec.headers["Authorization"] = "Basic replaced-by-the-token";
  spec.oauth2 = PollSourceSpec::OAuth2{auth.url("/token"), "CID", "CSECRET", {"read", "write"}};
  FakeIngest ingest;
  auto source = PollSource::create(spec, "f", fast_options());
  REQUIRE(source);
  SourceContext ctx;
  ctx.flow = "f";
  ctx.ingest = &ingest;
  REQUIRE(source.value()->start(ctx));
  REQUIRE(eventually([&] { return api.request_count() >= 3; }));
  CHECK(issued.load() == 1);  // cached across polls
  revoked_below = 2;          // the API revokes tok1 early
  REQUIRE(eventually([&] { return issued.load() == 2 && api.request_count() >= 8; }));
  source.value()->stop();
  CHECK(issued.load() == 2);
  CHECK(source.value()->token_fetches() == 2);
  {
    std::lock_guard lock(mu);
    CHECK(token_bodies[0] ==
          "grant_type=client_credentials&client_id=client-1&client_secret=s3cret%26%3D%2B&scope=read%20write");
  }
  CHECK(auth.requests()[0].header("Content-Type") == "application/x-www-form-urlencoded");
  // Exactly one 401 (the revoked token), answered by one refresh and a retry.
  CHECK(rejected.load() == 1);
  for (const auto& r : api.requests()) CHECK(r.header("Authorization").rfind("Bearer tok", 0) == 0);
  // Every event is a real answer: no 401 became an event.
  for (const auto& b : ingest.bodies()) CHECK(b == Json::parse(R"({"ok": true})"));
}

// A token with CR/LF would split the Authorization header into lines the token endpoint
// chose: it is refused (logged as the poll's error, without the token) and never sent.
TEST_CASE("poll source: an access_token with CR or LF is refused and never sent", "[poll]") {
  ScriptedHttpServer auth([&](const ScriptedRequest&) {
    return ScriptedReply::with_status(200, R"({"access_token": "TOPSECRET\r\nX-Injected: 1", "token_type": "Bearer"})");
  });
  ScriptedHttpServer api([&](const ScriptedRequest&) { return ScriptedReply::with_status(200, R"([{"ok": true}])"); });
  PollSourceSpec spec;
  spec.url = api.url("/x");
  spec.every = 5ms;
  spec.oauth2 = PollSourceSpec::OAuth2{auth.url("/token"), "CID", "CSECRET", {}};
  FakeIngest ingest;
  auto source = PollSource::create(spec, "f", fast_options());
  REQUIRE(source);
  SourceContext ctx;
  ctx.flow = "f";
  ctx.ingest = &ingest;
  REQUIRE(source.value()->start(ctx));
  // Asked again after the refusal (a backoff), and the API never called with it.
  REQUIRE(eventually([&] { return auth.request_count() >= 2; }));
  source.value()->stop();
  CHECK(api.request_count() == 0);
  CHECK(source.value()->token_fetches() == 0);
  CHECK(ingest.size() == 0);
}

TEST_CASE("poll source: bad answers back off and never become events", "[poll]") {
  std::atomic<int> n{0};
  ScriptedHttpServer api([&](const ScriptedRequest&) {
    switch (n++) {
      case 0: return ScriptedReply::with_status(200, "<html>oops</html>");
      case 1: return ScriptedReply::with_status(500, R"([{"x": 1}])");
      case 2: {
        ScriptedReply r = ScriptedReply::with_status(429);
        r.headers = {{"Retry-After", "0"}};
        return r;
      }
      case 3: return ScriptedReply::with_status(302);
      default: return ScriptedReply::with_status(200, R"([{"good": 1}])");
    }
  });
  PollSourceSpec spec;
  spec.url = api.url("/x");
  spec.every = 1h;  // only failures make it poll again before an hour
  FakeIngest ingest;
  auto source = PollSource::create(spec, "f", fast_options());
  REQUIRE(source);
  SourceContext ctx;
  ctx.flow = "f";
  ctx.ingest = &ingest;
  REQUIRE(source.value()->start(ctx));
  REQUIRE(eventually([&] { return ingest.size() == 1; }));
  source.value()->stop();
  CHECK(api.request_count() == 5);
  CHECK(ingest.bodies()[0] == Json::parse(R"({"good": 1})"));
}

TEST_CASE("poll source: stop() returns promptly during a slow request", "[poll]") {
  ScriptedHttpServer api([](const ScriptedRequest&) {
    ScriptedReply r = ScriptedReply::with_status(200, "[]");
    r.delay = 20s;
    return r;
  });
  PollSourceSpec spec;
  spec.url = api.url("/slow");
  FakeIngest ingest;
  auto source = PollSource::create(spec, "f", fast_options());
  REQUIRE(source);
  SourceContext ctx;
  ctx.flow = "f";
  ctx.ingest = &ingest;
  REQUIRE(source.value()->start(ctx));
  REQUIRE(eventually([&] { return api.request_count() == 1; }));
  const auto t0 = std::chrono::steady_clock::now();
  source.value()->stop();
  // A bound, not a measurement: curl's progress callback runs at least once a second.
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CHECK(ingest.size() == 0);
}

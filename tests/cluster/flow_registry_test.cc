// FlowRegistry on FakeKv (docs/adr/0042-version-registry.md): deploy numbering, the
// promote barrier across two followers, lost compare-and-set → 409, rollback, a barrier
// that times out and is aborted, fencing when the member key cannot be renewed, and time
// read only from the injected clocks.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/flow_registry.h"
#include "tests/support/fake_kv.h"

namespace {
using namespace std::chrono_literals;
using weir::ControlResult;
using weir::FlowControl;
using weir::Outcome;
using weir::Status;
using weir::cluster::ActiveRecord;
using weir::cluster::FlowRegistry;
using weir::cluster::ManualClock;
using weir::cluster::RegistryOptions;
using weir::cluster::testing::FakeKv;

// Every call of every control, in one global order.
struct Journal {
  std::mutex mu;
  std::vector<std::string> entries;
  void add(std::string e) {
    std::lock_guard lock(mu);
    entries.push_back(std::move(e));
  }
  std::vector<std::string> all() {
    std::lock_guard lock(mu);
    return entries;
  }
};

struct FakeControl final : FlowControl {
  FakeControl(std::string n, Journal& j) : name(std::move(n)), journal(j) {}
  bool pause(std::chrono::milliseconds) override {
    journal.add(name + ":pause");
    paused = true;
    return pause_ok.load();
  }
  Status load(int64_t version, const std::string& text) override {
    if (text == "does not compile") return Status::invalid("x.yaml:1:1: broken");
    journal.add(name + ":load:" + std::to_string(version));
    return Status::ok();
  }
  void resume(int64_t version) override {
    journal.add(name + ":resume:" + std::to_string(version));
    running = version;
    paused = false;
  }
  std::string name;
  Journal& journal;
  std::atomic<bool> pause_ok{true};
  std::atomic<bool> paused{false};
  std::atomic<int64_t> running{0};
};

template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = 3s) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return pred();
}

RegistryOptions options_for(const std::string& instance) {
  RegistryOptions o;
  o.instance = instance;
  o.barrier_timeout = 2s;
  o.pause_timeout = 500ms;
  return o;
}

// Two instances following flow `orders`, seeded with v1.
struct Cluster {
  FakeKv flows, members;
  std::vector<std::string> live = {"a", "b"};
  std::mutex live_mu;
  Journal journal;
  FakeControl ca{"a", journal}, cb{"b", journal};
  std::unique_ptr<FlowRegistry> a, b;

  explicit Cluster(std::chrono::milliseconds barrier = 2s) {
    auto list = [this]() -> weir::Result<std::vector<std::string>> {
      std::lock_guard lock(live_mu);
      return live;
    };
    auto oa = options_for("a"), ob = options_for("b");
    oa.barrier_timeout = ob.barrier_timeout = barrier;
    a = std::make_unique<FlowRegistry>(flows, members, list, oa);
    b = std::make_unique<FlowRegistry>(flows, members, list, ob);
    auto at = a->attach("orders", "text v1", "h1");
    REQUIRE(at);
    CHECK(at->version == 1);
    CHECK(at->text == "text v1");
    auto bt = b->attach("orders", "text v1 as b has it", "h1b");
    REQUIRE(bt);
    CHECK(bt->version == 1);
    CHECK(bt->text == "text v1");  // the registry wins over b's file
    ca.running = 1;
    cb.running = 1;
    REQUIRE(a->follow("orders", &ca));
    REQUIRE(b->follow("orders", &cb));
  }
  ActiveRecord active() {
    auto e = flows.get(FlowRegistry::active_key("orders"));
    REQUIRE(e);
    auto r = ActiveRecord::parse(e->value);
    REQUIRE(r);
    return *r;
  }
  ~Cluster() {
    a->stop();
    b->stop();
  }
};

size_t index_of(const std::vector<std::string>& v, const std::string& e) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == e) return i;
  }
  return v.size();
}
}  // namespace

TEST_CASE("registry: deploys get consecutive versions and the same file twice is one version", "[registry]") {
  Cluster c;
  ControlResult d2 = c.a->deploy("orders", "text v2", "h2", "a");
  CHECK(d2.outcome == Outcome::kCreated);
  CHECK(d2.body["version"] == 2);
  ControlResult again = c.b->deploy("orders", "text v2", "h2", "b");
  CHECK(again.outcome == Outcome::kDone);
  CHECK(again.body["version"] == 2);
  CHECK(again.body["unchanged"] == true);
  ControlResult d3 = c.b->deploy("orders", "text v3", "h3", "b");
  CHECK(d3.outcome == Outcome::kCreated);
  CHECK(d3.body["version"] == 3);
  auto desc = c.a->describe("orders");
  CHECK(desc["active_version"] == 1);
  CHECK(desc["latest_version"] == 3);
  CHECK(desc["versions"].size() == 3);
  CHECK(desc["versions"][2]["deployed_by"] == "b");
  // A deploy does not switch anything.
  CHECK(c.ca.running == 1);
  CHECK(c.cb.running == 1);
}

TEST_CASE("registry: promote pauses every instance before any runs the new version", "[registry]") {
  Cluster c;
  REQUIRE(c.a->deploy("orders", "text v2", "h2", "a").outcome == Outcome::kCreated);
  ControlResult p = c.a->promote("orders", 2, "a");
  REQUIRE(p.outcome == Outcome::kDone);
  CHECK(p.body["version"] == 2);
  CHECK(p.body["previous"] == 1);
  CHECK(p.body["instances"].size() == 2);
  REQUIRE(eventually([&] { return c.ca.running == 2 && c.cb.running == 2; }));

  auto j = c.journal.all();
  size_t first_resume = std::min(index_of(j, "a:resume:2"), index_of(j, "b:resume:2"));
  CHECK(index_of(j, "a:pause") < first_resume);
  CHECK(index_of(j, "b:pause") < first_resume);
  CHECK(index_of(j, "a:load:2") < index_of(j, "a:resume:2"));  // compiled during the barrier

  ActiveRecord r = c.active();
  CHECK(r.version == 2);
  CHECK(r.phase == "active");
  CHECK(r.epoch == 1);
  CHECK(r.stack == std::vector<int64_t>{1});
  CHECK(r.history.back()["action"] == "promote");
  CHECK(r.history.back()["by"] == "a");
  CHECK(c.a->running_version("orders") == 2);

  // Promoting what is active changes nothing.
  ControlResult same = c.b->promote("orders", 2, "b");
  CHECK(same.outcome == Outcome::kDone);
  CHECK(same.body["unchanged"] == true);
  CHECK(c.active().epoch == 1);
}

TEST_CASE("registry: a promote whose compare-and-set loses answers 409 and changes nothing", "[registry]") {
  Cluster c;
  REQUIRE(c.a->deploy("orders", "text v2", "h2", "a").outcome == Outcome::kCreated);
  REQUIRE(c.a->deploy("orders", "text v3", "h3", "a").outcome == Outcome::kCreated);
  // Another promoter writes the active record between our read and our write.
  std::atomic<bool> raced{false};
  c.flows.set_fault([&](const char* op, const std::string& key) {
    if (std::string(op) == "update" && key == "orders.active" && !raced.exchange(true)) {
      auto e = c.flows.get(key);
      auto r = ActiveRecord::parse(e->value);
      r->history.push_back({{"action", "someone else"}});
      REQUIRE(c.flows.update(key, r->to_json().dump(), e->revision));
    }
    return FakeKv::Fault::kNone;
  });
  ControlResult p = c.a->promote("orders", 2, "a");
  CHECK(p.outcome == Outcome::kConflict);
  CHECK(p.body["error"].get<std::string>().find("changed meanwhile") != std::string::npos);
  c.flows.set_fault(nullptr);
  ActiveRecord r = c.active();
  CHECK(r.version == 1);
  CHECK(r.phase == "active");
  CHECK(c.ca.running == 1);

  // A promote while another one is at its barrier is refused too.
  auto e = c.flows.get("orders.active");
  ActiveRecord pausing = r;
  pausing.phase = "pausing";
  pausing.target = 3;
  pausing.epoch = r.epoch + 1;
  REQUIRE(c.flows.update("orders.active", pausing.to_json().dump(), e->revision));
  CHECK(c.b->promote("orders", 2, "b").outcome == Outcome::kConflict);
  CHECK(c.b->rollback("orders", "b").outcome == Outcome::kConflict);
}

TEST_CASE("registry: rollback returns to the version before, and then has nowhere to go", "[registry]") {
  Cluster c;
  REQUIRE(c.a->deploy("orders", "text v2", "h2", "a").outcome == Outcome::kCreated);
  REQUIRE(c.a->deploy("orders", "text v3", "h3", "a").outcome == Outcome::kCreated);
  REQUIRE(c.a->promote("orders", 2, "a").outcome == Outcome::kDone);
  REQUIRE(c.b->promote("orders", 3, "b").outcome == Outcome::kDone);
  REQUIRE(eventually([&] { return c.ca.running == 3 && c.cb.running == 3; }));

  ControlResult r1 = c.b->rollback("orders", "b");
  REQUIRE(r1.outcome == Outcome::kDone);
  CHECK(r1.body["version"] == 2);
  REQUIRE(eventually([&] { return c.ca.running == 2 && c.cb.running == 2; }));
  ControlResult r2 = c.a->rollback("orders", "a");
  REQUIRE(r2.outcome == Outcome::kDone);
  CHECK(r2.body["version"] == 1);
  REQUIRE(eventually([&] { return c.ca.running == 1 && c.cb.running == 1; }));
  ControlResult r3 = c.a->rollback("orders", "a");
  CHECK(r3.outcome == Outcome::kConflict);
  CHECK(r3.body["error"].get<std::string>().find("no earlier version") != std::string::npos);
  CHECK(c.active().history.back()["action"] == "rollback");

  CHECK(c.a->promote("orders", 9, "a").outcome == Outcome::kNotFound);
  CHECK(c.a->promote("nosuch", 1, "a").outcome == Outcome::kNotFound);
}

TEST_CASE("registry: a barrier that times out is aborted and the old version runs again", "[registry]") {
  Cluster c(150ms);
  REQUIRE(c.a->deploy("orders", "text v2", "h2", "a").outcome == Outcome::kCreated);
  {
    // A member that never reports (alive as far as the member list says).
    std::lock_guard lock(c.live_mu);
    c.live.push_back("ghost");
  }
  auto started = std::chrono::steady_clock::now();
  ControlResult p = c.a->promote("orders", 2, "a");
  auto took = std::chrono::steady_clock::now() - started;
  CHECK(p.outcome == Outcome::kUnavailable);
  CHECK(p.body["not_paused"] == nlohmann::json::array({"ghost"}));
  CHECK(p.body["version"] == 1);
  CHECK(took < 2s);
  ActiveRecord r = c.active();
  CHECK(r.version == 1);
  CHECK(r.phase == "active");
  CHECK(r.epoch == 1);
  CHECK(r.stack.empty());
  CHECK(r.history.back()["action"] == "promote aborted");
  // Both instances paused for the barrier and run v1 again; nobody ran v2.
  REQUIRE(eventually([&] { return !c.ca.paused && !c.cb.paused; }));
  CHECK(c.ca.running == 1);
  CHECK(c.cb.running == 1);
  for (const auto& e : c.journal.all()) CHECK(e.find("resume:2") == std::string::npos);

  // Once the ghost is gone from the member list, the same promote goes through.
  {
    std::lock_guard lock(c.live_mu);
    c.live.pop_back();
  }
  CHECK(c.b->promote("orders", 2, "b").outcome == Outcome::kDone);
  REQUIRE(eventually([&] { return c.ca.running == 2 && c.cb.running == 2; }));
}

TEST_CASE("registry: an instance that cannot pause in time makes the promote abort", "[registry]") {
  Cluster c(300ms);
  REQUIRE(c.a->deploy("orders", "text v2", "h2", "a").outcome == Outcome::kCreated);
  c.cb.pause_ok = false;  // its batch in hand does not finish
  ControlResult p = c.a->promote("orders", 2, "a");
  CHECK(p.outcome == Outcome::kUnavailable);
  CHECK(p.body["not_paused"] == nlohmann::json::array({"b"}));
  REQUIRE(eventually([&] { return c.ca.running == 1 && !c.ca.paused && !c.cb.paused; }));
  CHECK(c.active().version == 1);
}

TEST_CASE("registry: a version that does not compile on an instance keeps it paused, not on the old version",
          "[registry]") {
  Cluster c;
  REQUIRE(c.a->deploy("orders", "does not compile", "hx", "a").outcome == Outcome::kCreated);
  REQUIRE(c.a->promote("orders", 2, "a").outcome == Outcome::kDone);
  // Neither runs v1 again (that would interleave with anyone running v2).
  REQUIRE(eventually([&] { return c.ca.paused && c.cb.paused; }));
  CHECK(c.a->describe("orders")["error_here"].get<std::string>().find("broken") != std::string::npos);
  CHECK(c.a->running_version("orders") == 0);
}

TEST_CASE("registry: an instance whose member key is not renewed pauses its flows until it is", "[registry]") {
  FakeKv flows, members;
  Journal journal;
  FakeControl control("a", journal);
  RegistryOptions o = options_for("a");
  o.heartbeat = 10ms;
  o.member_ttl = 60ms;
  FlowRegistry reg(
      flows, members, [] { return weir::Result<std::vector<std::string>>(std::vector<std::string>{"a"}); }, o);
  REQUIRE(reg.heartbeat());
  CHECK(members.get("m.a"));
  REQUIRE(reg.attach("orders", "text v1", "h1"));
  control.running = 1;
  REQUIRE(reg.follow("orders", &control));
  reg.start_heartbeat();

  std::atomic<bool> down{true};
  members.set_fault([&](const char*, const std::string& key) {
    return key == "m.a" && down.load() ? FakeKv::Fault::kFailBefore : FakeKv::Fault::kNone;
  });
  REQUIRE(eventually([&] { return reg.fenced() && control.paused.load(); }));
  CHECK(reg.running_version("orders") == 0);
  down = false;
  REQUIRE(eventually([&] { return !reg.fenced() && !control.paused.load(); }));
  CHECK(control.running == 1);
  CHECK(reg.running_version("orders") == 1);
  reg.stop();
  CHECK_FALSE(members.get("m.a"));  // leaving removes the member key
}

TEST_CASE("registry: a new member key after expiry - the active record round-trips", "[registry]") {
  FakeKv flows, members;
  FlowRegistry reg(
      flows, members, [] { return weir::Result<std::vector<std::string>>(std::vector<std::string>{}); },
      options_for("x"));
  REQUIRE(reg.heartbeat());
  members.expire("m.x");
  REQUIRE(reg.heartbeat());  // update conflicts on the vanished key, create joins again
  CHECK(members.get("m.x"));

  ActiveRecord r;
  r.version = 4;
  r.epoch = 7;
  r.phase = "pausing";
  r.target = 5;
  r.stack = {1, 3};
  auto back = ActiveRecord::parse(r.to_json().dump());
  REQUIRE(back);
  CHECK(back->version == 4);
  CHECK(back->epoch == 7);
  CHECK(back->target == 5);
  CHECK(back->stack == std::vector<int64_t>{1, 3});
  CHECK_FALSE(ActiveRecord::parse("{"));
  CHECK_FALSE(ActiveRecord::parse("{\"version\": \"x\"}"));
}

TEST_CASE("registry: a switch the watch could not confirm is applied by the heartbeat's re-read", "[registry]") {
  FakeKv flows, members;
  Journal journal;
  FakeControl control("a", journal);
  RegistryOptions o = options_for("a");
  o.heartbeat = 10ms;
  o.member_ttl = 3s;
  FlowRegistry reg(
      flows, members, [] { return weir::Result<std::vector<std::string>>(std::vector<std::string>{"a"}); }, o);
  REQUIRE(reg.heartbeat());
  REQUIRE(reg.attach("orders", "text v1", "h1"));
  REQUIRE(reg.deploy("orders", "text v2", "h2", "a").outcome == Outcome::kCreated);
  control.running = 1;
  REQUIRE(reg.follow("orders", &control));
  reg.start_heartbeat();

  // The watch's confirming gets fail (for the initial event, if not handled yet, and for
  // the switch): the watch never acts; only a re-read can.
  std::atomic<int> blind{0};
  flows.set_fault([&](const char* op, const std::string& key) {
    if (std::string(op) == "get" && key == "orders.active" && blind.load() > 0) {
      --blind;
      return FakeKv::Fault::kFailBefore;
    }
    return FakeKv::Fault::kNone;
  });
  blind = 0;
  auto e = flows.get("orders.active");
  REQUIRE(e);
  blind = 2;
  auto r = ActiveRecord::parse(e->value);
  r->version = 2;  // as a promoter's final write
  r->epoch = 1;
  REQUIRE(flows.update("orders.active", r->to_json().dump(), e->revision));
  REQUIRE(eventually([&] { return control.running == 2; }));
  CHECK(blind.load() == 0);
  reg.stop();
}

TEST_CASE("registry: member freshness and every stored stamp come from the injected clocks", "[registry][clock]") {
  FakeKv flows, members;
  Journal journal;
  FakeControl control("a", journal);
  ManualClock clock;
  std::atomic<int64_t> wall{1'700'000'000'000};
  RegistryOptions o = options_for("a");
  o.member_ttl = 3s;  // fresh for 2/3 of it after a renewal
  o.clock = &clock;
  o.wall_ms = [&] { return wall.load(); };
  FlowRegistry reg(
      flows, members, [] { return weir::Result<std::vector<std::string>>(std::vector<std::string>{"a"}); }, o);

  CHECK_FALSE(reg.member_fresh());
  REQUIRE(reg.heartbeat());
  CHECK(reg.member_fresh());
  auto m = members.get("m.a");
  REQUIRE(m);
  CHECK(nlohmann::json::parse(m->value)["at"] == 1'700'000'000'000);
  clock.advance(1999ms);
  CHECK(reg.member_fresh());
  clock.advance(1ms);
  CHECK_FALSE(reg.member_fresh());
  REQUIRE(reg.heartbeat());
  CHECK(reg.member_fresh());

  wall = 1'700'000'000'100;
  REQUIRE(reg.attach("orders", "text v1", "h1"));
  auto v1 = flows.get(FlowRegistry::version_key("orders", 1));
  REQUIRE(v1);
  CHECK(nlohmann::json::parse(v1->value)["deployed_at"] == 1'700'000'000'100);
  control.running = 1;
  REQUIRE(reg.follow("orders", &control));

  wall = 1'700'000'000'200;
  ControlResult d = reg.deploy("orders", "text v2", "h2", "a");
  REQUIRE(d.outcome == Outcome::kCreated);
  CHECK(d.body["deployed_at"] == 1'700'000'000'200);

  wall = 1'700'000'000'300;
  REQUIRE(reg.promote("orders", 2, "a").outcome == Outcome::kDone);
  auto e = flows.get(FlowRegistry::active_key("orders"));
  REQUIRE(e);
  auto r = ActiveRecord::parse(e->value);
  REQUIRE(r);
  CHECK(r->promoted_at == 1'700'000'000'300);
  CHECK(r->history.back()["at"] == 1'700'000'000'300);
  CHECK(r->history.back()["barrier_ms"] == 0);  // the manual clock did not move
  reg.stop();
}

TEST_CASE("registry: the barrier's deadline is kept on the injected clock", "[registry][clock]") {
  FakeKv flows, members;
  Journal journal;
  FakeControl control("a", journal);
  ManualClock clock;
  RegistryOptions o = options_for("a");
  o.barrier_timeout = 2s;
  o.clock = &clock;
  // "ghost" is alive as far as the member list says, and never reports.
  FlowRegistry reg(
      flows, members,
      [] {
        return weir::Result<std::vector<std::string>>(std::vector<std::string>{"a", "ghost"});
      },
      o);
  REQUIRE(reg.attach("orders", "text v1", "h1"));
  control.running = 1;
  REQUIRE(reg.follow("orders", &control));
  REQUIRE(reg.deploy("orders", "text v2", "h2", "a").outcome == Outcome::kCreated);

  auto promote = std::async(std::launch::async, [&] { return reg.promote("orders", 2, "a"); });
  // Waiting at the barrier: the record says pausing and "a" reported for epoch 1.
  REQUIRE(eventually([&] { return members.get(FlowRegistry::pause_key("orders", 1, "a")).is_ok(); }));
  // Only the clock ends the wait: barrier_ms below is its 5 s, not the real time taken.
  clock.advance(5s);
  REQUIRE(promote.wait_for(10s) == std::future_status::ready);
  ControlResult p = promote.get();
  CHECK(p.outcome == Outcome::kUnavailable);
  CHECK(p.body["not_paused"] == nlohmann::json::array({"ghost"}));
  auto e = flows.get(FlowRegistry::active_key("orders"));
  REQUIRE(e);
  auto r = ActiveRecord::parse(e->value);
  REQUIRE(r);
  CHECK(r->version == 1);
  CHECK(r->history.back()["action"] == "promote aborted");
  CHECK(r->history.back()["barrier_ms"] == 5000);
  reg.stop();
}

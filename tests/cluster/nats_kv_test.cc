// NatsKv against a real nats-server 2.9 (JetStream, free loopback ports).
#include <catch2/catch.hpp>
#include <iostream>

#include <mutex>
#include <vector>

#include "runtime/nats/nats_kv.h"
#include "runtime/base/log.h"
#include "tests/support/nats_conn.h"
#include "tests/support/support.h"

using namespace std::chrono_literals;
using weir::KvEvent;
using weir::NatsKv;
using weir::NatsKvOptions;
using weir::Status;
using weir::cluster::testing::NatsConn;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

NatsKvOptions bucket(const std::string& name, std::chrono::milliseconds ttl = 0ms) {
  NatsKvOptions o;
  o.bucket = name;
  o.ttl = ttl;
  return o;
}

struct EventLog {
  std::mutex mu;
  std::vector<KvEvent> events;
  void add(const KvEvent& e) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(e);
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return events.size();
  }
  std::vector<KvEvent> all() {
    std::lock_guard<std::mutex> lock(mu);
    return events;
  }
};

}  // namespace

TEST_CASE("nats kv: create, compare-and-set, conditional delete, get", "[integration][nats_kv]") {
  NatsServer server;
  NatsConn conn(server.url());
  auto opened = NatsKv::open(conn.get(), bucket("kv_ops"));
  REQUIRE(opened);
  NatsKv& kv = *opened.value();

  auto r1 = kv.create("a.b", "one");
  REQUIRE(r1);
  auto again = kv.create("a.b", "two");
  REQUIRE_FALSE(again);
  CHECK(again.status().code() == Status::Code::kConflict);

  auto r2 = kv.update("a.b", "two", r1.value());
  REQUIRE(r2);
  CHECK(r2.value() > r1.value());
  auto stale = kv.update("a.b", "three", r1.value());
  REQUIRE_FALSE(stale);
  CHECK(stale.status().code() == Status::Code::kConflict);
  CHECK(stale.status().message().find("wrong last sequence") != std::string::npos);

  auto got = kv.get("a.b");
  REQUIRE(got);
  CHECK(got->value == "two");
  CHECK(got->revision == r2.value());

  Status erase_stale = kv.erase("a.b", r1.value());
  CHECK(erase_stale.code() == Status::Code::kConflict);
  CHECK(kv.get("a.b"));  // still there
  REQUIRE(kv.erase("a.b", r2.value()));
  CHECK(kv.get("a.b").status().code() == Status::Code::kNotFound);

  auto r3 = kv.create("a.b", "back");  // put-if-absent over a delete marker
  REQUIRE(r3);
  CHECK(r3.value() > r2.value());
  REQUIRE(kv.erase("a.b"));  // unconditional
  CHECK(kv.get("a.b").status().code() == Status::Code::kNotFound);
  CHECK(kv.get("never.written").status().code() == Status::Code::kNotFound);

  CHECK(kv.update("a.b", "x", 0).status().code() == Status::Code::kInvalid);
  CHECK(kv.erase("bad key", 5).code() == Status::Code::kInvalid);
  CHECK_FALSE(kv.create("bad key", "x"));
}

TEST_CASE("nats kv: a watch reports the current state, then puts and deletes in order", "[integration][nats_kv]") {
  NatsServer server;
  NatsConn conn(server.url());
  auto opened = NatsKv::open(conn.get(), bucket("kv_watch"));
  REQUIRE(opened);
  NatsKv& kv = *opened.value();
  const uint64_t first = kv.create("lease", "v1").value();

  EventLog log;
  auto watch = kv.watch("lease", [&](const KvEvent& e) { log.add(e); });
  REQUIRE(watch);
  REQUIRE(wait_until([&] { return log.size() >= 1; }, 5s));
  const uint64_t second = kv.update("lease", "v2", first).value();
  REQUIRE(kv.erase("lease", second));
  kv.create("other", "ignored").value();
  // The watch must reach the key's last state (its delete) and report what it reports in
  // revision order. Now and then (seen under load) cnats' ordered consumer under the watch
  // notices a skipped delivery only at its next idle heartbeat (5 s) and re-creates itself
  // from the last value per key: the intermediate v2 is then never reported. Watch events are
  // hints for weir (ADR 0040: leases and the registry re-read from the leader), so the
  // contract checked here is the one weir relies on: the final state arrives, in order.
  auto deleted = [&] {
    for (const auto& e : log.all()) {
      if (e.kind == KvEvent::Kind::kDelete) return true;
    }
    return false;
  };
  REQUIRE(wait_until(deleted, 20s));
  watch.value().reset();  // stops; no callback after this

  auto events = log.all();
  REQUIRE(events.size() >= 2);
  CHECK(events.front().kind == KvEvent::Kind::kPut);
  CHECK(events.front().value == "v1");
  CHECK(events.front().revision == first);
  CHECK(events.back().kind == KvEvent::Kind::kDelete);
  CHECK(events.back().revision > second);
  CHECK(events.back().key == "lease");
  for (size_t i = 1; i < events.size(); ++i) {
    CHECK(events[i].revision > events[i - 1].revision);
    CHECK(events[i].key == "lease");  // the watch of "lease" never reports "other"
  }
  if (events.size() == 3) {
    CHECK(events[1].kind == KvEvent::Kind::kPut);
    CHECK(events[1].value == "v2");
    CHECK(events[1].revision == second);
  } else {
    std::cout << "kv watch: re-created under load, v2 folded into the delete (" << events.size() << " events)\n";
  }
}

TEST_CASE("nats kv: the bucket TTL expires a key without a watch event", "[integration][nats_kv]") {
  NatsServer server;
  NatsConn conn(server.url());
  auto opened = NatsKv::open(conn.get(), bucket("kv_ttl", 1000ms));
  REQUIRE(opened);
  NatsKv& kv = *opened.value();
  EventLog log;
  auto watch = kv.watch("lease", [&](const KvEvent& e) { log.add(e); });
  REQUIRE(watch);
  REQUIRE(kv.create("lease", "holder"));
  REQUIRE(wait_until([&] { return log.size() == 1; }, 5s));
  REQUIRE(wait_until([&] { return kv.get("lease").status().code() == Status::Code::kNotFound; }, 5s));
  CHECK(kv.create("lease", "next"));  // free again
  REQUIRE(wait_until([&] { return log.size() == 2; }, 5s));
  auto events = log.all();
  CHECK(events[0].kind == KvEvent::Kind::kPut);
  CHECK(events[1].kind == KvEvent::Kind::kPut);  // the new create; no delete for the expiry
  CHECK(events[1].value == "next");
}

TEST_CASE("nats kv: open checks names, and refuses a bucket with another TTL", "[integration][nats_kv]") {
  NatsServer server;
  NatsConn conn(server.url());
  CHECK(NatsKv::open(nullptr, bucket("x")).status().code() == Status::Code::kInvalid);
  CHECK(NatsKv::open(conn.get(), bucket("no.dots")).status().code() == Status::Code::kInvalid);
  NatsKvOptions replicas = bucket("r");
  replicas.replicas = 0;
  CHECK(NatsKv::open(conn.get(), replicas).status().code() == Status::Code::kInvalid);

  REQUIRE(NatsKv::open(conn.get(), bucket("leases_1000", 1000ms)));
  REQUIRE(NatsKv::open(conn.get(), bucket("leases_1000", 1000ms)));  // reopen: fine
  auto other = NatsKv::open(conn.get(), bucket("leases_1000", 3000ms));
  REQUIRE_FALSE(other);
  CHECK(other.status().code() == Status::Code::kInvalid);
  CHECK(other.status().message().find("TTL") != std::string::npos);
}

TEST_CASE("nats kv: with the server gone, calls fail within the timeout instead of hanging", "[integration][nats_kv]") {
  weir::log::configure(weir::log::Level::kError, weir::log::Format::kText);
  NatsServer server;
  NatsConn conn(server.url());
  auto opened = NatsKv::open(conn.get(), bucket("kv_down"));
  REQUIRE(opened);
  NatsKv& kv = *opened.value();
  const uint64_t rev = kv.create("k", "v").value();
  server.kill();
  const auto start = std::chrono::steady_clock::now();
  auto r = kv.update("k", "w", rev);
  const auto took = std::chrono::steady_clock::now() - start;
  REQUIRE_FALSE(r);
  CHECK((r.status().code() == Status::Code::kTimeout || r.status().code() == Status::Code::kUnavailable));
  CHECK(took < 2s);
  server.start();  // the connection comes back; the store answers again
  REQUIRE(wait_until([&] { return static_cast<bool>(kv.get("k")); }, 10s, 100ms));
  // A timed-out write may still land (cnats resends what it buffered while reconnecting):
  // the revision tells, and compare-and-set on the current one works again.
  auto now = kv.get("k");
  REQUIRE(now);
  INFO("value after the outage: " << now->value);
  // Either outcome is legitimate, but each has its own revision: "v" is still the first
  // write, "w" is a later one (a check on the value alone would accept any mix-up).
  if (now->value == "v") CHECK(now->revision == rev);
  else CHECK((now->value == "w" && now->revision > rev));
  CHECK(kv.update("k", "x", now->revision));
  weir::log::configure(weir::log::Level::kInfo, weir::log::Format::kText);
}

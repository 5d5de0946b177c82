// Singletons on a real nats-server, with the default lease settings: never two run; a
// crashed holder is replaced once its lease expired; a released one before that; timer
// ticks run at the rate of one instance with no tick fired twice. The takeover times are
// printed, not asserted (a loaded machine stretches them; bench/cluster.sh measures them):
// what is asserted is safety (never two, fences grow) and that takeovers happen.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <memory>
#include <thread>
#include <set>

#include "runtime/nats/nats_kv.h"
#include "cluster/singleton.h"
#include "connectors/timer/timer_source.h"
#include "runtime/base/log.h"
#include "tests/support/nats_cluster.h"
#include "tests/support/nats_conn.h"
#include "tests/support/recording.h"
#include "tests/support/support.h"

using namespace std::chrono_literals;
using weir::NatsKv;
using weir::NatsKvOptions;
using weir::SourceContext;
using weir::cluster::kDefaultLeaseTtl;
using weir::cluster::LeaseOptions;
using weir::cluster::Singleton;
using weir::cluster::SingletonOptions;
using weir::cluster::SourceFactory;
using weir::cluster::testing::NatsCluster;
using weir::cluster::testing::NatsConn;
using weir::cluster::testing::PulseSource;
using weir::cluster::testing::RecordingIngest;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

using Clock = std::chrono::steady_clock;

struct QuietLogs {
  QuietLogs() { weir::log::configure(weir::log::Level::kDebug, weir::log::Format::kText); }
  ~QuietLogs() { weir::log::configure(weir::log::Level::kInfo, weir::log::Format::kText); }
};

// One weir process as far as leases go: its own connection, its own store, one singleton.
struct Instance {
  Instance(const std::string& url, const std::string& owner, SourceFactory factory, int replicas = 1) : conn(url) {
    NatsKvOptions o;
    o.bucket = weir::cluster::lease_bucket_name("it", kDefaultLeaseTtl);
    o.ttl = kDefaultLeaseTtl;
    o.replicas = replicas;
    weir::Result<std::unique_ptr<NatsKv>> opened = weir::Status::internal("not tried");
    // A fresh NATS cluster may still be electing its JetStream meta leader.
    wait_until([&] { return static_cast<bool>(opened = NatsKv::open(conn.get(), o)); }, 20s, 200ms);
    INFO(opened.status().str());
    REQUIRE(opened);
    kv = std::move(opened.value());
    SingletonOptions so;
    so.key = "timer.ticks";
    so.owner = owner;
    so.lease = LeaseOptions{};  // the defaults
    singleton = std::make_unique<Singleton>(*kv, so, std::move(factory));
  }
  ~Instance() { singleton.reset(); }

  NatsConn conn;
  std::unique_ptr<NatsKv> kv;
  std::unique_ptr<Singleton> singleton;
};

SourceFactory pulse(const std::string& name, PulseSource::Stats& stats) {
  return [name, &stats] { return std::make_unique<PulseSource>(name, stats); };
}

SourceFactory timer(std::chrono::milliseconds every) {
  return [every]() -> std::unique_ptr<weir::Source> {
    weir::flows::TimerSourceSpec spec;
    spec.every = every;
    auto t = weir::connectors::TimerSource::create(spec);
    if (!t) return nullptr;
    return std::move(t.value());
  };
}

}  // namespace

TEST_CASE("singletons on nats: never two, kill → the other takes over, release → faster than the lease TTL",
          "[integration][singleton]") {
  QuietLogs quiet;
  NatsServer server;
  RecordingIngest ingest;
  SourceContext ctx;
  ctx.flow = "ticks";
  ctx.ingest = &ingest;
  PulseSource::Stats sa, sb, sc;
  auto a = std::make_unique<Instance>(server.url(), "a", pulse("a", sa));
  auto b = std::make_unique<Instance>(server.url(), "b", pulse("b", sb));
  REQUIRE(a->singleton->start(ctx));
  REQUIRE(wait_until([&] { return a->singleton->running(); }, 5s));
  REQUIRE(b->singleton->start(ctx));

  // Never two, over two lease TTLs. (Starved of CPU, a holder that cannot renew in time
  // stops by itself and the other may take over: at most one, not always the same.)
  const auto until = Clock::now() + 2 * kDefaultLeaseTtl;
  while (Clock::now() < until) {
    REQUIRE(sa.running + sb.running <= 1);
    std::this_thread::sleep_for(1ms);  // sampling an invariant over time, not awaiting
  }
  REQUIRE(wait_until([&] { return a->singleton->running() || b->singleton->running(); }, 10s, 1ms));
  if (b->singleton->running()) std::swap(a, b);  // `a` is the holder from here on
  const uint64_t token_a = *a->singleton->fencing_token();

  // kill -9 of the holder: nothing is released; the other waits out the lease, then runs.
  const auto killed = Clock::now();
  a->singleton->abandon();
  REQUIRE(wait_until([&] { return b->singleton->running(); }, 10s, 1ms));
  const auto failover = Clock::now() - killed;
  std::cout << "singleton crash failover " << std::chrono::duration_cast<std::chrono::milliseconds>(failover).count()
            << " ms (lease TTL " << kDefaultLeaseTtl.count() << " ms)\n";
  CHECK(*b->singleton->fencing_token() > token_a);
  a.reset();

  // A newcomer stays a standby while b holds.
  auto c = std::make_unique<Instance>(server.url(), "c", pulse("c", sc));
  REQUIRE(c->singleton->start(ctx));
  CHECK_FALSE(wait_until([&] { return c->singleton->running(); }, 2 * kDefaultLeaseTtl));
  CHECK(b->singleton->running());

  // SIGTERM of the holder: it releases (deletes its lease key), c takes over without
  // waiting for the TTL.
  const auto released = Clock::now();
  b->singleton->stop();
  REQUIRE(wait_until([&] { return c->singleton->running(); }, 10s, 1ms));
  const auto handoff = Clock::now() - released;
  std::cout << "singleton graceful handoff " << std::chrono::duration_cast<std::chrono::milliseconds>(handoff).count()
            << " ms\n";
  CHECK(handoff < kDefaultLeaseTtl);
  // c's term has emitted something under its token before it ends (stopping at once could
  // leave it with no event at all, and nothing to check below).
  auto emitted_by = [&](char who) {
    for (const auto& r : ingest.events()) {
      if (!r.event.id.empty() && r.event.id[0] == who) return true;
    }
    return false;
  };
  REQUIRE(wait_until([&] { return emitted_by('c'); }, 2s, 1ms));
  c->singleton->stop();

  // Every event carried its term's token, and tokens only grew in the order events were
  // taken in: an old holder's late event would carry a smaller one (it is refused instead).
  uint64_t last = 0;
  std::set<uint64_t> terms;
  for (const auto& r : ingest.events()) {
    const std::string fence = r.header(weir::cluster::kFenceHeader);
    REQUIRE_FALSE(fence.empty());
    const uint64_t f = std::stoull(fence);
    CHECK(f >= last);
    last = std::max(last, f);
    terms.insert(f);
  }
  CHECK(terms.size() >= 3);  // the first holder's, the survivor's after the kill, c's
}

TEST_CASE("timer singletons on nats: the rate of one, no tick twice, ticks resume after a kill",
          "[integration][singleton][timer]") {
  QuietLogs quiet;
  NatsServer server;
  RecordingIngest ingest;
  SourceContext ctx;
  ctx.flow = "beat";
  ctx.ingest = &ingest;
  constexpr auto kEvery = 100ms;
  auto a = std::make_unique<Instance>(server.url(), "a", timer(kEvery));
  auto b = std::make_unique<Instance>(server.url(), "b", timer(kEvery));
  REQUIRE(a->singleton->start(ctx));
  REQUIRE(b->singleton->start(ctx));
  REQUIRE(wait_until([&] { return ingest.size() >= 10; }, 10s));

  Instance* holder = a->singleton->running() ? a.get() : b.get();
  Instance* standby = holder == a.get() ? b.get() : a.get();
  REQUIRE_FALSE(standby->singleton->running());
  const size_t before_kill = ingest.size();
  const auto killed = Clock::now();
  holder->singleton->abandon();
  REQUIRE(wait_until([&] { return ingest.size() >= before_kill + 10; }, 10s));
  a->singleton->stop();
  b->singleton->stop();

  auto events = ingest.events();
  std::set<std::string> ids;
  int64_t last_tick = -1;
  uint64_t last_fence = 0;
  std::optional<Clock::time_point> first_after_kill;
  for (const auto& r : events) {
    ids.insert(r.event.id);
    const auto body = nlohmann::json::parse(r.event.body);
    const int64_t tick = body["tick"];
    const uint64_t fence = body["fence"];
    CHECK(tick % 100 == 0);
    CHECK(tick > last_tick);     // one instance at a time: ticks strictly increase
    CHECK(fence >= last_fence);  // and terms only grow
    CHECK(r.header(weir::cluster::kFenceHeader) == std::to_string(fence));
    if (r.at > killed && !first_after_kill) first_after_kill = r.at;
    last_tick = tick;
    last_fence = fence;
  }
  CHECK(ids.size() == events.size());  // no tick fired twice
  REQUIRE(first_after_kill);
  const auto gap = *first_after_kill - killed;
  INFO("kill → next tick " << std::chrono::duration_cast<std::chrono::milliseconds>(gap).count() << " ms");
  CHECK(gap < 1500ms);
}

TEST_CASE("singletons on nats: after a nats-server restart a release is still taken over at once",
          "[integration][singleton]") {
  QuietLogs quiet;
  NatsServer server;
  RecordingIngest ingest;
  SourceContext ctx;
  ctx.flow = "ticks";
  ctx.ingest = &ingest;
  PulseSource::Stats sa, sb;
  auto a = std::make_unique<Instance>(server.url(), "a", pulse("a", sa));
  REQUIRE(a->singleton->start(ctx));
  REQUIRE(wait_until([&] { return a->singleton->running(); }, 5s));
  auto b = std::make_unique<Instance>(server.url(), "b", pulse("b", sb));
  REQUIRE(b->singleton->start(ctx));
  // Both watches exist before the restart: they must survive it.
  REQUIRE(wait_until([&] { return a->singleton->watching() && b->singleton->watching(); }, 5s));

  server.stop();
  server.start();
  // Somebody holds the lease again (a, if its renewals resumed in time, else either).
  REQUIRE(wait_until([&] { return sa.running + sb.running == 1; }, 10s));
  REQUIRE(wait_until([&] { return a->singleton->running() || b->singleton->running(); }, 10s));
  // Give the watches a moment to be re-established, then hand over gracefully.
  Instance* holder = a->singleton->running() ? a.get() : b.get();
  Instance* standby = holder == a.get() ? b.get() : a.get();
  const auto settle = Clock::now() + 2 * kDefaultLeaseTtl;
  while (Clock::now() < settle) {
    REQUIRE(sa.running + sb.running <= 1);
    std::this_thread::sleep_for(1ms);  // sampling an invariant over time, not awaiting
  }
  REQUIRE(holder->singleton->running());
  const auto released = Clock::now();
  holder->singleton->stop();
  REQUIRE(wait_until([&] { return standby->singleton->running(); }, 250ms, 1ms));
  INFO(
      "handoff after restart " << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - released).count()
                               << " ms");
  CHECK(Clock::now() - released < 250ms);
  standby->singleton->stop();
}

namespace {

// The server currently leading the KV bucket's stream (its Raft group).
std::string stream_leader(natsConnection* nc, const std::string& stream) {
  jsCtx* js = nullptr;
  if (natsConnection_JetStream(&js, nc, nullptr) != NATS_OK) return "";
  jsStreamInfo* si = nullptr;
  std::string leader;
  if (js_GetStreamInfo(&si, js, stream.c_str(), nullptr, nullptr) == NATS_OK) {
    if (si->Cluster != nullptr && si->Cluster->Leader != nullptr) leader = si->Cluster->Leader;
    jsStreamInfo_Destroy(si);
  }
  jsCtx_Destroy(js);
  return leader;
}

}  // namespace

TEST_CASE("singletons on a three-node NATS cluster with R3 KV: failover, handoff, KV leader killed",
          "[integration][singleton][r3]") {
  QuietLogs quiet;
  NatsCluster nats;
  RecordingIngest ingest;
  SourceContext ctx;
  ctx.flow = "ticks";
  ctx.ingest = &ingest;
  PulseSource::Stats sa, sb, sc, sd;
  auto a = std::make_unique<Instance>(nats.urls(), "a", pulse("a", sa), 3);
  auto b = std::make_unique<Instance>(nats.urls(), "b", pulse("b", sb), 3);
  REQUIRE(a->singleton->start(ctx));
  REQUIRE(wait_until([&] { return a->singleton->running(); }, 10s));
  REQUIRE(b->singleton->start(ctx));
  REQUIRE(wait_until([&] { return b->singleton->watching(); }, 10s));
  // b must have seen a renewal before a dies, or it cannot know what to take over.
  REQUIRE(wait_until([&] { return ingest.size() >= 20; }, 5s));

  // kill -9 of the holder.
  auto t0 = Clock::now();
  a->singleton->abandon();
  REQUIRE(wait_until([&] { return b->singleton->running(); }, 1500ms, 1ms));
  INFO("R3 crash failover " << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count()
                            << " ms");
  CHECK(Clock::now() - t0 < 1500ms);
  a.reset();

  // Graceful handoff to a newcomer.
  auto c = std::make_unique<Instance>(nats.urls(), "c", pulse("c", sc), 3);
  REQUIRE(c->singleton->start(ctx));
  REQUIRE(wait_until([&] { return c->singleton->watching(); }, 10s));
  REQUIRE_FALSE(c->singleton->running());
  t0 = Clock::now();
  b->singleton->stop();
  REQUIRE(wait_until([&] { return c->singleton->running(); }, 250ms, 1ms));
  CHECK(Clock::now() - t0 < 250ms);
  b.reset();

  // Take down the node leading the lease bucket's stream while c or d holds: never two
  // holders, and a holder again once the stream has a new leader.
  auto d = std::make_unique<Instance>(nats.urls(), "d", pulse("d", sd), 3);
  REQUIRE(d->singleton->start(ctx));
  REQUIRE(wait_until([&] { return d->singleton->watching(); }, 10s));
  auto disrupt = [&](const char* how, const std::function<void(size_t)>& action) {
    std::string leader;
    REQUIRE(wait_until([&] { return !(leader = stream_leader(c->conn.get(), "KV_" + c->kv->bucket())).empty(); }, 20s,
                       100ms));
    const size_t node = nats.index_of(leader);
    REQUIRE(sc.running + sd.running == 1);
    const auto start = Clock::now();
    action(node);
    std::optional<Clock::duration> back_at;  // when the current unbroken run of a holder began
    while (Clock::now() < start + 10s) {
      const int running = sc.running + sd.running;
      REQUIRE(running <= 1);
      if (running == 0) back_at.reset();
      if (running == 1 && !back_at) back_at = Clock::now() - start;
      std::this_thread::sleep_for(1ms);  // sampling an invariant over time, not awaiting
    }
    REQUIRE(back_at);
    WARN(how << " of the stream leader " << leader << ": a holder again after "
             << std::chrono::duration_cast<std::chrono::milliseconds>(*back_at).count() << " ms");
    nats.start(node);
  };
  disrupt("kill -9", [&](size_t node) { nats.kill(node); });
  disrupt("SIGTERM", [&](size_t node) { nats.stop(node); });

  // Fencing tokens of the terms only grew.
  std::vector<uint64_t> fences;
  for (const auto& r : ingest.events()) {
    const uint64_t f = std::stoull(r.header(weir::cluster::kFenceHeader));
    if (fences.empty() || fences.back() != f) fences.push_back(f);
  }
  CHECK(std::is_sorted(fences.begin(), fences.end()));
  c->singleton->stop();
  d->singleton->stop();
}

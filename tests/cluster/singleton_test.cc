// Singleton over the in-memory FakeKv (real threads, real clock, short lease TTL).
#include <catch2/catch.hpp>

#include <memory>
#include <set>
#include <thread>

#include "cluster/singleton.h"
#include "runtime/base/log.h"
#include "tests/support/fake_kv.h"
#include "tests/support/recording.h"
#include "tests/support/support.h"

using namespace std::chrono_literals;
using weir::SourceContext;
using weir::cluster::LeaseOptions;
using weir::cluster::Singleton;
using weir::cluster::SingletonOptions;
using weir::cluster::testing::FakeKv;
using weir::cluster::testing::PulseSource;
using weir::cluster::testing::RecordingIngest;
using weir::testing::wait_until;

namespace {

struct QuietLogs {
  QuietLogs() { weir::log::configure(weir::log::Level::kError, weir::log::Format::kText); }
  ~QuietLogs() { weir::log::configure(weir::log::Level::kInfo, weir::log::Format::kText); }
};

// A short TTL keeps these tests quick; the defaults are exercised against nats-server.
const LeaseOptions kFast = LeaseOptions::for_ttl(300ms);

std::unique_ptr<Singleton> make(FakeKv& kv, const std::string& owner, PulseSource::Stats& stats,
                                std::vector<PulseSource*>* made = nullptr) {
  SingletonOptions o;
  o.key = "pulse.flow";
  o.owner = owner;
  o.lease = kFast;
  o.restart_pause = 500ms;
  return std::make_unique<Singleton>(kv, o, [owner, &stats, made]() {
    auto s = std::make_unique<PulseSource>(owner, stats);
    if (made != nullptr) made->push_back(s.get());
    return s;
  });
}

}  // namespace

TEST_CASE("singleton: exactly one of two runs, and its events carry the fencing token", "[singleton]") {
  QuietLogs quiet;
  FakeKv kv;
  RecordingIngest ingest;
  SourceContext ctx;
  ctx.flow = "pulse";
  ctx.ingest = &ingest;
  PulseSource::Stats sa, sb;
  auto a = make(kv, "a", sa);
  auto b = make(kv, "b", sb);
  REQUIRE(a->start(ctx));
  REQUIRE(b->start(ctx));
  REQUIRE(wait_until([&] { return a->running() || b->running(); }, 2s));

  // Over several lease TTLs, never both.
  const auto until = std::chrono::steady_clock::now() + 1s;
  while (std::chrono::steady_clock::now() < until) {
    REQUIRE(sa.running + sb.running == 1);
    REQUIRE_FALSE((a->fencing_token() && b->fencing_token()));
    std::this_thread::sleep_for(1ms);  // sampling an invariant over time, not awaiting
  }
  Singleton& holder = a->running() ? *a : *b;
  const uint64_t token = *holder.fencing_token();
  CHECK(holder.starts() == 1);
  // The standby first: stopping the holder first would hand over to it (a new term).
  Singleton& standby = &holder == a.get() ? *b : *a;
  standby.stop();
  holder.stop();

  REQUIRE(ingest.size() > 10);
  std::set<std::string> fences;
  for (const auto& r : ingest.events())
    fences.insert(r.event.id.substr(0, 1) + ":" + r.header(weir::cluster::kFenceHeader));
  std::string seen;
  for (const auto& f : fences) seen += f + " ";
  INFO("fences seen: " << seen << "; holder token " << token << ", starts a " << sa.starts << " b " << sb.starts);
  CHECK(fences.size() == 1);
  CHECK(*fences.begin() == std::string(&holder == a.get() ? "a" : "b") + ":" + std::to_string(token));
}

TEST_CASE("singleton: a crashed holder is replaced after the lease TTL", "[singleton]") {
  QuietLogs quiet;
  FakeKv kv;
  RecordingIngest ingest;
  SourceContext ctx;
  ctx.ingest = &ingest;
  PulseSource::Stats sa, sb;
  auto a = make(kv, "a", sa);
  REQUIRE(a->start(ctx));
  REQUIRE(wait_until([&] { return a->running(); }, 2s));
  auto b = make(kv, "b", sb);
  REQUIRE(b->start(ctx));
  REQUIRE(wait_until([&] { return kv.log_size() >= 3; }, 2s));  // b has seen renewals
  const uint64_t old_token = *a->fencing_token();

  const auto crash = std::chrono::steady_clock::now();
  a->abandon();
  CHECK(sa.running == 0);
  REQUIRE(wait_until([&] { return b->running(); }, 3s));
  const auto took = std::chrono::steady_clock::now() - crash;
  CHECK(took >= kFast.ttl - kFast.renew_interval);  // it waited for the lease to lapse
  CHECK(*b->fencing_token() > old_token);
  b->stop();
}

TEST_CASE("singleton: a graceful stop hands over at once", "[singleton]") {
  QuietLogs quiet;
  FakeKv kv;
  RecordingIngest ingest;
  SourceContext ctx;
  ctx.ingest = &ingest;
  PulseSource::Stats sa, sb;
  auto a = make(kv, "a", sa);
  REQUIRE(a->start(ctx));
  REQUIRE(wait_until([&] { return a->running(); }, 2s));
  auto b = make(kv, "b", sb);
  REQUIRE(b->start(ctx));
  REQUIRE(wait_until([&] { return b->watching(); }, 2s));
  const auto before = std::chrono::steady_clock::now();
  a->stop();
  REQUIRE(wait_until([&] { return b->running(); }, 2s));
  // Well under the TTL: the delete event, not expiry, moved it.
  CHECK(std::chrono::steady_clock::now() - before < kFast.ttl);
  b->stop();
}

TEST_CASE("singleton: an inner source that fails to start makes it step down", "[singleton]") {
  QuietLogs quiet;
  FakeKv kv;
  RecordingIngest ingest;
  SourceContext ctx;
  ctx.ingest = &ingest;
  PulseSource::Stats sa, sb;
  sa.fail_start = true;
  auto a = make(kv, "a", sa);
  REQUIRE(a->start(ctx));
  REQUIRE(wait_until([&] { return kv.log_size() >= 2; }, 2s));  // won, then deleted
  auto b = make(kv, "b", sb);
  REQUIRE(b->start(ctx));
  REQUIRE(wait_until([&] { return b->running(); }, 2s));
  CHECK_FALSE(a->running());
  a->stop();
  b->stop();
}

TEST_CASE("singleton: the inner source's context refuses events once the lease is gone", "[singleton]") {
  QuietLogs quiet;
  FakeKv kv;
  RecordingIngest ingest;
  SourceContext ctx;
  ctx.ingest = &ingest;
  PulseSource::Stats sa;
  auto a = make(kv, "a", sa);
  REQUIRE(a->start(ctx));
  REQUIRE(wait_until([&] { return a->running(); }, 2s));
  REQUIRE(wait_until([&] { return ingest.size() >= 3; }, 2s));
  CHECK(sa.refused == 0);
  SourceContext inner;
  {
    weir::MutexLock lock(sa.mu);
    inner = sa.last_context;
  }
  REQUIRE(inner.fence);
  CHECK(inner.fence() == a->fencing_token());

  // The KV stops answering: the next renewal fails, the lease is lost, the source stopped.
  kv.set_fault([](const char*, const std::string&) { return FakeKv::Fault::kFailBefore; });
  REQUIRE(wait_until([&] { return !a->running(); }, 2s));
  CHECK_FALSE(a->fencing_token());
  CHECK_FALSE(inner.fence());
  // A late publish through the context the source was given (a source slow to stop).
  const size_t before = ingest.size();
  weir::Status result = weir::Status::ok();
  weir::IngestEvent e;
  e.id = "late";
  inner.ingest->publish(e, 1s, [&](const weir::Status& s, const std::string&) { result = s; });
  CHECK(result.code() == weir::Status::Code::kConflict);
  CHECK(ingest.size() == before);
  a->stop();
}

TEST_CASE("singleton: bad options are refused at start", "[singleton]") {
  FakeKv kv;
  RecordingIngest ingest;
  SourceContext ctx;
  ctx.ingest = &ingest;
  PulseSource::Stats stats;
  SingletonOptions o;
  o.key = "bad key";
  o.owner = "x";
  Singleton bad_key(kv, o, [&] { return std::make_unique<PulseSource>("x", stats); });
  weir::Status s = bad_key.start(ctx);
  CHECK_FALSE(s);
  CHECK(s.message().find("key") != std::string::npos);

  o.key = "good";
  o.lease.hold = o.lease.ttl;
  Singleton bad_lease(kv, o, [&] { return std::make_unique<PulseSource>("x", stats); });
  CHECK_FALSE(bad_lease.start(ctx));

  o.lease = LeaseOptions{};
  Singleton no_ingest(kv, o, [&] { return std::make_unique<PulseSource>("x", stats); });
  SourceContext empty;
  CHECK_FALSE(no_ingest.start(empty));
}

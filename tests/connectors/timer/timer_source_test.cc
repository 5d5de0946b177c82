// TimerSource: spec validation, tick alignment, the event of a tick, fencing, and a real run.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <set>

#include "connectors/timer/timer_source.h"
#include "tests/support/recording.h"
#include "tests/support/support.h"

using namespace std::chrono_literals;
using weir::SourceContext;
using weir::cluster::testing::RecordingIngest;
using weir::connectors::TimerSource;
using weir::flows::TimerSourceSpec;

namespace {

TimerSourceSpec every(std::chrono::milliseconds d) {
  TimerSourceSpec spec;
  spec.every = d;
  return spec;
}

}  // namespace

TEST_CASE("timer: the spec needs exactly one of every or a valid cron", "[timer]") {
  TimerSourceSpec none;
  auto r = TimerSource::create(none);
  REQUIRE_FALSE(r);
  CHECK(r.status().message().find("exactly one") != std::string::npos);

  TimerSourceSpec both = every(1s);
  both.cron = "* * * * *";
  CHECK_FALSE(TimerSource::create(both));

  CHECK_FALSE(TimerSource::create(every(0ms)));

  TimerSourceSpec bad;
  bad.cron = "61 * * * *";
  r = TimerSource::create(bad);
  REQUIRE_FALSE(r);
  CHECK(r.status().message().find("minute") != std::string::npos);

  TimerSourceSpec good;
  good.cron = "*/5 * * * *";
  auto ok = TimerSource::create(good);
  REQUIRE(ok);
  CHECK(ok.value()->singleton());
  CHECK(ok.value()->next_tick_after(0) == 5 * 60000);
}

TEST_CASE("timer: `every` ticks fall on multiples of the period since the epoch", "[timer]") {
  auto t = TimerSource::create(every(200ms));
  REQUIRE(t);
  CHECK(t.value()->next_tick_after(1000) == 1200);
  CHECK(t.value()->next_tick_after(1199) == 1200);
  CHECK(t.value()->next_tick_after(1200) == 1400);
  CHECK(t.value()->next_tick_after(-1) == 0);
  CHECK(t.value()->next_tick_after(-200) == 0);
}

TEST_CASE("timer: a tick's event carries a derived id, the payload, the tick and the fence", "[timer]") {
  TimerSourceSpec spec = every(200ms);
  spec.payload = {{"kind", "heartbeat"}, {"n", 1}};
  auto t = TimerSource::create(spec);
  REQUIRE(t);

  weir::IngestEvent e = t.value()->make_event("beats", 1400, 17);
  CHECK(e.id == "beats-tick-1400");
  CHECK(e.id == TimerSource::event_id("beats", 1400));
  auto body = nlohmann::json::parse(e.body);
  CHECK(body["kind"] == "heartbeat");
  CHECK(body["n"] == 1);
  CHECK(body["tick"] == 1400);
  CHECK(body["fence"] == 17);
  REQUIRE(e.headers.size() == 1);
  CHECK(e.headers[0].first == "Weir-Fence");
  CHECK(e.headers[0].second == "17");

  // Outside a cluster: no fence at all.
  e = t.value()->make_event("beats", 1600, std::nullopt);
  body = nlohmann::json::parse(e.body);
  CHECK_FALSE(body.contains("fence"));
  CHECK(e.headers.empty());

  // A payload that is not an object is kept under "payload".
  spec.payload = "ping";
  auto s = TimerSource::create(spec);
  REQUIRE(s);
  body = nlohmann::json::parse(s.value()->make_event("beats", 1800, std::nullopt).body);
  CHECK(body["payload"] == "ping");
  CHECK(body["tick"] == 1800);
}

TEST_CASE("timer: runs on its own thread, one event per aligned tick, until stopped", "[timer]") {
  auto t = TimerSource::create(every(20ms));
  REQUIRE(t);
  RecordingIngest ingest;
  SourceContext ctx;
  ctx.flow = "fast";
  ctx.ingest = &ingest;
  REQUIRE(t.value()->start(ctx));
  REQUIRE(weir::testing::wait_until([&] { return ingest.size() >= 6; }, 5s));
  t.value()->stop();
  const size_t after_stop = ingest.size();

  auto events = ingest.events();
  std::set<std::string> ids;
  int64_t last = -1;
  for (const auto& r : events) {
    ids.insert(r.event.id);
    const auto body = nlohmann::json::parse(r.event.body);
    const int64_t tick = body["tick"];
    CHECK(tick % 20 == 0);
    CHECK(tick > last);
    CHECK(r.event.id == "fast-tick-" + std::to_string(tick));
    last = tick;
  }
  CHECK(ids.size() == events.size());
  CHECK(t.value()->ticks_fired() == after_stop);
  // Nothing after stop: wait a few periods for a tick that must not come.
  CHECK_FALSE(weir::testing::wait_until([&] { return ingest.size() > after_stop; }, 100ms));
}

TEST_CASE("timer: ticks are skipped while the fence says the lease is not held", "[timer]") {
  auto t = TimerSource::create(every(10ms));
  REQUIRE(t);
  RecordingIngest ingest;
  std::atomic<uint64_t> token{0};
  SourceContext ctx;
  ctx.flow = "fenced";
  ctx.ingest = &ingest;
  ctx.fence = [&]() -> std::optional<uint64_t> {
    const uint64_t v = token.load();
    if (v == 0) return std::nullopt;
    return v;
  };
  REQUIRE(t.value()->start(ctx));
  REQUIRE(weir::testing::wait_until([&] { return t.value()->ticks_skipped() >= 3; }, 5s));
  CHECK(ingest.size() == 0);
  token = 42;
  REQUIRE(weir::testing::wait_until([&] { return ingest.size() >= 2; }, 5s));
  t.value()->stop();
  for (const auto& r : ingest.events()) {
    CHECK(r.header("Weir-Fence") == "42");
    CHECK(nlohmann::json::parse(r.event.body)["fence"] == 42);
  }
}

// TimerSource: the `timer` source (`every: 200ms` or a 5-field `cron`), a cluster
// singleton (the runtime wraps it in cluster::Singleton when clustered).
//
// Each tick publishes one event through Ingest::publish:
//   id   "<flow>-tick-<scheduled epoch ms>" — the same on every instance, so a tick that
//        two holders both fire is deduplicated by JetStream (Nats-Msg-Id);
//   body the spec's payload object plus {"tick": <scheduled epoch ms>, "fence": <token>}
//        ("fence" only when the context has a fence; a non-object payload is kept under
//        "payload").
// Ticks are aligned: `every` ticks fall on multiples of the period since the Unix epoch,
// cron ticks on the matching minutes (UTC), so every instance computes the same times. A
// source that starts fires the next tick after now, never a missed one. When the
// context's fence says the lease is not held, the tick is skipped.
//
// Threading: start/stop from the owner's thread; ticks fire on one thread of its own.
// Publish callbacks (any thread) touch nothing of the source, so they may outlive it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "flows/cron.h"
#include "flows/flow.h"
#include "runtime/ports/source.h"
#include "runtime/base/thread_annotations.h"

namespace weir::connectors {

class TimerSource final : public Source {
 public:
  // Validates the spec: exactly one of every (≥ 1 ms) or cron (parses, can match).
  static Result<std::unique_ptr<TimerSource>> create(const flows::TimerSourceSpec& spec);
  ~TimerSource() override;
  TimerSource(const TimerSource&) = delete;
  TimerSource& operator=(const TimerSource&) = delete;

  Status start(SourceContext& context) override;
  void stop() override;  // idempotent; no publish starts after it returns
  bool singleton() const override { return true; }

  // The first scheduled tick strictly after `after_ms` (epoch ms); -1 when none.
  int64_t next_tick_after(int64_t after_ms) const;
  // The event one tick publishes.
  IngestEvent make_event(std::string_view flow, int64_t tick_ms, std::optional<uint64_t> fence) const;
  static std::string event_id(std::string_view flow, int64_t tick_ms);

  uint64_t ticks_fired() const { return fired_.load(std::memory_order_acquire); }
  uint64_t ticks_skipped() const { return skipped_.load(std::memory_order_acquire); }

 private:
  explicit TimerSource(const flows::TimerSourceSpec& spec) : spec_(spec) {}
  void run();
  void fire(int64_t tick_ms);

  const flows::TimerSourceSpec spec_;
  std::optional<flows::CronSchedule> cron_;
  SourceContext context_;
  std::thread thread_;
  Mutex mu_;
  std::condition_variable wake_;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool started_ = false;
  std::atomic<uint64_t> fired_{0};
  std::atomic<uint64_t> skipped_{0};
};

}  // namespace weir::connectors

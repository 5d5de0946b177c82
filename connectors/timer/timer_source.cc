#include "connectors/timer/timer_source.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "runtime/base/log.h"
#include "runtime/base/wall_clock.h"

namespace weir::connectors {

namespace {

using std::chrono::milliseconds;

// Wake at least this often while waiting for a far tick, so a wall-clock jump is noticed.
constexpr milliseconds kMaxWait{1000};
constexpr milliseconds kPublishTimeout{5000};

}  // namespace

Result<std::unique_ptr<TimerSource>> TimerSource::create(const flows::TimerSourceSpec& spec) {
  const bool has_cron = !spec.cron.empty();
  if (spec.every.has_value() == has_cron) {
    return Status::invalid("timer: exactly one of `every` or `cron` is required");
  }
  if (spec.every && spec.every->count() < 1) return Status::invalid("timer: `every` must be at least 1ms");
  std::unique_ptr<TimerSource> source(new TimerSource(spec));
  if (has_cron) {
    std::string error;
    auto cron = flows::CronSchedule::parse(spec.cron, &error);
    if (!cron) return Status::invalid("timer: " + error);  // the loader checked it already
    source->cron_ = std::move(*cron);
  }
  return source;
}

TimerSource::~TimerSource() { stop(); }

int64_t TimerSource::next_tick_after(int64_t after_ms) const {
  if (cron_) return cron_->next_after(after_ms);
  const int64_t every = spec_.every->count();
  // Floor division, so times before the epoch (tests) align too.
  int64_t k = after_ms / every;
  if (after_ms % every != 0 && after_ms < 0) --k;
  return (k + 1) * every;
}

std::string TimerSource::event_id(std::string_view flow, int64_t tick_ms) {
  return std::string(flow) + "-tick-" + std::to_string(tick_ms);
}

IngestEvent TimerSource::make_event(std::string_view flow, int64_t tick_ms, std::optional<uint64_t> fence) const {
  flows::Json body = spec_.payload.is_object() ? spec_.payload : flows::Json::object();
  if (!spec_.payload.is_object() && !spec_.payload.is_null()) body["payload"] = spec_.payload;
  body["tick"] = tick_ms;
  if (fence) body["fence"] = *fence;
  IngestEvent event;
  event.id = event_id(flow, tick_ms);
  event.body = body.dump();
  if (fence) event.headers.emplace_back("Weir-Fence", std::to_string(*fence));
  return event;
}

Status TimerSource::start(SourceContext& context) {
  if (started_) return Status::invalid("timer: started twice");
  if (context.ingest == nullptr) return Status::invalid("timer: no ingest");
  context_ = context;
  {
    MutexLock lock(mu_);
    stopping_ = false;
  }
  started_ = true;
  thread_ = std::thread([this] { run(); });
  pthread_setname_np(thread_.native_handle(), "timer-src");
  return Status::ok();
}

void TimerSource::stop() {
  if (!started_) return;
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  started_ = false;
}

void TimerSource::run() {
  int64_t next = next_tick_after(wall_ms());
  UniqueLock lock(mu_);
  while (!stopping_) {
    if (next < 0) {
      log::warn("timer: no next tick; stopping", {{"flow", context_.flow}});
      return;
    }
    const int64_t now = wall_ms();
    if (now < next) {
      lock.wait_for(wake_, std::min(milliseconds(next - now), kMaxWait));
      continue;
    }
    lock.unlock();
    fire(next);
    // After a late wake-up (a suspended process, a clock jump) skip the missed ticks.
    next = next_tick_after(std::max(next, wall_ms()));
    lock.lock();
  }
}

void TimerSource::fire(int64_t tick_ms) {
  std::optional<uint64_t> fence;
  if (context_.fence) {
    fence = context_.fence();
    if (!fence) {
      skipped_.fetch_add(1, std::memory_order_acq_rel);
      log::debug("timer tick skipped: lease not held", {{"flow", context_.flow}});
      return;
    }
  }
  IngestEvent event = make_event(context_.flow, tick_ms, fence);
  fired_.fetch_add(1, std::memory_order_acq_rel);
  // The callback captures copies only: it may run after this source is gone.
  context_.ingest->publish(
      std::move(event), kPublishTimeout, [flow = context_.flow](const Status& status, const std::string& id) {
        if (status) return;
        if (status.code() == Status::Code::kConflict) {
          log::debug("timer tick not published", {{"flow", flow}, {"id", id}, {"error", status.str()}});
        } else {
          log::warn("timer tick not published", {{"flow", flow}, {"id", id}, {"error", status.str()}});
        }
      });
}

}  // namespace weir::connectors

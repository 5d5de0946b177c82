#include "runtime/flow/sink_health.h"

#include <algorithm>
#include <random>

#include "runtime/base/log.h"
#include "runtime/base/wall_clock.h"

namespace weir {
namespace {

std::string seconds_text(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fs", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

// Up to a fifth more than `d`: instances (and sinks) that opened together probe apart.
std::chrono::milliseconds jittered(std::chrono::milliseconds d) {
  thread_local std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<int64_t> extra(0, std::max<int64_t>(d.count() / 5, 0));
  return d + std::chrono::milliseconds(extra(rng));
}

}  // namespace

const char* sink_state_name(SinkState s) {
  switch (s) {
    case SinkState::kClosed: return "closed";
    case SinkState::kOpen: return "open";
    case SinkState::kPaused: return "paused";
  }
  return "closed";
}

const char* sink_health_word(const SinkHealthView& v) {
  if (v.state == SinkState::kPaused) return "paused";
  if (v.state == SinkState::kOpen) return "down";
  if (v.recent_failed == 0) return "healthy";
  return recent_failure_share(v) >= 0.5 ? "failing" : "degraded";
}

double recent_failure_share(const SinkHealthView& v) {
  const uint64_t n = v.recent_delivered + v.recent_failed;
  return n == 0 ? 0.0 : static_cast<double>(v.recent_failed) / static_cast<double>(n);
}

SinkHealth::SinkHealth(std::string flow, std::string sink, CircuitOptions options)
    : flow_(std::move(flow)), sink_(std::move(sink)), options_(options) {}

void SinkHealth::set_state(Clock::time_point now, SinkState s) {
  if (state_ != SinkState::kClosed) not_closed_ += now - since_;
  state_ = s;
  since_ = now;
  since_wall_ms_ = wall_ms();
  ++transitions_;
}

void SinkHealth::schedule_probe(Clock::time_point now, std::chrono::milliseconds at_least) {
  const auto wait = std::max(jittered(interval_), at_least);
  next_probe_ = now + wait;
}

void SinkHealth::count_result(Clock::time_point now, bool delivered) {
  const int64_t second = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  Bucket& b = recent_.at(static_cast<size_t>(second) % kBuckets);
  if (b.second != second) b = Bucket{second, 0, 0};
  ++(delivered ? b.delivered : b.failed);
}

bool SinkHealth::answered(Clock::time_point now, bool probe, bool delivered) {
  MutexLock lock(mu_);
  count_result(now, delivered);
  failures_ = 0;
  if (probe) probing_ = false;
  if (state_ != SinkState::kOpen) return false;
  const auto down = std::chrono::duration_cast<std::chrono::milliseconds>(now - since_);
  set_state(now, SinkState::kClosed);
  next_probe_.reset();
  probing_ = false;
  log::info("sink closed: the receiver answers again, delivery resumes",
            {{"flow", flow_}, {"sink", sink_}, {"open_for", seconds_text(down)}});
  return true;
}

bool SinkHealth::failed(Clock::time_point now, const std::string& reason,
                        std::optional<std::chrono::milliseconds> retry_after, bool probe) {
  MutexLock lock(mu_);
  count_result(now, false);
  last_error_ = reason;
  ++failures_;
  std::chrono::milliseconds wait{0};
  if (retry_after) wait = std::clamp(*retry_after, std::chrono::milliseconds(0), options_.retry_after_cap);
  switch (state_) {
    case SinkState::kPaused: return true;
    case SinkState::kOpen:
      if (probe) {
        probing_ = false;
        interval_ = std::min(interval_ * 2, options_.probe_max);
        schedule_probe(now, wait);
        log::info("sink probe failed: still open",
                  {{"flow", flow_},
                   {"sink", sink_},
                   {"reason", reason},
                   {"next_probe_in",
                    seconds_text(std::chrono::duration_cast<std::chrono::milliseconds>(*next_probe_ - now))}});
      } else if (retry_after && (!next_probe_ || *next_probe_ < now + wait)) {
        next_probe_ = now + wait;  // the receiver asked for a longer pause than planned
      }
      return true;
    case SinkState::kClosed: break;
  }
  if (!retry_after && failures_ < options_.failures_to_open) return false;
  set_state(now, SinkState::kOpen);
  interval_ = options_.probe_first;
  probing_ = false;
  schedule_probe(now, wait);
  const auto in = std::chrono::duration_cast<std::chrono::milliseconds>(*next_probe_ - now);
  if (retry_after) {
    log::warn("sink open: the receiver asked to wait (Retry-After), delivery paused",
              {{"flow", flow_}, {"sink", sink_}, {"reason", reason}, {"next_probe_in", seconds_text(in)}});
  } else {
    log::warn("sink open: the receiver keeps failing, events wait in JetStream and one probe goes out at a time",
              {{"flow", flow_},
               {"sink", sink_},
               {"failures", std::to_string(failures_)},
               {"reason", reason},
               {"next_probe_in", seconds_text(in)}});
  }
  return true;
}

bool SinkHealth::broker_down(Clock::time_point now, const std::string& reason) {
  MutexLock lock(mu_);
  last_error_ = reason;
  if (state_ != SinkState::kClosed) return false;
  set_state(now, SinkState::kOpen);
  interval_ = options_.probe_first;
  probing_ = false;
  next_probe_.reset();
  log::warn("sink open: its broker is not connected, events wait in JetStream until it is",
            {{"flow", flow_}, {"sink", sink_}, {"reason", reason}});
  return true;
}

void SinkHealth::broker_up(Clock::time_point now) {
  MutexLock lock(mu_);
  if (state_ != SinkState::kOpen || probing_) return;
  interval_ = options_.probe_first;
  next_probe_ = now;
}

bool SinkHealth::pause(Clock::time_point now) {
  MutexLock lock(mu_);
  if (state_ == SinkState::kPaused) return false;
  set_state(now, SinkState::kPaused);
  next_probe_.reset();
  probing_ = false;
  log::info("sink paused by hand: events wait in JetStream until it is resumed", {{"flow", flow_}, {"sink", sink_}});
  return true;
}

bool SinkHealth::resume(Clock::time_point now) {
  MutexLock lock(mu_);
  if (state_ != SinkState::kPaused) return false;
  set_state(now, SinkState::kClosed);
  failures_ = 0;
  log::info("sink resumed by hand: delivery resumes", {{"flow", flow_}, {"sink", sink_}});
  return true;
}

SinkState SinkHealth::state() const {
  MutexLock lock(mu_);
  return state_;
}

bool SinkHealth::take_probe(Clock::time_point now) {
  MutexLock lock(mu_);
  if (state_ != SinkState::kOpen || probing_ || !next_probe_ || now < *next_probe_) return false;
  probing_ = true;
  next_probe_.reset();
  return true;
}

void SinkHealth::return_probe(Clock::time_point now) {
  MutexLock lock(mu_);
  if (!probing_) return;
  probing_ = false;
  if (state_ == SinkState::kOpen) next_probe_ = now;
}

std::optional<SinkHealth::Clock::time_point> SinkHealth::next_probe() const {
  MutexLock lock(mu_);
  return next_probe_;
}

SinkHealthView SinkHealth::view(Clock::time_point now) const {
  MutexLock lock(mu_);
  SinkHealthView v;
  v.state = state_;
  v.since_ms = since_wall_ms_;
  v.probing = probing_;
  if (next_probe_) {
    v.next_probe_ms = wall_ms() + std::chrono::duration_cast<std::chrono::milliseconds>(*next_probe_ - now).count();
  }
  v.last_error = last_error_;
  v.consecutive_failures = failures_;
  v.transitions = transitions_;
  auto total = not_closed_;
  if (state_ != SinkState::kClosed) total += now - since_;
  v.not_closed = std::chrono::duration_cast<std::chrono::milliseconds>(total);
  const int64_t second = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  for (const Bucket& b : recent_) {
    if (b.second < 0 || second - b.second >= static_cast<int64_t>(kBuckets)) continue;
    v.recent_delivered += b.delivered;
    v.recent_failed += b.failed;
  }
  return v;
}

}  // namespace weir

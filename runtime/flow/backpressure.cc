#include "runtime/flow/backpressure.h"

#include <pthread.h>

#include <algorithm>
#include <cmath>

#include "runtime/base/log.h"

namespace weir {

int64_t stored_size(std::string_view subject, std::string_view data, const Headers& headers) {
  // "NATS/1.0\r\n" + "Key: value\r\n"… + "\r\n", plus the file store's per-record
  // overhead (22 bytes of header, 8 of checksum) and some slack.
  int64_t h = 12;
  for (const auto& [k, v] : headers) h += static_cast<int64_t>(k.size() + v.size() + 4);
  return static_cast<int64_t>(subject.size() + data.size()) + h + 64;
}

void FlowBacklog::reject() {
  if (metrics_) metrics_->rejected.fetch_add(1, std::memory_order_relaxed);
}

bool FlowBacklog::admit(int64_t bytes, std::string* why) {
  if (options_.max_pending > 0 && process_pending_.load(std::memory_order_relaxed) >= options_.max_pending) {
    reject();
    if (why) *why = "too many events waiting to be stored (" + std::to_string(options_.max_pending) + " pending)";
    return false;
  }
  if (options_.max_bytes > 0 && backlog_bytes() + bytes > options_.max_bytes) {
    reject();
    if (why) *why = "flow backlog full (" + std::to_string(options_.max_bytes) + " bytes not yet delivered)";
    return false;
  }
  if (int64_t bound = delay_bound(); bound > 0 && backlog_messages() + 1 > bound) {
    reject();
    if (why) {
      *why = "flow backlog over its delay bound (" + std::to_string(options_.max_delay.count()) +
             " ms at the current delivery rate: " + std::to_string(bound) + " messages)";
    }
    return false;
  }
  if (options_.max_messages > 0 && backlog_messages() + 1 > options_.max_messages) {
    reject();
    if (why) *why = "flow backlog full (" + std::to_string(options_.max_messages) + " events not yet delivered)";
    return false;
  }
  // Several threads may pass the checks at once and overshoot by one event each; the
  // stream keeps room for that (the bound is below the stream size, ADR 0080).
  process_pending_.fetch_add(1, std::memory_order_relaxed);
  inflight_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  inflight_msgs_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool FlowBacklog::full(std::string* why) const {
  if (options_.max_bytes > 0 && backlog_bytes() >= options_.max_bytes) {
    if (why) *why = "flow backlog full (" + std::to_string(options_.max_bytes) + " bytes not yet delivered)";
    return true;
  }
  if (options_.max_messages > 0 && backlog_messages() >= options_.max_messages) {
    if (why) *why = "flow backlog full (" + std::to_string(options_.max_messages) + " events not yet delivered)";
    return true;
  }
  return false;
}

bool FlowBacklog::has_room(int64_t bytes, std::string* why) const {
  if (options_.max_bytes > 0 && backlog_bytes() + bytes > options_.max_bytes) {
    if (why) *why = "flow backlog full (" + std::to_string(options_.max_bytes) + " bytes not yet delivered)";
    return false;
  }
  if (options_.max_messages > 0 && backlog_messages() + 1 > options_.max_messages) {
    if (why) *why = "flow backlog full (" + std::to_string(options_.max_messages) + " events not yet delivered)";
    return false;
  }
  return true;
}

void FlowBacklog::add_stored(int64_t bytes) {
  stored_bytes_.fetch_add(bytes, std::memory_order_acq_rel);
  stored_msgs_.fetch_add(1, std::memory_order_acq_rel);
}

void FlowBacklog::completed(int64_t bytes, bool stored) {
  // Stored before leaving in flight: a check in between counts it twice, never zero times.
  if (stored) {
    stored_bytes_.fetch_add(bytes, std::memory_order_acq_rel);
    stored_msgs_.fetch_add(1, std::memory_order_acq_rel);
  }
  inflight_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  inflight_msgs_.fetch_sub(1, std::memory_order_relaxed);
  process_pending_.fetch_sub(1, std::memory_order_relaxed);
}

void FlowBacklog::refreshed(int64_t stream_bytes, int64_t stream_msgs, int64_t stored_bytes_before,
                            int64_t stored_msgs_before, uint64_t last_seq, std::chrono::steady_clock::time_point at) {
  // Drain rate: what left the stream between two reads = what it held + what was added
  // (the growth of its last sequence, by any writer: ingress, flow outputs, peers) − what
  // it holds now. Smoothed over refreshes; a window that removed nothing from a non-empty
  // stream means the flow is stalled (sinks down, paused, gated), and then only the size
  // bounds apply. Before the first rate, and after an idle window, the floor applies.
  // Each event is several stream messages over its life (its `.in`, then one `.out.<sink>`
  // per output), each leaving at its own hop; the bound divides by that count, measured as
  // messages added per event this process ingested (peers' events only raise it: the
  // bound errs tight). So `bound / rate` approximates the delay an event admitted now
  // waits, whichever hop is the slow one.
  if (have_last_ && last_seq >= last_seq_ && at > last_at_) {
    const double secs = std::chrono::duration<double>(at - last_at_).count();
    const int64_t added = static_cast<int64_t>(last_seq - last_seq_);
    const int64_t removed = std::max<int64_t>(0, last_msgs_ + added - stream_msgs);
    if (stored_msgs_before > 0 && added > 0) {
      const double m = std::clamp(static_cast<double>(added) / static_cast<double>(stored_msgs_before), 1.0, 64.0);
      msgs_per_event_ = 0.5 * msgs_per_event_ + 0.5 * m;
    }
    const double rate = static_cast<double>(removed) / secs;
    const double prev = drain_rate_.load(std::memory_order_relaxed);
    const double smoothed = removed == 0 ? 0.0 : (prev == 0 ? rate : 0.5 * prev + 0.5 * rate);
    drain_rate_.store(smoothed, std::memory_order_relaxed);
    int64_t bound = 0;
    if (options_.max_delay.count() > 0) {
      if (smoothed > 0) {
        const double per_delay = smoothed * std::chrono::duration<double>(options_.max_delay).count() / msgs_per_event_;
        bound = std::max<int64_t>(kMinDelayBound, static_cast<int64_t>(per_delay));
      } else if (stream_msgs == 0) {
        bound = kMinDelayBound;  // idle: the next burst meets the floor until its rate is known
      }                          // else stalled: the size bounds alone
    }
    delay_bound_.store(bound, std::memory_order_relaxed);
  }
  have_last_ = true;
  last_msgs_ = stream_msgs;
  last_seq_ = last_seq;
  last_at_ = at;
  // What was stored before the request left is in the stream state now; what was stored
  // after may or may not be, so it stays counted on top.
  base_bytes_.store(stream_bytes, std::memory_order_relaxed);
  base_msgs_.store(stream_msgs, std::memory_order_relaxed);
  stored_bytes_.fetch_sub(stored_bytes_before, std::memory_order_acq_rel);
  stored_msgs_.fetch_sub(stored_msgs_before, std::memory_order_acq_rel);
  if (metrics_) {
    metrics_->backlog_bytes.store(backlog_bytes(), std::memory_order_relaxed);
    metrics_->backlog_events.store(backlog_messages(), std::memory_order_relaxed);
    metrics_->backlog_delay_bound.store(delay_bound(), std::memory_order_relaxed);
    metrics_->backlog_drain_rate.store(std::llround(drain_rate()), std::memory_order_relaxed);
    metrics_->backlog_max_bytes.store(options_.max_bytes, std::memory_order_relaxed);
    metrics_->backlog_max_events.store(options_.max_messages, std::memory_order_relaxed);
  }
}

int64_t FlowBacklog::backlog_bytes() const {
  return base_bytes_.load(std::memory_order_relaxed) + stored_bytes_.load(std::memory_order_relaxed) +
         inflight_bytes_.load(std::memory_order_relaxed);
}

int64_t FlowBacklog::backlog_messages() const {
  return base_msgs_.load(std::memory_order_relaxed) + stored_msgs_.load(std::memory_order_relaxed) +
         inflight_msgs_.load(std::memory_order_relaxed);
}

// ---- BacklogMonitor --------------------------------------------------------------------

BacklogMonitor::BacklogMonitor(Bus& bus, Metrics& metrics, BackpressureOptions options)
    : bus_(bus), options_(options), pending_(metrics.ingress_pending) {
  thread_ = std::thread([this] { loop(); });
  pthread_setname_np(thread_.native_handle(), "weir-backlog");
}

BacklogMonitor::~BacklogMonitor() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<FlowBacklog> BacklogMonitor::watch(const std::string& stream, StageMetrics* metrics) {
  auto b = std::make_shared<FlowBacklog>(stream, options_, pending_, metrics);
  refresh(*b);
  MutexLock lock(mu_);
  watched_.push_back(b);
  return b;
}

void BacklogMonitor::refresh(FlowBacklog& b) {
  int64_t before_bytes = b.stored_marker();
  int64_t before_msgs = b.stored_msgs_marker();
  // A second at most: a refresh is skipped when NATS is slow, and a stop waits for one
  // request at most (tests/integration/shutdown_test.cc, frozen nats-server).
  auto st = bus_.stream_state(b.stream(), std::chrono::milliseconds(1000));
  if (!st) {
    // Keep the last state: what this process stores meanwhile is still counted on top.
    log::debug("backlog refresh failed", {{"stream", b.stream()}, {"error", st.status().str()}});
    return;
  }
  b.refreshed(st->bytes, st->messages, before_bytes, before_msgs, st->last_seq, std::chrono::steady_clock::now());
}

void BacklogMonitor::loop() {
  UniqueLock lock(mu_);
  while (!stopping_) {
    lock.wait_for(cv_, options_.interval, [&]() REQUIRES(mu_) { return stopping_; });
    if (stopping_) break;
    std::vector<std::shared_ptr<FlowBacklog>> now;
    for (auto it = watched_.begin(); it != watched_.end();) {
      if (auto b = it->lock()) {
        now.push_back(std::move(b));
        ++it;
      } else {
        it = watched_.erase(it);
      }
    }
    lock.unlock();
    // A disconnected bus would make each request wait for its timeout; skip the round.
    if (bus_.connected()) {
      for (auto& b : now) {
        if (stopping()) break;
        refresh(*b);
      }
    }
    now.clear();
    lock.lock();
  }
}

}  // namespace weir

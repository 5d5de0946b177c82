#include "runtime/backpressure.h"

#include <pthread.h>

#include "runtime/log.h"

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
                            int64_t stored_msgs_before) {
  // What was stored before the request left is in the stream state now; what was stored
  // after may or may not be, so it stays counted on top.
  base_bytes_.store(stream_bytes, std::memory_order_relaxed);
  base_msgs_.store(stream_msgs, std::memory_order_relaxed);
  stored_bytes_.fetch_sub(stored_bytes_before, std::memory_order_acq_rel);
  stored_msgs_.fetch_sub(stored_msgs_before, std::memory_order_acq_rel);
  if (metrics_) {
    metrics_->backlog_bytes.store(backlog_bytes(), std::memory_order_relaxed);
    metrics_->backlog_events.store(backlog_messages(), std::memory_order_relaxed);
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
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<FlowBacklog> BacklogMonitor::watch(const std::string& stream, StageMetrics* metrics) {
  auto b = std::make_shared<FlowBacklog>(stream, options_, pending_, metrics);
  refresh(*b);
  std::lock_guard lock(mu_);
  watched_.push_back(b);
  return b;
}

void BacklogMonitor::refresh(FlowBacklog& b) {
  int64_t before_bytes = b.stored_marker();
  int64_t before_msgs = b.stored_msgs_marker();
  auto st = bus_.stream_state(b.stream());
  if (!st) {
    // Keep the last state: what this process stores meanwhile is still counted on top.
    log::debug("backlog refresh failed", {{"stream", b.stream()}, {"error", st.status().str()}});
    return;
  }
  b.refreshed(st->bytes, st->messages, before_bytes, before_msgs);
}

void BacklogMonitor::loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, options_.interval, [&] { return stopping_; });
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
      for (auto& b : now) refresh(*b);
    }
    now.clear();
    lock.lock();
  }
}

}  // namespace weir

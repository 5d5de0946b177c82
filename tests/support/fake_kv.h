// FakeKv: an in-memory KvStore with JetStream KV's semantics (one revision sequence for the
// whole store, put-if-absent over delete markers, compare-and-set, conditional delete),
// plus what tests need to make it misbehave.
//
// Contract:
// - Thread-safe. Hooks and watch callbacks run without the store's lock held, so they may
//   call back into the store (another lease ticking while "this request is in flight").
// - `set_fault` decides per request: apply normally, fail before applying (unavailable), or
//   apply and lose the reply (timeout: the caller cannot know it happened).
// - `before_apply` / `after_apply` run around the moment a request takes effect: tests
//   advance the ManualClock there to model request and reply latency.
// - Every applied write is appended to `log()`; tests that drive leases by hand deliver
//   those events themselves (with delays and drops). `watch()` delivers them for real,
//   asynchronously, on one thread per watch (for Singleton tests).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cluster/clock.h"
#include "runtime/nats/kv.h"
#include "runtime/base/thread_annotations.h"

namespace weir::cluster::testing {

class FakeKv final : public KvStore {
 public:
  enum class Fault { kNone, kFailBefore, kLoseReply };

  using FaultFn = std::function<Fault(const char* op, const std::string& key)>;
  // Fault injection; may be changed while other threads use the store.
  void set_fault(FaultFn f) {
    MutexLock lock(hooks_mu_);
    fault_ = std::move(f);
  }
  // Latency hooks: set before the store is shared between threads (single-threaded tests).
  std::function<void()> before_apply;
  std::function<void()> after_apply;
  // When set, each key remembers when its last entry was written, for expire_older_than.
  const Clock* clock = nullptr;

  ~FakeKv() override = default;

  Result<uint64_t> create(const std::string& key, std::string_view value) override {
    return write("create", key, [&](Slot* slot) REQUIRES(mu_) -> Result<uint64_t> {
      if (slot->exists && !slot->deleted)
        return Status::conflict("wrong last sequence: " + std::to_string(slot->revision));
      return put_locked(key, slot, value);
    });
  }

  Result<uint64_t> update(const std::string& key, std::string_view value, uint64_t last) override {
    return write("update", key, [&](Slot* slot) REQUIRES(mu_) -> Result<uint64_t> {
      const uint64_t actual = slot->exists ? slot->revision : 0;
      if (actual != last) return Status::conflict("wrong last sequence: " + std::to_string(actual));
      return put_locked(key, slot, value);
    });
  }

  Status erase(const std::string& key, uint64_t last = 0) override {
    Result<uint64_t> r = write("erase", key, [&](Slot* slot) REQUIRES(mu_) -> Result<uint64_t> {
      const uint64_t actual = slot->exists ? slot->revision : 0;
      if (last != 0 && actual != last) return Status::conflict("wrong last sequence: " + std::to_string(actual));
      slot->exists = true;
      slot->deleted = true;
      slot->value.clear();
      slot->revision = ++sequence_;
      if (clock != nullptr) slot->written_at = clock->now();
      record_locked(KvEvent{KvEvent::Kind::kDelete, key, "", slot->revision});
      return slot->revision;
    });
    return r.status();
  }

  Result<KvEntry> get(const std::string& key) override {
    if (fault_for("get", key) == Fault::kFailBefore) return Status::unavailable("fake: get failed");
    MutexLock lock(mu_);
    auto it = slots_.find(key);
    if (it == slots_.end() || !it->second.exists || it->second.deleted) return Status::not_found("fake: no key " + key);
    return KvEntry{key, it->second.value, it->second.revision};
  }

  Result<std::unique_ptr<KvWatch>> watch(const std::string& key,
                                         std::function<void(const KvEvent&)> on_event) override {
    auto watch = std::make_unique<Watch>(this, key, std::move(on_event));
    {
      MutexLock lock(mu_);
      auto it = slots_.find(key);
      if (it != slots_.end() && it->second.exists) {
        const Slot& s = it->second;
        watch->push(KvEvent{s.deleted ? KvEvent::Kind::kDelete : KvEvent::Kind::kPut, key, s.value, s.revision});
      }
      watches_.insert(watch.get());
    }
    watch->start();
    return std::unique_ptr<KvWatch>(std::move(watch));
  }

  // Every applied write, in revision order.
  std::vector<KvEvent> log() const {
    MutexLock lock(mu_);
    return log_;
  }
  size_t log_size() const {
    MutexLock lock(mu_);
    return log_.size();
  }
  KvEvent log_at(size_t i) const {
    MutexLock lock(mu_);
    return log_.at(i);
  }
  // Removes the key without an event, as bucket TTL expiry does.
  void expire(const std::string& key) {
    MutexLock lock(mu_);
    slots_.erase(key);
  }
  // Removes the key (no event) when its last entry is at least `age` old, as the bucket
  // TTL (MaxAge) does on the server. True when it expired.
  bool expire_older_than(const std::string& key, Clock::Duration age) {
    MutexLock lock(mu_);
    auto it = slots_.find(key);
    if (it == slots_.end() || clock == nullptr || clock->now() - it->second.written_at < age) return false;
    slots_.erase(it);
    return true;
  }
  uint64_t revision_of(const std::string& key) const {
    MutexLock lock(mu_);
    auto it = slots_.find(key);
    return it == slots_.end() ? 0 : it->second.revision;
  }
  size_t watch_count() const {
    MutexLock lock(mu_);
    return watches_.size();
  }

 private:
  struct Slot {
    bool exists = false;
    bool deleted = false;
    std::string value;
    uint64_t revision = 0;
    Clock::TimePoint written_at{};
  };

  class Watch final : public KvWatch {
   public:
    Watch(FakeKv* kv, std::string key, std::function<void(const KvEvent&)> cb)
        : kv_(kv), key_(std::move(key)), cb_(std::move(cb)) {}
    ~Watch() override {
      {
        MutexLock lock(kv_->mu_);
        kv_->watches_.erase(this);
      }
      {
        MutexLock lock(mu_);
        stop_ = true;
      }
      cv_.notify_all();
      if (thread_.joinable()) thread_.join();
    }
    void start() {
      thread_ = std::thread([this] {
        UniqueLock lock(mu_);
        for (;;) {
          lock.wait(cv_, [this]() REQUIRES(mu_) { return stop_ || !queue_.empty(); });
          if (stop_) return;
          KvEvent e = std::move(queue_.front());
          queue_.pop_front();
          lock.unlock();
          cb_(e);
          lock.lock();
        }
      });
    }
    void push(KvEvent e) {
      {
        MutexLock lock(mu_);
        queue_.push_back(std::move(e));
      }
      cv_.notify_all();
    }
    const std::string& key() const { return key_; }

   private:
    FakeKv* kv_;
    std::string key_;
    std::function<void(const KvEvent&)> cb_;
    Mutex mu_;
    std::condition_variable cv_;
    std::deque<KvEvent> queue_ GUARDED_BY(mu_);
    bool stop_ GUARDED_BY(mu_) = false;
    std::thread thread_;
  };

  Fault fault_for(const char* op, const std::string& key) {
    FaultFn f;
    {
      MutexLock lock(hooks_mu_);
      f = fault_;
    }
    return f ? f(op, key) : Fault::kNone;
  }

  template <typename Apply>
  Result<uint64_t> write(const char* op, const std::string& key, Apply apply) {
    const Fault f = fault_for(op, key);
    if (f == Fault::kFailBefore) return Status::unavailable(std::string("fake: ") + op + " failed");
    if (before_apply) before_apply();
    Result<uint64_t> result = Status::internal("unset");
    {
      MutexLock lock(mu_);
      result = apply(&slots_[key]);
      if (!slots_[key].exists) slots_.erase(key);
    }
    if (after_apply) after_apply();
    if (f == Fault::kLoseReply) return Status::timeout(std::string("fake: ") + op + " reply lost");
    return result;
  }

  Result<uint64_t> put_locked(const std::string& key, Slot* slot, std::string_view value) REQUIRES(mu_) {
    slot->exists = true;
    slot->deleted = false;
    slot->value = std::string(value);
    slot->revision = ++sequence_;
    if (clock != nullptr) slot->written_at = clock->now();
    record_locked(KvEvent{KvEvent::Kind::kPut, key, slot->value, slot->revision});
    return slot->revision;
  }

  void record_locked(const KvEvent& e) REQUIRES(mu_) {
    log_.push_back(e);
    for (Watch* w : watches_) {
      if (w->key() == e.key) w->push(e);
    }
  }

  Mutex hooks_mu_;
  FaultFn fault_ GUARDED_BY(hooks_mu_);
  mutable Mutex mu_;
  std::map<std::string, Slot> slots_ GUARDED_BY(mu_);
  uint64_t sequence_ GUARDED_BY(mu_) = 0;
  std::vector<KvEvent> log_ GUARDED_BY(mu_);
  std::set<Watch*> watches_ GUARDED_BY(mu_);
};

}  // namespace weir::cluster::testing

// Singleton: runs a source on exactly one instance of a cluster — the one holding its
// lease (cluster/lease.h, docs/adr/0040-leases.md).
//
// A Singleton is itself a weir::Source: the runtime wraps a singleton source (timer, poll,
// exec) in it when the instance is clustered. `start` returns at once; a driver thread
// then drives the Lease with the clock and the key's watch events. On winning the lease
// it makes a fresh inner source with the factory and starts it (Source's lifecycle is one
// start and one stop, and a term may end and another begin); on losing it — a failed
// renewal, self-expiry, another writer — it stops the inner source at once.
//
// Fencing: the inner source gets a SourceContext whose `fence` gives the lease's token
// (nullopt once the lease is not held, measured on the clock at the call) and whose
// `ingest` refuses events while the lease is not held and stamps `Weir-Fence: <token>`
// on every event it lets through. So an inner source that is slow to stop still cannot
// emit on a lease that may have been taken over.
//
// Ownership: borrows `kv` and `clock` (they must outlive it); owns the inner source, the
// watch and the driver thread. Threading: start/stop/abandon from one controlling thread;
// fencing_token/running from any thread. The factory, the inner source's start and stop
// run on the driver thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "cluster/clock.h"
#include "runtime/nats/kv.h"
#include "cluster/lease.h"
#include "runtime/ports/source.h"
#include "runtime/base/thread_annotations.h"

namespace weir::cluster {

inline constexpr const char* kFenceHeader = "Weir-Fence";

struct SingletonOptions {
  std::string key;    // the lease key, e.g. "timer.<flow>" ([A-Za-z0-9_=/.-]+)
  std::string owner;  // this instance's id, written into the lease for status and logs
  LeaseOptions lease;
  // After the inner source failed to start: step down so another instance may try, and
  // do not campaign again for this long.
  std::chrono::milliseconds restart_pause{1000};
};

using SourceFactory = std::function<std::unique_ptr<Source>()>;

class Singleton final : public Source {
 public:
  Singleton(KvStore& kv, SingletonOptions options, SourceFactory factory, const Clock& clock = Clock::steady());
  ~Singleton() override;  // stop() when still running
  Singleton(const Singleton&) = delete;
  Singleton& operator=(const Singleton&) = delete;

  // Validates the options, starts the watch and the driver thread. The context must
  // outlive the singleton (the inner sources get a copy with `fence` and `ingest` set).
  Status start(SourceContext& context) override;
  // Graceful: stops the inner source, then releases the lease with a conditional delete so
  // a standby takes over at once. Idempotent.
  void stop() override;
  // As a crash would: stops the inner source and the threads without touching the key, so
  // standbys take over only after the lease ttl. For tests and fatal paths. Idempotent.
  void abandon();
  bool singleton() const override { return true; }

  std::optional<uint64_t> fencing_token() const { return lease_.token(); }
  bool running() const { return inner_running_.load(std::memory_order_acquire); }
  // True once the key's watch is established (a release is then noticed at once).
  bool watching() const { return watching_.load(std::memory_order_acquire); }
  // How many times an inner source was started (terms that ran).
  uint64_t starts() const { return starts_.load(std::memory_order_acquire); }
  const std::string& key() const { return options_.key; }

 private:
  class FencedIngest;

  void run();
  void sync_inner();
  void stop_inner();
  void ensure_watch();
  void check_watch();
  void shutdown(bool release);

  KvStore& kv_;
  const SingletonOptions options_;
  const SourceFactory factory_;
  const Clock& clock_;
  Lease lease_;

  SourceContext inner_context_;
  std::unique_ptr<FencedIngest> fenced_ingest_;
  std::unique_ptr<Source> inner_;  // driver thread only
  std::atomic<bool> inner_running_{false};
  std::atomic<uint64_t> starts_{0};
  std::unique_ptr<KvWatch> watch_;  // driver thread while running
  std::atomic<bool> watching_{false};
  std::atomic<uint64_t> watched_revision_{0};              // newest revision the watch delivered
  std::optional<Clock::TimePoint> watch_disagrees_since_;  // driver thread: when they began to disagree
  Clock::TimePoint watch_retry_at_{};

  Mutex mu_;
  std::condition_variable wake_;
  bool stop_requested_ GUARDED_BY(mu_) = false;
  std::optional<KvEvent> pending_event_ GUARDED_BY(mu_);  // the newest one is all the lease needs
  std::thread driver_;
  bool started_ = false;  // controlling thread
};

}  // namespace weir::cluster

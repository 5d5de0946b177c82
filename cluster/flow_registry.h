// FlowRegistry: flow versions in a cluster (the method and its safety argument:
// docs/adr/0042-version-registry.md).
//
// The flows bucket (no TTL) holds, per flow:
//   <flow>.v<N>    {version, hash, text, deployed_by, deployed_at}   written once
//   <flow>.latest  {version}                                           the highest N
//   <flow>.active  {version, epoch, phase, target, stack, history, promoted_by, promoted_at}
// The members bucket (bucket TTL) holds `m.<instance>` (renewed by heartbeat()) and the
// pause reports `p.<flow>.<epoch>.<instance>` of the promote barrier.
//
// Promote / rollback: CAS `active` to phase "pausing" (new epoch, target N); every
// instance pauses the flow (the batch in hand finished, published, acked) and reports;
// once every live member has reported, CAS `active` to version N, phase "active"; each
// instance then runs N. Past the barrier timeout the promote is aborted: `active` goes
// back to the old version (phase "active", same epoch) and the answer is kUnavailable.
//
// Contract:
// - Does not own the stores; they and every FlowControl given to follow() must outlive
//   stop(). The destructor calls stop().
// - deploy/promote/rollback/describe/attach: any thread (the admin worker); they block on
//   store round trips and, for promote/rollback, on the barrier (≤ barrier_timeout).
// - FlowControl is called from the flow's watch thread and from the heartbeat thread,
//   never concurrently for one flow (a mutex per flow).
// - Watch events are hints (kv.h): each one is confirmed by a get from the stream leader,
//   and the heartbeat thread re-reads the records every few renewals.
// - An instance whose heartbeat has not been renewed for 2/3 of the member TTL pauses
//   every flow it follows (fenced) until a renewal succeeds: a promoter stops waiting for
//   it once its member key expires, so by then it must not be handling anything.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster/clock.h"
#include "runtime/ports/cluster_hooks.h"
#include "runtime/nats/kv.h"
#include "runtime/base/thread_annotations.h"
#include "runtime/base/wall_clock.h"

namespace weir::cluster {

struct RegistryOptions {
  std::string instance;                             // key-safe: [A-Za-z0-9_-]+
  std::chrono::milliseconds barrier_timeout{2000};  // promote: every live member paused
  std::chrono::milliseconds pause_timeout{1500};    // an instance: the batch in hand done
  std::chrono::milliseconds poll{2};                // barrier: how often reports are read
  std::chrono::milliseconds relist{100};            // barrier: how often members are listed
  std::chrono::milliseconds heartbeat{300};         // member key renewal
  std::chrono::milliseconds member_ttl{1000};       // the members bucket's TTL
  size_t history = 20;                              // audit entries and rollback depth kept
  // Where time comes from (tests pass a ManualClock and a fixed wall clock). `clock`
  // measures: member freshness, fencing, the barrier's deadline and barrier_ms; it must
  // outlive the registry. `wall_ms` stamps what is stored: deployed_at, promoted_at, the
  // history's `at`, the member key's `at`.
  const Clock* clock = &Clock::steady();
  std::function<int64_t()> wall_ms = weir::wall_ms;
};

// The `<flow>.active` record.
struct ActiveRecord {
  int64_t version = 0;
  uint64_t epoch = 0;
  std::string phase = "active";                      // "active" | "pausing"
  int64_t target = 0;                                // pausing: the version being switched to
  std::vector<int64_t> stack;                        // earlier active versions, most recent last (rollback)
  nlohmann::json history = nlohmann::json::array();  // audit: {action, from, to, by, at, ...}
  std::string promoted_by;
  int64_t promoted_at = 0;  // ms since the epoch

  nlohmann::json to_json() const;
  static Result<ActiveRecord> parse(const std::string& text);
};

class FlowRegistry {
 public:
  // Live instances (ids as in RegistryOptions::instance), this one included.
  using LiveMembers = std::function<Result<std::vector<std::string>>()>;

  FlowRegistry(KvStore& flows, KvStore& members, LiveMembers live, RegistryOptions options);
  ~FlowRegistry();
  FlowRegistry(const FlowRegistry&) = delete;
  FlowRegistry& operator=(const FlowRegistry&) = delete;

  // Renews this instance's member key once (creates it the first time).
  Status heartbeat();
  // Runs heartbeat() every options.heartbeat on a thread of its own, fencing on failure.
  void start_heartbeat();
  // Stops the heartbeat and every watch, and removes the member key.
  void stop();

  Result<ActiveFlow> attach(const std::string& flow, const std::string& text, const std::string& hash);
  Status follow(const std::string& flow, FlowControl* control);
  // `text` was validated by the caller; `by` names who deployed (audit).
  ControlResult deploy(const std::string& flow, const std::string& text, const std::string& hash,
                       const std::string& by);
  // `expected_active` != 0: refuse (kConflict) unless that version is the active one.
  ControlResult promote(const std::string& flow, int64_t version, const std::string& by, int64_t expected_active = 0);
  ControlResult rollback(const std::string& flow, const std::string& by);
  nlohmann::json describe(const std::string& flow);
  // Calls `on_flow(name)` for each flow that has an active record — those there are now,
  // then each change of one (a flow activated for the first time included), on the watch's
  // thread; the caller ignores flows it runs already (ADR 0121). Once; stop() ends it.
  Status watch_flows(std::function<void(const std::string& flow)> on_flow);

  // The version this instance runs, 0 when it does not follow the flow or is paused.
  int64_t running_version(const std::string& flow) const;
  bool fenced() const { return fenced_.load(); }
  // True until 2/3 of the member TTL after the last renewal was sent (the key cannot have
  // expired yet). Lock-free: stages ask before each batch.
  bool member_fresh() const {
    return options_.clock->now().time_since_epoch().count() < fresh_until_.load(std::memory_order_acquire);
  }

  static std::string version_key(const std::string& flow, int64_t v) { return flow + ".v" + std::to_string(v); }
  static std::string latest_key(const std::string& flow) { return flow + ".latest"; }
  static std::string active_key(const std::string& flow) { return flow + ".active"; }
  static std::string member_key(const std::string& instance) { return "m." + instance; }
  static std::string pause_key(const std::string& flow, uint64_t epoch, const std::string& instance) {
    return "p." + flow + "." + std::to_string(epoch) + "." + instance;
  }

 private:
  struct Followed {
    std::string flow;
    FlowControl* control = nullptr;
    std::unique_ptr<KvWatch> watch;
    mutable Mutex mu;                            // serialises apply() (watch thread vs heartbeat thread)
    int64_t running GUARDED_BY(mu) = 0;          // 0 while paused
    uint64_t reported_epoch GUARDED_BY(mu) = 0;  // the last epoch we paused for
    bool fenced GUARDED_BY(mu) = false;
    std::set<int64_t> loaded GUARDED_BY(mu);
    std::string last_error GUARDED_BY(mu);
  };

  Status renew();
  void apply(Followed& f, const ActiveRecord& r);
  // apply() with f.mu already held.
  void apply_locked(Followed& f, const ActiveRecord& r) REQUIRES(f.mu);
  // Safety net for a watch that went quiet (ADR 0040): re-reads each followed flow's
  // record and applies an "active" one. Never waits for a flow's lock.
  void reconcile();
  Status ensure_loaded(Followed& f, int64_t version) REQUIRES(f.mu);
  void fence_all();
  void unfence_all();
  // The pause barrier and the final write; `push` true for promote, false for rollback.
  ControlResult switch_to(const std::string& flow, const ActiveRecord& current, uint64_t revision, int64_t target,
                          const std::string& action, const std::string& by);
  // Waits until every live member reported pausing for `epoch`; the members still
  // missing at the deadline otherwise (empty = done). `reported` gets who did.
  std::vector<std::string> wait_barrier(const std::string& flow, uint64_t epoch, std::vector<std::string>* reported);

  KvStore& flows_;
  KvStore& members_;
  LiveMembers live_;
  RegistryOptions options_;

  mutable Mutex mu_;
  std::map<std::string, std::unique_ptr<Followed>> followed_ GUARDED_BY(mu_);  // entries never removed before stop()
  std::map<std::string, ActiveFlow> attached_ GUARDED_BY(mu_);                 // what attach() returned
  std::unique_ptr<KvWatch> flows_watch_ GUARDED_BY(mu_);                       // watch_flows()
  uint64_t member_revision_ = 0;                                               // heartbeat thread (and stop)
  std::atomic<bool> fenced_{false};
  std::atomic<Clock::Duration::rep> fresh_until_{0};  // options_.clock's ticks since its epoch
  Mutex hb_mu_;
  std::condition_variable hb_cv_;
  bool stopping_ GUARDED_BY(hb_mu_) = false;
  std::thread heartbeat_thread_;
};

}  // namespace weir::cluster

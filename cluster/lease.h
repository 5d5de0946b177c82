// Lease: the lease state machine behind cluster singletons (algorithm, safety argument and
// timings: docs/adr/0040-leases.md).
//
// One Lease per instance per key. It campaigns with Create, renews with compare-and-set
// Update on its last revision, releases with a conditional delete, and decides leadership
// only from the answers of its own Create/Update calls. A holder acts only while
// `now < valid_until` (the send time of its last successful write + `hold`); a standby that
// has seen a revision — confirmed by the stream leader — stay unchanged for `ttl` on its own
// clock takes the key over with a compare-and-set on that revision. Because ttl > hold, a
// taken-over holder has always stopped by itself first. Watch events are only hints.
//
// Threading: `tick`, `on_event`, `step_down`, `release`, `abandon`, `next_deadline`, `role`
// run on one driver thread (cluster::Singleton's, or a test's). They call the KvStore
// synchronously and never sleep. `on_event` must not be called from inside a KvStore call
// made by this lease (watch events are queued and handed over between calls).
// `token()` and `holding()` are safe from any thread: they are what an emitting source asks.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cluster/clock.h"
#include "runtime/nats/kv.h"
#include "runtime/base/status.h"
#include "runtime/base/thread_annotations.h"

namespace weir::cluster {

// The default lease TTL: 1 s is what meets the crash failover goal (≤ 1.5 s to the next
// tick); a 3 s lease would not — see docs/adr/0040-leases.md.
inline constexpr std::chrono::milliseconds kDefaultLeaseTtl{1000};

struct LeaseOptions {
  // A lease not renewed for `ttl` is free. It is the KV bucket's TTL (the server's backstop
  // when nobody watches) and the time a watching standby waits before a takeover.
  std::chrono::milliseconds ttl{kDefaultLeaseTtl};
  // The holder renews this often (from the send of its last successful write).
  std::chrono::milliseconds renew_interval{200};
  // The holder acts for at most this long after sending its last successful write. A
  // renewal may take up to hold - renew_interval before the holder stops by itself.
  std::chrono::milliseconds hold{800};
  // A standby tries Create this often (a missed delete event, an expired key).
  std::chrono::milliseconds campaign_interval{250};

  // The derived defaults for a TTL: renew ttl/5, hold 4/5 ttl, campaign ttl/4.
  static LeaseOptions for_ttl(std::chrono::milliseconds ttl);
  // 0 < renew_interval < hold < ttl and campaign_interval > 0.
  Status validate() const;
};

class Lease {
 public:
  enum class Role { kStandby, kLeader, kClosed };

  // `kv` and `clock` must outlive the lease. `owner` identifies this instance in the key's
  // value (for status pages and logs); it is never used to decide anything. The value also
  // carries a random nonce, which tells this lease's own writes from everyone else's.
  Lease(KvStore& kv, const Clock& clock, std::string key, std::string owner, LeaseOptions options);
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

  // Does whatever is due at clock.now(): self-expiry, renewal, takeover or campaign.
  void tick();
  // A watch event for the key, taken as a hint (a watch may read a diverged replica): a
  // delete makes a standby campaign at once; a newer put makes it read the key from the
  // stream leader (KvStore::get), and only that starts its takeover clock. A holder
  // ignores events: it decides from its own writes.
  void on_event(const KvEvent& event);
  // Leader: stops acting and deletes the key (conditional on its revision) so a standby
  // takes over at once; then stays a standby that does nothing for `pause`.
  void step_down(std::chrono::milliseconds pause);
  // Graceful end: a leader stops acting and deletes the key (conditional); then closed.
  // The caller stops whatever the lease guards before calling this.
  void release();
  // Ends without touching the key, as a crash would: others take over after the ttl.
  void abandon();

  // When `tick` next has something to do (never later than needed for self-expiry).
  Clock::TimePoint next_deadline() const;
  Role role() const { return role_; }
  // The revision of this lease's last successful write (0 before any).
  uint64_t revision() const { return revision_; }
  // The newest revision of the key this lease has confirmed (own write or get).
  uint64_t known_revision() const { return seen_revision_; }
  uint64_t acquisitions() const { return acquisitions_; }
  const std::string& key() const { return key_; }
  const LeaseOptions& options() const { return options_; }

  // Any thread. The fencing token — the revision with which this lease won its current
  // term — while leader and clock.now() < valid_until; nullopt otherwise. Later terms (of
  // any instance) always have larger tokens.
  std::optional<uint64_t> token() const;
  bool holding() const { return token().has_value(); }

 private:
  void campaign(Clock::TimePoint now);
  void take_over(Clock::TimePoint now);
  void renew(Clock::TimePoint now);
  void become_leader(uint64_t revision, Clock::TimePoint sent, const char* how);
  void lose(const std::string& reason);
  void refresh();
  bool takeover_due(Clock::TimePoint now) const;
  void observe(uint64_t revision, bool present, bool mine);
  void set_valid(bool valid, uint64_t term, Clock::TimePoint until);

  KvStore& kv_;
  const Clock& clock_;
  const std::string key_;
  const std::string owner_;
  const std::string nonce_;  // in every value this lease writes
  const std::string value_;
  const LeaseOptions options_;

  Role role_ = Role::kStandby;
  uint64_t acquisitions_ = 0;

  // What this lease knows of the key: from its own writes and from KvStore::get (the stream
  // leader), never from watch events alone.
  bool present_ = false;        // the last entry known is a put
  uint64_t seen_revision_ = 0;  // last revision known (put or delete marker); 0 = none
  bool seen_mine_ = false;      // seen_revision_ is a put this lease wrote (by its nonce)
  Clock::TimePoint seen_at_{};  // when seen_revision_ was first observed, this clock

  // Leader.
  uint64_t revision_ = 0;  // this lease's last successful write
  Clock::TimePoint renew_at_{};

  // Standby.
  Clock::TimePoint campaign_at_{};
  Clock::TimePoint retry_at_{};  // no takeover attempt before (after a failed one)
  Clock::TimePoint paused_until_{};

  // Read by token() from other threads.
  mutable Mutex mu_;
  bool valid_ GUARDED_BY(mu_) = false;
  uint64_t term_ GUARDED_BY(mu_) = 0;
  Clock::TimePoint valid_until_ GUARDED_BY(mu_){};
};

const char* to_string(Lease::Role role);

// The KV bucket for leases of one cluster and TTL: "weir_leases_<cluster>_<ttl ms>"
// (characters a bucket name cannot hold become '_'). One bucket per TTL because the
// bucket TTL is the lease TTL (server 2.9 has no per-key TTL).
std::string lease_bucket_name(std::string_view cluster, std::chrono::milliseconds ttl);

}  // namespace weir::cluster

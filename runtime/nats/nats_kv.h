// NatsKv: KvStore over a JetStream KV bucket with cnats 3.4 (server 2.9.10).
//
// Contract:
// - Does not own the natsConnection; it must outlive the NatsKv. Owns its jsCtx, its
//   kvStore and every watcher thread it starts.
// - `open` creates the bucket when missing (history 1, `ttl` as the bucket's MaxAge,
//   `replicas`), and refuses a bucket that exists with a different TTL: leases rely on
//   the bucket TTL (server 2.9 has no per-key TTL; one bucket per lease TTL).
// - Every request waits at most `timeout` (jsOptions.Wait); past it the answer is
//   `timeout` and the write may or may not have happened.
// - create/update/erase publish to `$KV.<bucket>.<key>` with the expected-last-subject-
//   sequence check; `get` reads the last message from the stream leader (not a direct
//   get, which replicas answer); `watch` uses kvStore_Watch (any replica: hints only).
// - Thread-safe: all methods from any thread. Each watch runs one thread of its own
//   that blocks in kvWatcher_Next and calls the callback.
// - Beyond KvStore, for the lookup tables (runtime/flow/kv_tables.h) and the cluster's member
//   list: unconditional put and delete, key listing, the last revision, purge, a bulk put
//   with async publishes, and a watcher read on the caller's own thread. They are the
//   only cnats KV calls in weir outside this file.
#pragma once

#include <nats/nats.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/nats/kv.h"
#include "runtime/base/thread_annotations.h"

namespace weir {

struct NatsKvOptions {
  std::string bucket;                      // [A-Za-z0-9_-]+
  std::chrono::milliseconds ttl{0};        // bucket MaxAge; 0 = entries never expire
  int replicas = 1;                        // 1..5; 3 on a three-node NATS cluster
  std::chrono::milliseconds timeout{500};  // per request
  bool memory_storage = false;             // file storage by default
  std::string description;                 // the bucket's, when this creates it
  bool create = true;                      // false: an absent bucket is not_found, nothing made
  int32_t max_value_size = 0;              // the bucket's, when this creates it; 0 = no limit
};

// A watch read on the caller's thread (KvTables folds a whole bucket in bursts and
// flushes on a quiet moment, which a callback cannot see). Destroying it stops it; it
// must not outlive its NatsKv.
class NatsKvWatcher {
 public:
  enum class Next {
    kEvent,        // *event holds the next put or delete (a purge reads as a delete)
    kInitialDone,  // once: every entry there at the start was given
    kIdle,         // nothing within `wait`
    kStopped,      // stop() was called
    kFailed,       // *error says why; the next call may succeed
  };
  explicit NatsKvWatcher(kvWatcher* watcher) : watcher_(watcher) {}
  ~NatsKvWatcher();
  NatsKvWatcher(const NatsKvWatcher&) = delete;
  NatsKvWatcher& operator=(const NatsKvWatcher&) = delete;

  Next next(std::chrono::milliseconds wait, KvEvent* event, Status* error);
  // Wakes a next() in progress (it answers kStopped); any thread.
  void stop();

 private:
  kvWatcher* watcher_;
  std::atomic<bool> stopped_{false};
};

class NatsKv final : public KvStore {
 public:
  static Result<std::unique_ptr<NatsKv>> open(natsConnection* connection, const NatsKvOptions& options);
  ~NatsKv() override;
  NatsKv(const NatsKv&) = delete;
  NatsKv& operator=(const NatsKv&) = delete;

  Result<uint64_t> create(const std::string& key, std::string_view value) override;
  Result<uint64_t> update(const std::string& key, std::string_view value, uint64_t last) override;
  Status erase(const std::string& key, uint64_t last = 0) override;
  Result<KvEntry> get(const std::string& key) override;
  Result<std::unique_ptr<KvWatch>> watch(const std::string& key, std::function<void(const KvEvent&)> on_event) override;

  const std::string& bucket() const { return bucket_; }

  // Writes `value` whatever the key holds → the new revision.
  Result<uint64_t> put(const std::string& key, std::string_view value);
  // Writes a delete marker whatever the key holds → its revision.
  Result<uint64_t> erase_returning_revision(const std::string& key);
  // The keys that start with `prefix`, the prefix removed (a scan: an ordered consumer per
  // call, not for hot paths). Waits at most `timeout`.
  Result<std::vector<std::string>> keys(const std::string& prefix, std::chrono::milliseconds timeout);
  // The bucket's last revision (its stream's last sequence; 0 when it never held one).
  Result<uint64_t> last_revision();
  // Removes the entries whose key matches `filter` (a key, or a pattern such as "g5.>" or
  // ">"); with `below` != 0 only those of revision < below.
  Status purge(const std::string& filter, uint64_t below = 0);
  // Puts every (key, value) with async publishes (at most 1024 unanswered), then waits up
  // to a minute for all their acks. Fails with the first refusal's text, or the publish
  // error; what was written stays (the caller purges). One at a time per NatsKv.
  Status put_all(const std::vector<std::pair<std::string, std::string>>& entries);
  // Watches `filter` (a key or a pattern, ">" for the whole bucket) from its current state.
  Result<std::unique_ptr<NatsKvWatcher>> watcher(const std::string& filter);

  struct AsyncErrors;  // put_all's refused publishes (nats_kv.cc)

 private:
  struct LastEntry {
    uint64_t revision = 0;
    bool deleted = false;  // a delete or purge marker
    std::string value;
  };

  NatsKv(natsConnection* connection, jsCtx* js, kvStore* kv, std::string bucket, std::chrono::milliseconds timeout);
  std::string subject_of(const std::string& key) const { return "$KV." + bucket_ + "." + key; }
  // A put with the server's expected-last-subject-sequence check (last 0: no message).
  Result<uint64_t> put_checked(const std::string& key, std::string_view value, uint64_t last, const char* what);
  // A delete marker; `last` != 0: only if the key's last revision is `last`.
  Result<uint64_t> delete_marker(const std::string& key, uint64_t last);
  // The key's last entry, read from the stream leader.
  Result<LastEntry> last_entry(const std::string& key);

  natsConnection* connection_;
  jsCtx* js_;
  kvStore* kv_;
  std::string bucket_;
  std::string stream_;
  std::chrono::milliseconds timeout_;
  Mutex put_all_mu_;  // one put_all at a time: they share async_errors_
  // Written by cnats' handler thread during a put_all; lives as long as this (a handler
  // call already running when put_all gives up must still find it).
  std::unique_ptr<AsyncErrors> async_errors_;
};

// True for a key JetStream KV accepts: [A-Za-z0-9_=/.-]{1,1024}, no leading, trailing or
// double dot (the key pattern of the NATS KV clients).
bool valid_kv_key(std::string_view key);
bool valid_kv_bucket(std::string_view bucket);

}  // namespace weir

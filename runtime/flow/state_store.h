// StateStore: the runtime's `SourceState` (runtime/ports/source.h) on the JetStream KV bucket
// `weir_state` (docs/adr/0071-source-state.md), through the one KV adapter, NatsKv
// (runtime/nats/nats_kv.h), that the cluster's leases and registry use too.
//
// Contract:
// - `open` borrows the natsConnection (the Bus's; it must outlive the store), and opens the
//   bucket with NatsKv: created when missing (history 1, no TTL, file storage, `replicas`),
//   set-up answers meaning "not yet" retried (ADR 0110). A bucket that exists is used as it is.
// - get() reads the key's last entry from the stream leader (NatsKv::get), so a failed-over
//   holder sees the write made just before.
// - put() is a compare-and-set against the revision this store last saw for the key:
//   update(last) after a get or put, create (put-if-absent) for a key never read or read
//   as absent. A lost race is `conflict` and nothing is written. After a put whose outcome
//   is unknown (timeout, disconnect) the next put first reads the key: if it holds the
//   value we tried to write, or is unchanged, the write goes ahead; otherwise conflict.
// - Every request waits at most `timeout`. Thread-safe: any method from any thread; the
//   revision map is guarded by a mutex that is never held across a request.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "runtime/nats/kv.h"
#include "runtime/ports/source.h"
#include "runtime/base/status.h"
#include "runtime/base/thread_annotations.h"

struct __natsConnection;

namespace weir {

struct StateStoreOptions {
  std::string bucket = "weir_state";        // [A-Za-z0-9_-]+
  int replicas = 1;                         // 1..5 (config.nats.replicas)
  std::chrono::milliseconds timeout{2000};  // per request
};

class StateStore final : public SourceState {
 public:
  static Result<std::unique_ptr<StateStore>> open(__natsConnection* connection, const StateStoreOptions& options = {});
  // Over any KvStore (tests may give a fake); `bucket` names it in messages.
  StateStore(std::unique_ptr<KvStore> kv, std::string bucket) : kv_(std::move(kv)), bucket_(std::move(bucket)) {}
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  Result<std::optional<std::string>> get(const std::string& key) override;
  Status put(const std::string& key, const std::string& value) override;

  const std::string& bucket() const { return bucket_; }

 private:
  // What this store knows of a key's latest revision.
  struct Known {
    uint64_t revision = 0;   // 0: read as absent
    bool uncertain = false;  // a put's outcome is unknown
    std::string attempted;   // the value that put tried to write
  };
  // The key's live entry: (revision, value); (0, nullopt) when absent or deleted.
  Result<std::pair<uint64_t, std::optional<std::string>>> read(const std::string& key);

  std::unique_ptr<KvStore> kv_;
  const std::string bucket_;
  Mutex mu_;
  std::map<std::string, Known> known_ GUARDED_BY(mu_);
};

// DeferredStateStore: a StateStore opened on a thread of its own (so that the bucket's
// requests overlap the rest of start-up instead of delaying the first 202). get/put wait
// for the open and answer its error if it failed; wait() gives the open's outcome (the
// runtime checks it before it says ready, so a bucket that cannot be opened still stops
// start-up). The destructor waits for the opener. Thread-safe.
class DeferredStateStore final : public SourceState {
 public:
  DeferredStateStore(__natsConnection* connection, const StateStoreOptions& options);
  ~DeferredStateStore() override;
  DeferredStateStore(const DeferredStateStore&) = delete;
  DeferredStateStore& operator=(const DeferredStateStore&) = delete;

  Status wait();
  Result<std::optional<std::string>> get(const std::string& key) override;
  Status put(const std::string& key, const std::string& value) override;

 private:
  // The open store, or why there is none; waits for the opener.
  Result<StateStore*> store();

  Mutex mu_;
  std::condition_variable cv_;
  bool done_ GUARDED_BY(mu_) = false;
  Status status_ GUARDED_BY(mu_);
  std::unique_ptr<StateStore> store_ GUARDED_BY(mu_);
  std::thread opener_;  // last: starts once the rest is built
};

}  // namespace weir

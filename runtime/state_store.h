// StateStore: the runtime's `SourceState` (runtime/source.h) on the JetStream KV bucket
// `weir_state` (docs/adr/0071-source-state.md).
//
// Contract:
// - Borrows the natsConnection (the Bus's); it must outlive the store. Owns its jsCtx and
//   kvStore handles.
// - `open` looks the bucket up and creates it when missing (history 1, no TTL, file
//   storage, `replicas`). A bucket that exists is used as it is.
// - get() reads the stream's last message for the key through the JetStream API (answered
//   by the stream leader), not through kvStore_Get, which may be served by a replica
//   (direct get) and so could miss the write a failed-over holder made just before.
// - put() is a compare-and-set against the revision this store last saw for the key:
//   kvStore_Update(last) after a get or put, kvStore_Create for a key never read or read
//   as absent. A lost race is `conflict` and nothing is written. After a put whose outcome
//   is unknown (timeout, disconnect) the next put first reads the key: if it holds the
//   value we tried to write, or is unchanged, the write goes ahead; otherwise conflict.
// - Every request waits at most `timeout`. Thread-safe: any method from any thread; the
//   revision map is guarded by a mutex that is never held across a request.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/source.h"
#include "runtime/status.h"

struct __natsConnection;
struct __jsCtx;
struct __kvStore;

namespace weir {

struct StateStoreOptions {
  std::string bucket = "weir_state";       // [A-Za-z0-9_-]+
  int replicas = 1;                        // 1..5 (config.nats.replicas)
  std::chrono::milliseconds timeout{2000}; // per request
};

class StateStore final : public SourceState {
 public:
  static Result<std::unique_ptr<StateStore>> open(__natsConnection* connection,
                                                  const StateStoreOptions& options = {});
  ~StateStore() override;
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  Result<std::optional<std::string>> get(const std::string& key) override;
  Status put(const std::string& key, const std::string& value) override;

  const std::string& bucket() const { return bucket_; }

 private:
  // What this store knows of a key's latest revision.
  struct Known {
    uint64_t revision = 0;           // 0: read as absent
    bool uncertain = false;          // a put's outcome is unknown
    std::string attempted;           // the value that put tried to write
  };
  // The stream's last message for `key`: (revision, value), value nullopt for a delete
  // marker; revision 0 and nullopt when the key has no message.
  Result<std::pair<uint64_t, std::optional<std::string>>> read(const std::string& key);

  StateStore(__jsCtx* js, __kvStore* kv, std::string bucket);
  __jsCtx* js_;
  __kvStore* kv_;
  const std::string bucket_, stream_, prefix_;
  std::mutex mu_;
  std::map<std::string, Known> known_;  // GUARDED_BY(mu_)
};

// True for a key JetStream KV accepts: [A-Za-z0-9_=/.-]+, no leading, trailing or double dot.
bool valid_state_key(std::string_view key);

}  // namespace weir

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
#pragma once

#include <nats/nats.h>

#include <chrono>
#include <memory>
#include <string>

#include "runtime/kv.h"

namespace weir {

struct NatsKvOptions {
  std::string bucket;                      // [A-Za-z0-9_-]+
  std::chrono::milliseconds ttl{0};        // bucket MaxAge; 0 = entries never expire
  int replicas = 1;                        // 1..5; 3 on a three-node NATS cluster
  std::chrono::milliseconds timeout{500};  // per request
  bool memory_storage = false;             // file storage by default
  std::string description;                 // the bucket's, when this creates it
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

 private:
  struct LastEntry {
    uint64_t revision = 0;
    bool deleted = false;  // a delete or purge marker
    std::string value;
  };

  NatsKv(jsCtx* js, kvStore* kv, std::string bucket)
      : js_(js), kv_(kv), bucket_(std::move(bucket)), stream_("KV_" + bucket_) {}
  std::string subject_of(const std::string& key) const { return "$KV." + bucket_ + "." + key; }
  // A put with the server's expected-last-subject-sequence check (last 0: no message).
  Result<uint64_t> put(const std::string& key, std::string_view value, uint64_t last, const char* what);
  // The key's last entry, read from the stream leader.
  Result<LastEntry> last_entry(const std::string& key);

  jsCtx* js_;
  kvStore* kv_;
  std::string bucket_;
  std::string stream_;
};

// True for a key JetStream KV accepts: [A-Za-z0-9_=/.-]{1,1024}, no leading, trailing or
// double dot (the key pattern of the NATS KV clients).
bool valid_kv_key(std::string_view key);
bool valid_kv_bucket(std::string_view bucket);

}  // namespace weir

// KvStore: the small key-value interface leases (and later the version registry) are
// built on. Production: NatsKv (runtime/nats/nats_kv.h) over a JetStream KV bucket; tests: an
// in-memory fake (tests/support/fake_kv.h).
//
// Contract:
// - Every key has a revision that only grows across the whole store (a JetStream stream
//   sequence), so a revision is usable as a fencing token.
// - `create`, `update` and a conditional `erase` are atomic on the server (the stream
//   leader); they are the only answers that may decide ownership.
// - `get` is answered by the stream leader: it may be a little old, never ahead of what
//   the leader has stored. Watch events are weaker: they may come from any replica, and a
//   replica can diverge (seen with nats-server 2.9 after a leader was killed: a watch
//   reported revisions two ahead of the leader's). Treat them as hints, confirm with `get`.
// - Errors are values: `conflict` when a put-if-absent or compare-and-set lost,
//   `not_found` from `get` for an absent or deleted key, `timeout` / `unavailable` when the
//   store did not answer (the write may or may not have happened).
// - Thread safety: every method may be called from any thread concurrently.
// - Watches: `on_event` runs on a thread owned by the store, one event at a time, never
//   inside a call the caller is making on the store. It first reports the key's current
//   state (if the key exists or has a delete marker), then every later put and delete.
//   Expiry of a key (bucket TTL) sends no event. Destroying the KvWatch stops it: once
//   the destructor returns, `on_event` is not running and will not be called again. A
//   watch must not outlive its store.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/base/status.h"

namespace weir {

struct KvEntry {
  std::string key;
  std::string value;
  uint64_t revision = 0;
};

struct KvEvent {
  enum class Kind { kPut, kDelete };
  Kind kind = Kind::kPut;
  std::string key;
  std::string value;      // empty for kDelete
  uint64_t revision = 0;  // of the put, or of the delete marker
};

class KvWatch {
 public:
  virtual ~KvWatch() = default;
};

class KvStore {
 public:
  virtual ~KvStore() = default;

  // Put-if-absent (an absent key or one whose last entry is a delete marker) → revision.
  virtual Result<uint64_t> create(const std::string& key, std::string_view value) = 0;
  // Compare-and-set: writes only if the key's last revision is `last` → new revision.
  virtual Result<uint64_t> update(const std::string& key, std::string_view value, uint64_t last) = 0;
  // Writes a delete marker. With `last` != 0 only if the key's last revision is still
  // `last` (conflict otherwise), so a holder never deletes a key someone else wrote since.
  virtual Status erase(const std::string& key, uint64_t last = 0) = 0;
  virtual Result<KvEntry> get(const std::string& key) = 0;
  virtual Result<std::unique_ptr<KvWatch>> watch(const std::string& key,
                                                 std::function<void(const KvEvent&)> on_event) = 0;
};

}  // namespace weir

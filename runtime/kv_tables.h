// KvTables: lookup tables kept in NATS KV (`tables: {t: {kv: NAME}}`, docs/adr/0120).
//
// Layout: one bucket `weir_table_<NAME>` per table (history 1). Rows live under
// `g<GEN>.<KEY>`, where GEN is an import generation and KEY the row key (as it is when it
// matches [A-Za-z0-9_-]+, else "=" + base64url of it); the key `current` holds
// {"generation": GEN}, the generation flows read. A bulk import writes every row under a
// new generation, then flips `current` with one compare-and-set: the switch is that one
// write, so a reader sees the old or the new table, never a mix. The old generation's rows
// are purged after the flip. A single put/delete writes into the current generation.
//
// Reading: one watcher thread per table (kvStore_Watch on the whole bucket) folds the
// entries into per-generation row maps and publishes a new immutable snapshot into the
// table's LiveTable (flows/tables.h) after each burst of changes to the current
// generation (batched for at most kBatch): a put reaches the running flows in well under a
// second, and lookups never wait for the watcher.
//
// Ownership: does not own the natsConnection (it must outlive this). Owns its jsCtx, its
// kvStore handles and the watcher threads; destroying it stops them (the LiveTables keep
// their last snapshot).
// Thread safety: every public method from any thread; admin calls are meant for the admin
// worker thread (they make NATS round trips).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "flows/tables.h"
#include "runtime/status.h"
#include "runtime/thread_annotations.h"

struct __natsConnection;
struct __jsCtx;
struct __kvStore;

namespace weir {

struct KvTablesOptions {
  int replicas = 1;
  size_t max_entries = 1'000'000;      // rows per table
  size_t max_value_bytes = 64 * 1024;  // one row, as JSON
  std::chrono::milliseconds timeout{5000};
};

class KvTables {
 public:
  using Reply = std::pair<int, nlohmann::json>;  // HTTP status, JSON body

  KvTables(__natsConnection* connection, KvTablesOptions options);
  ~KvTables();
  KvTables(const KvTables&) = delete;
  KvTables& operator=(const KvTables&) = delete;

  // Watches every live table the loaded flows name (creating missing buckets) and waits
  // until each has its first snapshot, at most `wait`; from then on a table first named
  // by a flow deployed later is watched as it is loaded.
  Status start(std::chrono::milliseconds wait);
  // Waits until every live table known has its first snapshot (a flow deployed at run
  // time starts once its tables are read), at most `wait`.
  Status wait_loaded(std::chrono::milliseconds wait);

  // Admin calls (docs/admin-api.md, "Tables").
  Reply list();
  Reply get(const std::string& table, const std::string& key);
  Reply put(const std::string& table, const std::string& key, const std::string& body);
  Reply erase(const std::string& table, const std::string& key);
  // `format`: "csv" or "json"; `key_column`: "" = the column a flow declared.
  Reply import(const std::string& table, const std::string& body, const std::string& format,
               const std::string& key_column);
  Reply export_rows(const std::string& table);

  // Prometheus lines: weir_table_entries, weir_table_generation, weir_table_updated_timestamp_seconds.
  void render_metrics(std::string& out) const;

  // The KV key of a row of generation `generation` (exposed for tests).
  static std::string row_key(uint64_t generation, std::string_view key);
  static bool parse_row_key(std::string_view kv_key, uint64_t* generation, std::string* key);

 private:
  class Watcher;

  // The bucket's handle; creates the bucket when `create`. not_found when absent.
  Result<__kvStore*> bucket(const std::string& table, bool create);
  Status watch(const std::shared_ptr<flows::LiveTable>& live);
  // The table's live copy, watched and loaded (waits at most `wait`).
  Result<std::shared_ptr<flows::LiveTable>> loaded(const std::string& table, std::chrono::milliseconds wait);
  // Waits (at most 2 s) until this instance's flows read import generation `gen`.
  bool wait_generation(const std::string& table, uint64_t gen);
  // Waits (at most 2 s) until this instance's snapshot holds KV revision `revision`.
  static bool wait_applied(const std::shared_ptr<flows::LiveTable>& live, uint64_t revision);
  // The generation in `current` and its revision (0, 0 when there is none).
  Result<std::pair<uint64_t, uint64_t>> current(__kvStore* kv);

  __natsConnection* connection_;
  KvTablesOptions options_;
  __jsCtx* js_ = nullptr;
  Mutex mu_;
  std::map<std::string, __kvStore*> buckets_ GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Watcher>> watchers_ GUARDED_BY(mu_);
  Mutex import_mu_;  // one import at a time in this process
};

}  // namespace weir

// KvTables: lookup tables kept in NATS KV (`tables: {t: {kv: NAME}}`, docs/adr/0120).
//
// Layout: one bucket `weir_table_<NAME>` per table (history 1). Rows live under
// `g<GEN>.<KEY>`, where GEN is an import generation and KEY the row key (as it is when it
// matches [A-Za-z0-9_-]+, else "=" + base64url of it); the key `current` holds
// {"generation": GEN}, the generation flows read. A bulk import writes every row under a
// new generation, then flips `current` with one compare-and-set: the switch is that one
// write, so a reader sees the old or the new table, never a mix. The old generation's rows
// are purged after the flip, by sequence (docs/adr/0226: a filtered purge made watchers skip
// the switch on nats-server 2.9.10). A single put/delete writes into the current generation.
//
// Reading: one watcher thread per table (a NatsKvWatcher on the whole bucket) folds the
// entries into per-generation row maps and publishes a new immutable snapshot into the
// table's LiveTable (flows/tables.h) after each burst of changes to the current
// generation (batched for at most kBatch): a put reaches the running flows in well under a
// second, and lookups never wait for the watcher.
//
// NATS: every KV call goes through NatsKv (runtime/nats/nats_kv.h), one per table's bucket.
//
// Ownership: does not own the natsConnection (it must outlive this). Owns its NatsKv
// handles and the watcher threads; destroying it stops them (the LiveTables keep their
// last snapshot).
// Thread safety: every public method from any thread; admin calls are meant for the admin
// worker thread (they make NATS round trips).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "flows/tables.h"
#include "runtime/base/control.h"
#include "runtime/base/status.h"
#include "runtime/base/thread_annotations.h"

struct __natsConnection;

namespace weir {

class NatsKv;

struct KvTablesOptions {
  int replicas = 1;
  size_t max_entries = 1'000'000;      // rows per table
  size_t max_value_bytes = 64 * 1024;  // one row, as JSON
  int max_depth = 128;                 // a row's JSON nesting (http.max_depth)
  size_t max_tables = 64;              // tables this instance opens (a bucket, a watcher each)
  std::chrono::milliseconds timeout{5000};
};

class KvTables {
 public:
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

  // Admin calls (docs/admin-api.md, "Tables"), answered in the runtime's own words
  // (runtime/base/control.h; AdminService maps them to HTTP): kBadRequest for a malformed
  // name, key, body or format, kTooLarge past tables.max_entries / max_value_bytes, and
  // for a write to a new table past tables.max_tables,
  // kNotFound, kConflict (another import switched first), kUnavailable (NATS did not
  // answer), kFailed (a stored row that is not JSON).
  ControlResult list();
  ControlResult get(const std::string& table, const std::string& key);
  ControlResult put(const std::string& table, const std::string& key, const std::string& body);
  ControlResult erase(const std::string& table, const std::string& key);
  // `format`: "csv" or "json"; `key_column`: "" = the column a flow declared.
  ControlResult import(const std::string& table, const std::string& body, const std::string& format,
                       const std::string& key_column);
  ControlResult export_rows(const std::string& table);

  // Prometheus lines: weir_table_entries, weir_table_generation, weir_table_updated_timestamp_seconds.
  void render_metrics(std::string& out) const;

  // The KV key of a row of generation `generation` (exposed for tests).
  static std::string row_key(uint64_t generation, std::string_view key);
  static bool parse_row_key(std::string_view kv_key, uint64_t* generation, std::string* key);

 private:
  class Watcher;

  // The bucket's handle (lives as long as this); creates the bucket when `create`.
  // not_found when absent.
  // Past tables.max_tables a table not open yet is refused (Status::invalid).
  Result<NatsKv*> bucket(const std::string& table, bool create);
  // The refusal (413) of a write that would open a table past tables.max_tables.
  std::optional<ControlResult> refuse_new_table(const std::string& table);
  Status watch(const std::shared_ptr<flows::LiveTable>& live);
  std::string too_many_tables(const std::string& table, size_t open) const;
  // The table's live copy, watched and loaded (waits at most `wait`).
  Result<std::shared_ptr<flows::LiveTable>> loaded(const std::string& table, std::chrono::milliseconds wait);
  // Waits (at most 2 s) until this instance's flows read import generation `gen`.
  bool wait_generation(const std::string& table, uint64_t gen);
  // Waits (at most 2 s) until the table's watcher has folded in everything up to KV
  // revision `revision` (and published what changed the table).
  bool wait_settled(const std::string& table, uint64_t revision);
  // Waits (at most 2 s) until this instance's snapshot holds KV revision `revision`.
  static bool wait_applied(const std::shared_ptr<flows::LiveTable>& live, uint64_t revision);
  // The generation in `current` and its revision (0, 0 when there is none).
  Result<std::pair<uint64_t, uint64_t>> current(NatsKv& kv);

  __natsConnection* connection_;
  KvTablesOptions options_;
  Mutex mu_;
  bool started_ GUARDED_BY(mu_) = false;
  std::map<std::string, std::unique_ptr<NatsKv>> buckets_ GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Watcher>> watchers_ GUARDED_BY(mu_);
  Mutex import_mu_;  // one import at a time in this process
};

}  // namespace weir

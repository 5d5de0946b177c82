// Lookup tables: rows keyed by one column, read by the `lookup` step and the
// `lookup(table, key)` function. Two kinds:
// - static: loaded once at flow load from a file (CSV with a header row, or JSON) or
//   from `rows:`; immutable after loading.
// - live (`kv: NAME`): the rows of a NATS KV table (runtime/flow/kv_tables.h keeps them
//   current). A LiveTable holds an immutable TableSnapshot behind one atomic
//   shared_ptr: an update builds a whole new snapshot and swaps it in, so a reader
//   never waits for a writer and never sees half of an import (docs/adr/0120).
//   A lookup pins the snapshot in the event's EvalContext on first use, so every
//   lookup of one event reads the same snapshot.
//
// Thread safety: Table, TableSet and TableSnapshot are read-only after loading and safe
// from any number of threads; LiveTable::publish/current and LiveTables from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "flows/expr.h"
#include "flows/flow.h"
#include "runtime/base/thread_annotations.h"

namespace weir::flows {

struct TextHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// The rows of a live table at one moment. Immutable once published; rows are shared
// between snapshots so that one changed row does not copy the others.
struct TableSnapshot {
  uint64_t generation = 0;  // the import generation the rows belong to (0: none yet)
  uint64_t revision = 0;    // the last KV revision folded in (a writer waits for its own)
  std::unordered_map<std::string, std::shared_ptr<const Json>, TextHash, std::equal_to<>> rows;

  const Json* find_text(std::string_view key) const {
    auto it = rows.find(key);
    return it == rows.end() ? nullptr : it->second.get();
  }
};

// The swap point of one KV table, shared by every flow (and version) that names it.
class LiveTable {
 public:
  explicit LiveTable(std::string name);
  const std::string& name() const { return name_; }
  // The snapshot to read; never null (empty until the first publish).
  std::shared_ptr<const TableSnapshot> current() const { return current_.load(std::memory_order_acquire); }
  // Swaps in `snapshot` (from the one watcher thread of this table).
  void publish(std::shared_ptr<const TableSnapshot> snapshot);
  bool loaded() const { return loaded_.load(std::memory_order_acquire); }
  // Unix time in ms of the last publish; 0: never.
  int64_t updated_unix_ms() const { return updated_ms_.load(std::memory_order_relaxed); }
  size_t entries() const { return entries_.load(std::memory_order_relaxed); }
  // The key column a flow declared (`key:`), the default for imports; "" when none did.
  std::string key_column() const;
  void set_key_column(const std::string& column);

 private:
  std::string name_;
  std::atomic<std::shared_ptr<const TableSnapshot>> current_;
  std::atomic<bool> loaded_{false};
  std::atomic<int64_t> updated_ms_{0};
  std::atomic<size_t> entries_{0};
  mutable Mutex mu_;
  std::string key_column_ GUARDED_BY(mu_);
};

// The process's live tables by name: one LiveTable per KV table, created by the loader
// when a flow names it (`kv:`) and kept for the life of the process. `on_new` (set by
// the runtime once NATS is up) hears of each table created after it was set, so a flow
// deployed at run time with a new KV table gets a watcher.
class LiveTables {
 public:
  static LiveTables& instance();
  std::shared_ptr<LiveTable> get(const std::string& name);
  std::vector<std::shared_ptr<LiveTable>> all() const;
  // Called outside the lock, on the thread that called get().
  void set_on_new(std::function<void(const std::shared_ptr<LiveTable>&)> on_new);

 private:
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<LiveTable>, std::less<>> tables_ GUARDED_BY(mu_);
  std::function<void(const std::shared_ptr<LiveTable>&)> on_new_ GUARDED_BY(mu_);
};

// True for a KV table name: [A-Za-z0-9_-], 1..64 characters (it becomes part of a
// bucket name).
bool valid_kv_table_name(std::string_view name);

class Table {
 public:
  using Rows = std::unordered_map<std::string, Json, TextHash, std::equal_to<>>;
  // Keys are compared as text: the number 7 and the string "7" find the same row.
  // nullptr when the key is absent or is not a string or number. Static tables only
  // (a live table answers nullptr here: use the EvalContext form).
  const Json* find(const Json& key) const;
  const Json* find_text(std::string_view key) const;
  // Any table: a live table's snapshot is pinned in `ctx` on first use, so the row
  // stays valid, and every lookup through `ctx` reads the same snapshot.
  const Json* find(const Json& key, EvalContext& ctx) const;
  // False when the key is already present. Rows shared with other tables are copied first.
  bool insert(std::string key, Json row);
  // Room for `rows` rows before a load inserts them (no rehash on the way).
  void reserve(size_t rows);
  size_t size() const { return live_ ? live_->entries() : rows_->size(); }
  // Makes this a live table reading `live`.
  void set_live(std::shared_ptr<LiveTable> live) { live_ = std::move(live); }
  const LiveTable* live() const { return live_.get(); }
  // A static table's rows (an import parses its body into a static Table first).
  const Rows& rows() const { return *rows_; }
  // Static rows shared between tables loaded from the same file text (read-only once
  // shared: SharedFileTables).
  std::shared_ptr<const Rows> shared_rows() const { return rows_; }
  void use_rows(std::shared_ptr<const Rows> rows) { rows_ = std::move(rows); }

 private:
  std::shared_ptr<const Rows> rows_ = std::make_shared<const Rows>();
  std::shared_ptr<LiveTable> live_;
};

// Parsed file tables (`file:` CSV or JSON) shared by every flow of the process that loads
// the same file text with the same key column: 50 flows naming one customers.csv hold one
// copy of its rows, not 50. Entries are weak: rows live as long as a flow uses
// them. Thread-safe.
class SharedFileTables {
 public:
  static SharedFileTables& instance();
  // The rows loaded earlier from exactly `text` with `key` in `format`, or null.
  std::shared_ptr<const Table::Rows> find(std::string_view format, const std::string& key, const std::string& text);
  void remember(std::string_view format, const std::string& key, const std::string& text,
                const std::shared_ptr<const Table::Rows>& rows);

 private:
  Mutex mu_;
  std::map<std::string, std::weak_ptr<const Table::Rows>, std::less<>> entries_ GUARDED_BY(mu_);
};

// The tables of one flow, by name.
class TableSet {
 public:
  const Table* find(std::string_view name) const;
  Table& add(const std::string& name) { return tables_[name]; }
  bool empty() const { return tables_.empty(); }
  std::vector<std::string> names() const;
  // The live tables among them (for status and metrics).
  std::vector<const LiveTable*> live_tables() const;

 private:
  std::map<std::string, Table, std::less<>> tables_;  // node-based: Table* stay valid
};

// The text form of a key: strings as they are, integral numbers in decimal, other
// numbers in their JSON form. False for other types.
bool key_text(const Json& key, std::string* out);

// A CSV cell as a value: numeric-looking cells ("12", "-3.5", "1e3") become numbers,
// everything else stays a string.
Json csv_cell_value(std::string_view cell);

// Loads CSV text (RFC 4180: header row, quoted fields, "" inside quotes, commas and
// newlines inside quotes, CRLF or LF) keyed by `key`. Problems are appended to
// `diagnostics` with positions in `file`. Returns false on any problem.
bool load_csv_table(std::string_view text, const std::string& file, const std::string& key, Table* out,
                    std::vector<Diagnostic>* diagnostics);

// Loads JSON text: an array of objects keyed by their field `key`, or an object of
// objects keyed by the object's keys (then `key` may be empty).
bool load_json_table(std::string_view text, const std::string& file, const std::string& key, Table* out,
                     std::vector<Diagnostic>* diagnostics);

// Builds a table from rows already in memory (`rows:` written inline in the flow).
// On a problem returns false with `*error` naming the row.
bool table_from_json(const Json& rows, const std::string& key, Table* out, std::string* error);

}  // namespace weir::flows

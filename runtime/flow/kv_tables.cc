#include "runtime/flow/kv_tables.h"

#include <openssl/evp.h>
#include <pthread.h>

#include <algorithm>
#include <optional>
#include <condition_variable>
#include <thread>
#include <unordered_map>

#include "flows/json_limits.h"
#include "runtime/nats/bus.h"
#include "runtime/base/log.h"
#include "runtime/nats/nats_kv.h"

namespace weir {

namespace {

constexpr std::string_view kCurrent = "current";
// How long the watcher gathers changes to the current generation before it publishes a
// snapshot: a burst of puts costs one snapshot, and a put is seen within this.
constexpr std::chrono::milliseconds kBatch{20};
// After the first change of a burst, the snapshot goes out no later than this even while
// changes keep coming.
constexpr std::chrono::milliseconds kMaxBatch{250};
constexpr std::chrono::milliseconds kWaitForFlip{2000};

// weir_table_<name>, or weir_table_<cluster>__<name> in a cluster (ADR 0112): tables are
// shared by every instance and flow of one cluster, never across clusters.
std::string bucket_name(const std::string& table) {
  const std::string& c = layout::cluster();
  return c.empty() ? "weir_table_" + table : "weir_table_" + c + "__" + table;
}

bool raw_key_ok(std::string_view key) {
  if (key.empty() || key.size() > 200) return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

std::string base64url(std::string_view in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (char& c : out) c = c == '+' ? '-' : c == '/' ? '_' : c;
  return out;
}

bool unbase64url(std::string_view in, std::string* out) {
  std::string s(in);
  for (char& c : s) c = c == '-' ? '+' : c == '_' ? '/' : c;
  size_t pad = (4 - s.size() % 4) % 4;
  if (pad == 3) return false;
  s.append(pad, '=');
  out->assign(3 * s.size() / 4 + 1, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out->data()),
                          reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  if (n < 0) return false;
  out->resize(static_cast<size_t>(n) - pad);  // DecodeBlock counts the padding as zero bytes
  return true;
}

// `current` is a flat object: anything nested deeper is not ours, and is never built as a
// DOM (destroying a deep one recurses once per level, flows/json_limits.h).
constexpr int kCurrentMaxDepth = 4;

uint64_t parse_generation(const std::string& value) {
  auto j = flows::parse_json(value, kCurrentMaxDepth);
  if (j && j->is_object() && j->contains("generation") && (*j)["generation"].is_number_unsigned()) {
    return (*j)["generation"].get<uint64_t>();
  }
  return 0;
}

// A row's text as a JSON object within `max_depth` levels (http.max_depth): a deeper row
// never exists as a DOM, whoever wrote it (dump, copy and destruction recurse per level).
// nullopt with *why set otherwise.
std::optional<nlohmann::json> parse_row(std::string_view text, int max_depth, std::string* why) {
  flows::JsonError err;
  auto row = flows::parse_json(text, max_depth, &err);
  if (!row) {
    *why = err.too_deep ? "the row is nested deeper than " + std::to_string(max_depth) + " levels (http.max_depth)"
                        : "the row is not JSON: " + err.message;
    return std::nullopt;
  }
  if (!row->is_object()) {
    *why = "the row is not a JSON object";
    return std::nullopt;
  }
  return row;
}

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

ControlResult error_reply(Outcome outcome, const std::string& message) {
  return ControlResult::failed(outcome, message);
}

// A table call's Status as its answer: a bad name or body is the caller's (kBadRequest,
// not kInvalid: that one is for flows that cannot run); anything else not decided by the
// caller is NATS not answering (kUnavailable).
ControlResult status_reply(const Status& s) {
  switch (s.code()) {
    case Status::Code::kNotFound: return error_reply(Outcome::kNotFound, s.message());
    case Status::Code::kInvalid: return error_reply(Outcome::kBadRequest, s.message());
    case Status::Code::kConflict: return error_reply(Outcome::kConflict, s.message());
    default: return error_reply(Outcome::kUnavailable, s.message());
  }
}

}  // namespace

// ---- keys --------------------------------------------------------------------------

std::string KvTables::row_key(uint64_t generation, std::string_view key) {
  return "g" + std::to_string(generation) + "." + (raw_key_ok(key) ? std::string(key) : "=" + base64url(key));
}

bool KvTables::parse_row_key(std::string_view kv_key, uint64_t* generation, std::string* key) {
  if (kv_key.size() < 3 || kv_key[0] != 'g') return false;
  size_t dot = kv_key.find('.');
  if (dot == std::string_view::npos || dot == 1 || dot + 1 > kv_key.size()) return false;
  uint64_t g = 0;
  for (size_t i = 1; i < dot; ++i) {
    if (kv_key[i] < '0' || kv_key[i] > '9') return false;
    g = g * 10 + static_cast<uint64_t>(kv_key[i] - '0');
  }
  std::string_view rest = kv_key.substr(dot + 1);
  if (!rest.empty() && rest[0] == '=') {
    if (!unbase64url(rest.substr(1), key)) return false;
  } else {
    key->assign(rest);
  }
  *generation = g;
  return true;
}

// ---- the watcher -------------------------------------------------------------------

class KvTables::Watcher {
 public:
  Watcher(std::unique_ptr<NatsKvWatcher> w, std::shared_ptr<flows::LiveTable> live, int max_depth)
      : w_(std::move(w)), live_(std::move(live)), max_depth_(max_depth) {
    thread_ = std::thread([this] { run(); });
  }
  ~Watcher() {
    w_->stop();  // wakes next() with kStopped
    thread_.join();
  }
  // The last KV revision this watcher received of which all that matters is in the
  // published snapshot (entries of other generations change nothing to publish).
  uint64_t settled() const { return settled_.load(std::memory_order_acquire); }

 private:
  using Rows = std::unordered_map<std::string, std::shared_ptr<const flows::Json>, flows::TextHash, std::equal_to<>>;

  void run() {
    pthread_setname_np(pthread_self(), "weir-table");
    bool initial_done = false, dirty = false, warned = false;
    auto first_dirty = std::chrono::steady_clock::now();
    KvEvent e;
    Status error;
    for (;;) {
      const std::chrono::milliseconds wait = dirty && initial_done ? kBatch : std::chrono::milliseconds(1000);
      const NatsKvWatcher::Next next = w_->next(wait, &e, &error);
      if (next == NatsKvWatcher::Next::kStopped) return;
      if (next == NatsKvWatcher::Next::kIdle) {
        if (dirty && initial_done) {
          publish();
          dirty = false;
        }
        continue;
      }
      if (next == NatsKvWatcher::Next::kFailed) {
        if (!warned) log::warn("table watch failed", {{"table", live_->name()}, {"error", error.message()}});
        warned = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      warned = false;
      if (next == NatsKvWatcher::Next::kInitialDone) {  // the initial state is in
        initial_done = true;
        publish();
        dirty = false;
        continue;
      }
      bool changed = apply(e);
      revision_ = std::max(revision_, e.revision);
      if (changed && !dirty) {
        dirty = true;
        first_dirty = std::chrono::steady_clock::now();
      }
      if (dirty && initial_done && std::chrono::steady_clock::now() - first_dirty > kMaxBatch) {
        publish();
        dirty = false;
      }
      if (!dirty) settled_.store(revision_, std::memory_order_release);
    }
  }

  // Folds one entry in; true when the current generation's rows (or which generation is
  // current) changed.
  bool apply(const KvEvent& e) {
    const std::string_view key = e.key;
    const bool removed = e.kind == KvEvent::Kind::kDelete;  // a delete or a purge
    if (key == kCurrent) {
      if (removed) return false;
      uint64_t g = parse_generation(e.value);
      // Generations only grow (an import takes max(current + 1, now in ms)): an older
      // `current` (a replay) must not roll the table back.
      if (g <= current_) return false;
      current_ = g;
      // Older generations are gone for good (the importer purges them); newer ones may
      // be an import under way.
      for (auto it = gens_.begin(); it != gens_.end();) it = it->first < g ? gens_.erase(it) : std::next(it);
      return true;
    }
    uint64_t g = 0;
    std::string row_key;
    if (!KvTables::parse_row_key(key, &g, &row_key)) return false;
    if (g < current_) return false;
    Rows& rows = gens_[g];
    if (removed) {
      rows.erase(row_key);
    } else {
      // Rows are written by weir's admin API, or by anyone with access to the bucket: a
      // row weir would refuse is skipped here, never folded in.
      std::string why;
      auto row = parse_row(e.value, max_depth_, &why);
      if (!row) {
        log::error("table row ignored", {{"table", live_->name()}, {"key", row_key}, {"error", why}});
        return false;
      }
      rows[row_key] = std::make_shared<const flows::Json>(std::move(*row));
    }
    return g == current_;
  }

  void publish() {
    auto snapshot = std::make_shared<flows::TableSnapshot>();
    snapshot->generation = current_;
    snapshot->revision = revision_;
    if (auto it = gens_.find(current_); it != gens_.end()) snapshot->rows = it->second;
    live_->publish(std::move(snapshot));
    settled_.store(revision_, std::memory_order_release);
  }

  std::unique_ptr<NatsKvWatcher> w_;
  std::shared_ptr<flows::LiveTable> live_;
  const int max_depth_;
  uint64_t current_ = 0;           // watcher thread only
  uint64_t revision_ = 0;          // watcher thread only
  std::map<uint64_t, Rows> gens_;  // watcher thread only
  std::atomic<uint64_t> settled_{0};
  std::thread thread_;
};

// ---- KvTables ----------------------------------------------------------------------

KvTables::KvTables(__natsConnection* connection, KvTablesOptions options)
    : connection_(connection), options_(options) {}

KvTables::~KvTables() {
  flows::LiveTables::instance().set_on_new(nullptr);
  std::map<std::string, std::unique_ptr<Watcher>> watchers;
  {
    MutexLock lock(mu_);
    watchers.swap(watchers_);
  }
  watchers.clear();  // before the buckets they read
  MutexLock lock(mu_);
  buckets_.clear();
}

Status KvTables::start(std::chrono::milliseconds wait) {
  {
    MutexLock lock(mu_);
    started_ = true;
  }
  // Tables named by flows loaded from now on (a deploy) get a watcher as they are loaded.
  flows::LiveTables::instance().set_on_new([this](const std::shared_ptr<flows::LiveTable>& live) {
    if (Status s = watch(live); !s) {
      log::warn("cannot watch table", {{"table", live->name()}, {"error", s.message()}});
    }
  });
  for (const auto& live : flows::LiveTables::instance().all()) {
    if (Status s = watch(live); !s) return s;
  }
  return wait_loaded(wait);
}

Status KvTables::wait_loaded(std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (const auto& live : flows::LiveTables::instance().all()) {
    if (live->loaded()) continue;
    {
      MutexLock lock(mu_);
      if (!watchers_.count(live->name()))
        return Status::unavailable("table " + live->name() + " is not watched (see the log)");
    }
    while (!live->loaded()) {
      if (std::chrono::steady_clock::now() > deadline) {
        return Status::timeout("table " + live->name() + ": its rows did not arrive from NATS KV within " +
                               std::to_string(wait.count()) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    log::info("table loaded", {{"table", live->name()},
                               {"entries", std::to_string(live->entries())},
                               {"generation", std::to_string(live->current()->generation)}});
  }
  return Status::ok();
}

Result<NatsKv*> KvTables::bucket(const std::string& table, bool create) {
  if (!flows::valid_kv_table_name(table)) {
    return Status::invalid("table name '" + table + "' must be letters, digits, _ and -, at most 64");
  }
  MutexLock lock(mu_);
  if (auto it = buckets_.find(table); it != buckets_.end()) return it->second.get();
  if (!started_) return Status::unavailable("tables: not connected to NATS yet");
  // Past tables.max_tables no table is created; an existing one is refused too, after the
  // look that tells it from one that does not exist (a 404 stays a 404).
  const bool full = buckets_.size() >= options_.max_tables;
  if (full && create) return Status::invalid(too_many_tables(table, buckets_.size()));
  NatsKvOptions o;
  o.bucket = bucket_name(table);
  o.replicas = options_.replicas;
  o.timeout = options_.timeout;
  o.create = create;  // a flow that names a table makes it; a read of an absent one does not
  // The server refuses a larger row too (one more byte for safety over our own check).
  o.max_value_size = static_cast<int32_t>(options_.max_value_bytes + 1);
  auto kv = NatsKv::open(connection_, o);  // "not yet" answers retried up to 30 s
  if (!kv) {
    if (kv.status().code() == Status::Code::kNotFound) return Status::not_found("no table " + table);
    return kv.status().prefixed("table " + table + ": ");
  }
  if (full) return Status::invalid(too_many_tables(table, buckets_.size()));
  NatsKv* raw = kv.value().get();
  buckets_[table] = std::move(kv.value());
  return raw;
}

std::string KvTables::too_many_tables(const std::string& table, size_t open) const {
  return "table " + table + " refused: this instance reads " + std::to_string(open) + " tables, the limit is " +
         std::to_string(options_.max_tables) + " (tables.max_tables)";
}

std::optional<ControlResult> KvTables::refuse_new_table(const std::string& table) {
  MutexLock lock(mu_);
  if (buckets_.count(table) || buckets_.size() < options_.max_tables) return std::nullopt;
  return error_reply(Outcome::kTooLarge, too_many_tables(table, buckets_.size()));
}

Status KvTables::watch(const std::shared_ptr<flows::LiveTable>& live) {
  {
    MutexLock lock(mu_);
    if (watchers_.count(live->name())) return Status::ok();
  }
  // A flow that names a table creates it (empty): the flow runs, and rows come later.
  auto kv = bucket(live->name(), true);
  if (!kv) return kv.status();
  auto w = kv.value()->watcher(">");
  if (!w) return w.status().prefixed("table " + live->name() + ": ");
  MutexLock lock(mu_);
  auto [it, fresh] = watchers_.emplace(live->name(), nullptr);
  if (fresh) it->second = std::make_unique<Watcher>(std::move(w.value()), live, options_.max_depth);
  return Status::ok();
}

Result<std::shared_ptr<flows::LiveTable>> KvTables::loaded(const std::string& table, std::chrono::milliseconds wait) {
  auto live = flows::LiveTables::instance().get(table);  // may start the watch (on_new)
  if (Status s = watch(live); !s) return s;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (!live->loaded()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::timeout("table " + table + ": rows not read from NATS KV within " + std::to_string(wait.count()) +
                             " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return live;
}

Result<std::pair<uint64_t, uint64_t>> KvTables::current(NatsKv& kv) {
  auto e = kv.get(std::string(kCurrent));
  if (!e && e.status().code() == Status::Code::kNotFound) return std::pair<uint64_t, uint64_t>{0, 0};
  if (!e) return e.status().prefixed("table: read current generation: ");
  return std::pair<uint64_t, uint64_t>{parse_generation(e->value), e->revision};
}

// Answers once this instance's flows read generation `gen` (so a client's next event sees
// the import here); other instances follow within their watch delay. False past kWaitForFlip.
bool KvTables::wait_generation(const std::string& table, uint64_t gen) {
  auto live = loaded(table, options_.timeout);
  if (!live) return false;
  const auto deadline = std::chrono::steady_clock::now() + kWaitForFlip;
  while (live.value()->current()->generation < gen) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

bool KvTables::wait_settled(const std::string& table, uint64_t revision) {
  const Watcher* w = nullptr;
  {
    MutexLock lock(mu_);
    auto it = watchers_.find(table);
    if (it == watchers_.end()) return false;
    w = it->second.get();  // watchers live as long as this
  }
  const auto deadline = std::chrono::steady_clock::now() + kWaitForFlip;
  while (w->settled() < revision) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

bool KvTables::wait_applied(const std::shared_ptr<flows::LiveTable>& live, uint64_t revision) {
  const auto deadline = std::chrono::steady_clock::now() + kWaitForFlip;
  while (live->current()->revision < revision) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

ControlResult KvTables::list() {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& live : flows::LiveTables::instance().all()) {
    out.push_back({{"name", live->name()},
                   {"entries", live->entries()},
                   {"generation", live->current()->generation},
                   {"updated_unix_ms", live->updated_unix_ms()},
                   {"key", live->key_column()}});
  }
  return ControlResult::done(std::move(out));
}

ControlResult KvTables::get(const std::string& table, const std::string& key) {
  auto kv = bucket(table, false);
  if (!kv) return status_reply(kv.status());
  auto cur = current(*kv.value());
  if (!cur) return status_reply(cur.status());
  auto e = kv.value()->get(row_key(cur->first, key));
  if (!e && e.status().code() == Status::Code::kNotFound) {
    return error_reply(Outcome::kNotFound, "table " + table + " has no row \"" + key + "\"");
  }
  if (!e) return status_reply(e.status().prefixed("table " + table + ": "));
  std::string why;
  auto row = parse_row(e->value, options_.max_depth, &why);
  if (!row) return error_reply(Outcome::kFailed, "table " + table + ": row \"" + key + "\": " + why);
  return ControlResult::done(std::move(*row));
}

ControlResult KvTables::put(const std::string& table, const std::string& key, const std::string& body) {
  if (body.size() > options_.max_value_bytes) {
    return error_reply(Outcome::kTooLarge, "row \"" + key + "\" is " + std::to_string(body.size()) +
                                               " bytes; a table row may be at most " +
                                               std::to_string(options_.max_value_bytes) + " bytes");
  }
  std::string why;
  auto row = parse_row(body, options_.max_depth, &why);
  if (!row) return error_reply(Outcome::kBadRequest, "the body must be a JSON object (the row): " + why);
  if (auto refused = refuse_new_table(table)) return *refused;
  auto kv = bucket(table, true);
  if (!kv) return status_reply(kv.status());
  auto live = loaded(table, options_.timeout);
  if (!live) return status_reply(live.status());
  auto snapshot = live.value()->current();
  if (snapshot->find_text(key) == nullptr && snapshot->rows.size() >= options_.max_entries) {
    return error_reply(Outcome::kTooLarge, "table " + table + " holds " + std::to_string(snapshot->rows.size()) +
                                               " rows, the limit is " + std::to_string(options_.max_entries));
  }
  auto cur = current(*kv.value());
  if (!cur) return status_reply(cur.status());
  auto put = kv.value()->put(row_key(cur->first, key), row->dump());
  if (!put) return status_reply(put.status().prefixed("table " + table + ": "));
  const uint64_t revision = put.value();
  // Answer once this instance's flows read the row (so the client's next event sees it).
  const bool applied = wait_applied(live.value(), revision);
  return ControlResult::done(
      {{"table", table}, {"key", key}, {"generation", cur->first}, {"revision", revision}, {"applied", applied}});
}

ControlResult KvTables::erase(const std::string& table, const std::string& key) {
  auto kv = bucket(table, false);
  if (!kv) return status_reply(kv.status());
  auto cur = current(*kv.value());
  if (!cur) return status_reply(cur.status());
  const std::string k = row_key(cur->first, key);
  if (auto e = kv.value()->get(k); !e) {
    if (e.status().code() == Status::Code::kNotFound) {
      return error_reply(Outcome::kNotFound, "table " + table + " has no row \"" + key + "\"");
    }
    return status_reply(e.status().prefixed("table " + table + ": "));
  }
  auto live = loaded(table, options_.timeout);
  if (!live) return status_reply(live.status());
  // The delete marker, for its revision (the PubAck).
  auto deleted = kv.value()->erase_returning_revision(k);
  if (!deleted) return status_reply(deleted.status().prefixed("table " + table + ": "));
  const uint64_t revision = deleted.value();
  const bool applied = wait_applied(live.value(), revision);
  return ControlResult::done({{"table", table}, {"key", key}, {"deleted", true}, {"applied", applied}});
}

namespace {

// The rows of an import body as (key, row JSON), checked against the table limits; the
// refusal (400, 413) when anything is wrong — nothing is written then.
std::optional<ControlResult> import_rows(const std::string& body, const std::string& format, const std::string& key,
                                         const KvTablesOptions& options,
                                         std::vector<std::pair<std::string, std::string>>* values) {
  flows::Table rows;
  std::vector<flows::Diagnostic> diagnostics;
  bool parsed = false;
  if (format == "csv") {
    if (key.empty())
      return error_reply(Outcome::kBadRequest, "a CSV import needs the key column: ?key=COLUMN (no flow declares one)");
    parsed = flows::load_csv_table(body, "body", key, &rows, &diagnostics);
  } else if (format == "json") {
    parsed = flows::load_json_table(body, "body", key, &rows, &diagnostics);
  } else {
    return error_reply(Outcome::kBadRequest, "format must be csv or json");
  }
  if (!parsed) {
    std::string errors;
    for (size_t i = 0; i < diagnostics.size() && i < 20; ++i) errors += (i ? "; " : "") + diagnostics[i].str();
    return error_reply(Outcome::kBadRequest, "import refused, nothing changed: " + errors);
  }
  if (rows.size() > options.max_entries) {
    return error_reply(Outcome::kTooLarge, "import of " + std::to_string(rows.size()) + " rows refused, the limit is " +
                                               std::to_string(options.max_entries) +
                                               " rows per table; nothing changed");
  }
  values->reserve(rows.size());
  for (const auto& [k, row] : rows.rows()) {
    if (flows::json_depth(row, options.max_depth) > options.max_depth) {
      return error_reply(Outcome::kBadRequest, "row \"" + k + "\" is nested deeper than " +
                                                   std::to_string(options.max_depth) +
                                                   " levels (http.max_depth); nothing changed");
    }
    std::string text = row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (text.size() > options.max_value_bytes) {
      return error_reply(Outcome::kTooLarge, "row \"" + k + "\" is " + std::to_string(text.size()) +
                                                 " bytes; a table row may be at most " +
                                                 std::to_string(options.max_value_bytes) + " bytes; nothing changed");
    }
    values->emplace_back(k, std::move(text));
  }
  return std::nullopt;
}

// Removes every message of the bucket up to `last` (the old generation's rows, written
// before the new ones), with the bucket's whole subject as the filter, not the old
// generation's: nats-server 2.9.10 moves every consumer of a filtered purge that leaves no
// message under its filter to the stream's end, so a watcher that had not yet received the
// new rows and the switch skipped them and kept the old table until the next write (the
// kv-tables cluster flake, ADR 0226). Here the new rows and `current` stay under the
// filter, so a watcher moves at most past purged messages. An empty bucket (`last` 0) is
// left alone: to nats-server a Sequence of 0 or 1 is no bound.
void purge_before(NatsKv& kv, uint64_t last, const std::string& table) {
  if (last == 0) return;
  if (Status p = kv.purge(">", last + 1); !p) {
    log::warn("table: old generation not purged", {{"table", table}, {"error", p.message()}});
  }
}

}  // namespace

ControlResult KvTables::import(const std::string& table, const std::string& body, const std::string& format,
                               const std::string& key_column) {
  if (!flows::valid_kv_table_name(table)) {
    return error_reply(Outcome::kBadRequest, "table name '" + table + "' must be letters, digits, _ and -, at most 64");
  }
  // Before LiveTables::get, which would register the name (and try to watch it).
  if (auto refused = refuse_new_table(table)) return *refused;
  std::string key = key_column;
  if (key.empty()) key = flows::LiveTables::instance().get(table)->key_column();
  // Parse and check everything before the first write.
  std::vector<std::pair<std::string, std::string>> values;
  if (auto refused = import_rows(body, format, key, options_, &values)) return *refused;

  MutexLock import_lock(import_mu_);
  auto kv = bucket(table, true);
  if (!kv) return status_reply(kv.status());
  NatsKv& bucket_kv = *kv.value();
  auto cur = current(bucket_kv);
  if (!cur) return status_reply(cur.status());
  const uint64_t old_gen = cur->first;
  // Later imports get larger generations, also across instances (the watcher drops every
  // generation below the current one).
  const uint64_t gen = std::max<uint64_t>(old_gen + 1, static_cast<uint64_t>(unix_ms()));
  auto purge = [&](uint64_t g) { return bucket_kv.purge("g" + std::to_string(g) + ".>"); };

  // Everything in the bucket up to here is older than the new rows: what step 3 removes.
  auto last_before = bucket_kv.last_revision();
  if (!last_before) {
    return status_reply(last_before.status().prefixed("table " + table + ": "));
  }

  // 1. The rows, under the new generation (nobody reads it yet).
  std::vector<std::pair<std::string, std::string>> entries;
  entries.reserve(values.size());
  for (auto& [k, text] : values) entries.emplace_back(row_key(gen, k), std::move(text));
  if (Status written = bucket_kv.put_all(entries); !written) {
    (void)purge(gen);
    return error_reply(Outcome::kUnavailable, "import of table " + table + " failed while writing rows (" +
                                                  written.message() + "); the table is unchanged");
  }
  // 2. The switch: one compare-and-set of `current`.
  const std::string pointer = nlohmann::json({{"generation", gen},
                                              {"entries", values.size()},
                                              {"key", key},
                                              {"imported_unix_ms", unix_ms()}})
                                  .dump();
  const std::string current_key(kCurrent);
  auto switched = cur->second == 0 ? bucket_kv.create(current_key, pointer)
                                   : bucket_kv.update(current_key, pointer, cur->second);
  if (!switched) {
    (void)purge(gen);
    return error_reply(switched.status().code() == Status::Code::kConflict ? Outcome::kConflict : Outcome::kUnavailable,
                       "import of table " + table +
                           ": another import switched the table meanwhile, or NATS did "
                           "not answer (" +
                           switched.status().message() + "); this import was not applied");
  }
  // 3. The old generation's rows.
  purge_before(bucket_kv, last_before.value(), table);
  const bool applied = wait_generation(table, gen);
  log::info("table imported",
            {{"table", table}, {"entries", std::to_string(values.size())}, {"generation", std::to_string(gen)}});
  return ControlResult::done(
      {{"table", table}, {"entries", values.size()}, {"generation", gen}, {"replaced", old_gen}, {"applied", applied}});
}

ControlResult KvTables::export_rows(const std::string& table) {
  auto kv = bucket(table, false);
  if (!kv) return status_reply(kv.status());
  auto live = loaded(table, options_.timeout);
  if (!live) return status_reply(live.status());
  // The table as it is now, not as this instance's watcher last folded it in: a change
  // made through another instance a moment ago may not have reached it yet (within its
  // watch delay). Wait (at most kWaitForFlip) until the snapshot holds the bucket's last
  // revision; past that, answer what it holds (the last message may be a row purged
  // before the watcher saw it: a failed import).
  if (auto last = kv.value()->last_revision(); last && !wait_settled(table, last.value())) {
    log::warn("table export: this instance's copy is behind the bucket", {{"table", table}});
  }
  auto snapshot = live.value()->current();
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [k, row] : snapshot->rows) out[k] = *row;
  return ControlResult::done(std::move(out));
}

void KvTables::render_metrics(std::string& out) const {
  auto tables = flows::LiveTables::instance().all();
  if (tables.empty()) return;
  out +=
      "# HELP weir_table_entries Rows in a KV lookup table as this instance reads it.\n"
      "# TYPE weir_table_entries gauge\n";
  for (const auto& t : tables)
    out += "weir_table_entries{table=\"" + t->name() + "\"} " + std::to_string(t->entries()) + "\n";
  out +=
      "# HELP weir_table_generation The import generation of a KV lookup table this instance reads.\n"
      "# TYPE weir_table_generation gauge\n";
  for (const auto& t : tables) {
    out += "weir_table_generation{table=\"" + t->name() + "\"} " + std::to_string(t->current()->generation) + "\n";
  }
  out +=
      "# HELP weir_table_updated_timestamp_seconds When this instance last applied a change to the table (Unix time).\n"
      "# TYPE weir_table_updated_timestamp_seconds gauge\n";
  for (const auto& t : tables) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(t->updated_unix_ms()) / 1000.0);
    out += "weir_table_updated_timestamp_seconds{table=\"" + t->name() + "\"} " + buf + "\n";
  }
}

}  // namespace weir

#include "flows/tables.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <deque>
#include <span>

#include "flows/source_tree.h"
#include "flows/value.h"

namespace weir::flows {

bool key_text(const Json& key, std::string* out) {
  if (key.is_string()) {
    *out = key.get_ref<const std::string&>();
    return true;
  }
  int64_t i;
  if (get_int(key, &i)) {
    *out = std::to_string(i);
    return true;
  }
  if (key.is_number()) {
    double d = get_double(key);
    if (std::trunc(d) == d && std::fabs(d) < 9.2e18) {
      *out = std::to_string(static_cast<int64_t>(d));
    } else {
      *out = key.dump();
    }
    return true;
  }
  return false;
}

namespace {

// Calls `find(text)` with the key's text form without allocating for strings and
// integers; nullptr for keys that have no text form.
template <typename F>
const Json* by_text(const Json& key, F find) {
  if (key.is_string()) return find(std::string_view(key.get_ref<const std::string&>()));
  int64_t i;
  if (get_int(key, &i)) {
    char buf[24];
    auto r = std::to_chars(buf, buf + sizeof buf, i);
    return find(std::string_view(buf, static_cast<size_t>(r.ptr - buf)));
  }
  std::string text;
  if (!key_text(key, &text)) return nullptr;
  return find(std::string_view(text));
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

LiveTable::LiveTable(std::string name) : name_(std::move(name)), current_(std::make_shared<const TableSnapshot>()) {}

void LiveTable::publish(std::shared_ptr<const TableSnapshot> snapshot) {
  const size_t n = snapshot->rows.size();
  current_.store(std::move(snapshot), std::memory_order_release);
  entries_.store(n, std::memory_order_relaxed);
  updated_ms_.store(unix_ms_now(), std::memory_order_relaxed);
  loaded_.store(true, std::memory_order_release);
}

std::string LiveTable::key_column() const {
  MutexLock lock(mu_);
  return key_column_;
}

void LiveTable::set_key_column(const std::string& column) {
  MutexLock lock(mu_);
  key_column_ = column;
}

LiveTables& LiveTables::instance() {
  static LiveTables tables;
  return tables;
}

std::shared_ptr<LiveTable> LiveTables::get(const std::string& name) {
  std::function<void(const std::shared_ptr<LiveTable>&)> on_new;
  std::shared_ptr<LiveTable> table;
  {
    MutexLock lock(mu_);
    auto it = tables_.find(name);
    if (it != tables_.end()) return it->second;
    table = std::make_shared<LiveTable>(name);
    tables_.emplace(name, table);
    on_new = on_new_;
  }
  if (on_new) on_new(table);
  return table;
}

std::vector<std::shared_ptr<LiveTable>> LiveTables::all() const {
  MutexLock lock(mu_);
  std::vector<std::shared_ptr<LiveTable>> out;
  for (const auto& [name, t] : tables_) out.push_back(t);
  return out;
}

void LiveTables::set_on_new(std::function<void(const std::shared_ptr<LiveTable>&)> on_new) {
  MutexLock lock(mu_);
  on_new_ = std::move(on_new);
}

bool valid_kv_table_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

const Json* Table::find_text(std::string_view key) const {
  auto it = rows_->find(key);
  return it == rows_->end() ? nullptr : &it->second;
}

const Json* Table::find(const Json& key) const {
  if (live_) return nullptr;
  return by_text(key, [this](std::string_view k) { return find_text(k); });
}

const Json* Table::find(const Json& key, EvalContext& ctx) const {
  if (!live_) return find(key);
  const TableSnapshot* snapshot = nullptr;
  for (const auto& [table, pinned] : ctx.pinned) {
    if (table == live_.get()) {
      snapshot = pinned.get();
      break;
    }
  }
  if (snapshot == nullptr) {
    ctx.pinned.emplace_back(live_.get(), live_->current());
    snapshot = ctx.pinned.back().second.get();
  }
  return by_text(key, [snapshot](std::string_view k) { return snapshot->find_text(k); });
}

void Table::reserve(size_t rows) {
  auto own = rows_.use_count() == 1 ? std::const_pointer_cast<Rows>(rows_) : std::make_shared<Rows>(*rows_);
  own->reserve(rows);
  rows_ = std::move(own);
}

bool Table::insert(std::string key, Json row) {
  // Only a table being built inserts; one whose rows are shared gets its own copy first.
  auto own = rows_.use_count() == 1 ? std::const_pointer_cast<Rows>(rows_) : std::make_shared<Rows>(*rows_);
  const bool added = own->emplace(std::move(key), std::move(row)).second;
  rows_ = std::move(own);
  return added;
}

const Table* TableSet::find(std::string_view name) const {
  auto it = tables_.find(name);
  return it == tables_.end() ? nullptr : &it->second;
}

std::vector<const LiveTable*> TableSet::live_tables() const {
  std::vector<const LiveTable*> out;
  for (const auto& [name, table] : tables_) {
    if (table.live()) out.push_back(table.live());
  }
  return out;
}

std::vector<std::string> TableSet::names() const {
  std::vector<std::string> out;
  for (const auto& [name, table] : tables_) out.push_back(name);
  return out;
}

Json csv_cell_value(std::string_view cell) {
  if (cell.empty() || cell.size() > 40) return Json(std::string(cell));
  // Only plain decimal forms count as numbers: "007" keeps its zeros (ids, zip codes),
  // and "inf"/"nan"/"0x1F" stay strings.
  size_t i = 0;
  if (cell[0] == '-' || cell[0] == '+') ++i;
  size_t int_start = i;
  while (i < cell.size() && cell[i] >= '0' && cell[i] <= '9') ++i;
  size_t int_digits = i - int_start;
  bool is_float = false;
  size_t frac_digits = 0;
  if (i < cell.size() && cell[i] == '.') {
    is_float = true;
    ++i;
    while (i < cell.size() && cell[i] >= '0' && cell[i] <= '9') ++i, ++frac_digits;
  }
  if (int_digits == 0) return Json(std::string(cell));
  if (int_digits > 1 && cell[int_start] == '0') return Json(std::string(cell));
  if (is_float && frac_digits == 0) return Json(std::string(cell));
  if (i < cell.size() && (cell[i] == 'e' || cell[i] == 'E')) {
    size_t j = i + 1;
    if (j < cell.size() && (cell[j] == '+' || cell[j] == '-')) ++j;
    size_t exp_start = j;
    while (j < cell.size() && cell[j] >= '0' && cell[j] <= '9') ++j;
    if (j == exp_start) return Json(std::string(cell));
    is_float = true;
    i = j;
  }
  if (i != cell.size()) return Json(std::string(cell));
  const char* b = cell.data() + (cell[0] == '+' ? 1 : 0);
  const char* e = cell.data() + cell.size();
  if (!is_float) {
    int64_t v;
    auto r = std::from_chars(b, e, v);
    if (r.ec == std::errc() && r.ptr == e) return Json(v);
  }
  double d;
  auto r = std::from_chars(b, e, d);
  if (r.ec != std::errc() || r.ptr != e || !std::isfinite(d)) return Json(std::string(cell));
  return Json(d);
}

namespace {

// A field is a view into the CSV text (or into CsvRecords::unescaped for a quoted field
// with "" in it), and every record's fields share one vector: loading bench_orders'
// 900-row table made ~25 allocations a row before (a string per field, a vector per
// record, trimmed copies), which was most of compiling that flow (ADR 0215).
struct CsvField {
  std::string_view text;
  int line, column;
};

struct CsvRecords {
  std::vector<CsvField> fields;
  std::vector<size_t> ends;           // record r is fields[r == 0 ? 0 : ends[r - 1], ends[r])
  std::deque<std::string> unescaped;  // stable addresses: fields point into them
  size_t size() const { return ends.size(); }
  bool empty() const { return ends.empty(); }
  std::span<const CsvField> operator[](size_t r) const {
    const size_t from = r == 0 ? 0 : ends[r - 1];
    return {fields.data() + from, ends[r] - from};
  }
};

// Splits CSV text into records. Positions are 1-based; columns count code points.
bool split_csv(std::string_view s, const std::string& file, CsvRecords* out, std::vector<Diagnostic>* diagnostics) {
  size_t i = 0;
  int line = 1, column = 1;
  if (s.size() >= 3 && s.substr(0, 3) == "\xEF\xBB\xBF") i = 3;
  auto bump = [&](char c) {
    if (c == '\n') {
      ++line;
      column = 1;
    } else if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) {
      ++column;
    }
  };
  auto& fields = out->fields;
  fields.reserve(static_cast<size_t>(std::count(s.begin(), s.end(), ',') + std::count(s.begin(), s.end(), '\n')) + 1);
  size_t record_start = 0;  // the current record's first field
  // Ends the current record; a blank line (one empty field) is skipped.
  auto end_record = [&] {
    if (fields.size() - record_start == 1 && fields[record_start].text.empty()) {
      fields.resize(record_start);
    } else if (fields.size() > record_start) {
      out->ends.push_back(fields.size());
    }
    record_start = fields.size();
  };
  while (i < s.size()) {
    CsvField f{{}, line, column};
    if (s[i] == '"') {
      bump(s[i]);
      ++i;
      const size_t start = i;
      size_t end = i;
      std::string* own = nullptr;  // only a field with "" in it is copied
      while (true) {
        if (i >= s.size()) {
          diagnostics->push_back({{file, f.line, f.column}, "unterminated quoted field"});
          return false;
        }
        if (s[i] == '"') {
          if (i + 1 < s.size() && s[i + 1] == '"') {
            if (!own) own = &out->unescaped.emplace_back(s.substr(start, i - start));
            own->push_back('"');
            bump(s[i]);
            bump(s[i + 1]);
            i += 2;
            continue;
          }
          end = i;
          bump(s[i]);
          ++i;
          break;
        }
        if (own) own->push_back(s[i]);
        bump(s[i]);
        ++i;
      }
      f.text = own ? std::string_view(*own) : s.substr(start, end - start);
      if (i < s.size() && s[i] != ',' && s[i] != '\n' && s[i] != '\r') {
        diagnostics->push_back({{file, line, column}, "unexpected text after a quoted field"});
        return false;
      }
    } else {
      const size_t start = i;
      while (i < s.size() && s[i] != ',' && s[i] != '\n' && s[i] != '\r') {
        if (s[i] == '"') {
          diagnostics->push_back({{file, line, column}, "quote inside an unquoted field (quote the whole field)"});
          return false;
        }
        bump(s[i]);
        ++i;
      }
      f.text = s.substr(start, i - start);
    }
    fields.push_back(f);
    if (i >= s.size()) break;
    if (s[i] == ',') {
      bump(s[i]);
      ++i;
      if (i >= s.size()) fields.push_back(CsvField{{}, line, column});
      continue;
    }
    // End of record: \n or \r\n (a lone \r too).
    if (s[i] == '\r') ++i;
    if (i < s.size() && s[i] == '\n') ++i;
    ++line;
    column = 1;
    end_record();
  }
  end_record();
  return true;
}

std::string_view trim_view(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string trim(std::string_view s) { return std::string(trim_view(s)); }

}  // namespace

bool load_csv_table(std::string_view text, const std::string& file, const std::string& key, Table* out,
                    std::vector<Diagnostic>* diagnostics) {
  size_t bad = 0;
  if (!valid_utf8(text, &bad)) {
    int line = 1;
    for (size_t k = 0; k < bad; ++k) line += text[k] == '\n';
    diagnostics->push_back({{file, line, 1}, "invalid UTF-8"});
    return false;
  }
  CsvRecords records;
  if (!split_csv(text, file, &records, diagnostics)) return false;
  if (records.empty()) {
    diagnostics->push_back({{file, 1, 1}, "CSV file has no header row"});
    return false;
  }
  std::vector<std::string> header;
  int key_index = -1;
  for (const auto& f : records[0]) {
    std::string name = trim(f.text);
    if (name.empty()) {
      diagnostics->push_back({{file, f.line, f.column}, "empty column name in the header row"});
      return false;
    }
    for (const auto& h : header) {
      if (h == name) {
        diagnostics->push_back({{file, f.line, f.column}, "duplicate column \"" + name + "\""});
        return false;
      }
    }
    if (name == key) key_index = static_cast<int>(header.size());
    header.push_back(std::move(name));
  }
  if (key_index < 0) {
    diagnostics->push_back({{file, 1, 1}, "key column \"" + key + "\" is not in the header row"});
    return false;
  }
  // The columns in key order: each row's object (a std::map) is then filled by appending.
  std::vector<size_t> order(header.size());
  for (size_t c = 0; c < order.size(); ++c) order[c] = c;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return header[a] < header[b]; });
  out->reserve(records.size() - 1);
  bool ok = true;
  for (size_t r = 1; r < records.size(); ++r) {
    const auto rec = records[r];
    if (rec.size() != header.size()) {
      diagnostics->push_back(
          {{file, rec[0].line, rec[0].column},
           "row has " + std::to_string(rec.size()) + " fields, the header has " + std::to_string(header.size())});
      ok = false;
      continue;
    }
    Json row = Json::object();
    auto& fields = row.get_ref<Json::object_t&>();
    for (size_t c : order) fields.emplace_hint(fields.end(), header[c], csv_cell_value(trim_view(rec[c].text)));
    const auto& kf = rec[static_cast<size_t>(key_index)];
    std::string k = trim(kf.text);
    if (!out->insert(k, std::move(row))) {
      diagnostics->push_back({{file, kf.line, kf.column}, "duplicate key \"" + k + "\""});
      ok = false;
    }
  }
  return ok;
}

bool load_json_table(std::string_view text, const std::string& file, const std::string& key, Table* out,
                     std::vector<Diagnostic>* diagnostics) {
  SourceDoc doc = parse_json_source(text, file);
  if (!doc.ok) {
    diagnostics->insert(diagnostics->end(), doc.diagnostics.begin(), doc.diagnostics.end());
    return false;
  }
  const SrcNode& root = doc.root;
  auto fail = [&](const SrcNode& at, std::string message) {
    diagnostics->push_back({{file, at.line, at.column}, std::move(message)});
    return false;
  };
  bool ok = true;
  if (root.is_seq()) {
    if (key.empty()) return fail(root, "a table given as an array needs `key:`");
    for (const auto& item : root.items) {
      if (!item.is_map()) {
        ok = fail(item, "table rows must be objects");
        continue;
      }
      const SrcNode* kn = item.get(key);
      Json row;
      std::string err;
      const SrcNode* where = nullptr;
      if (!to_plain_json(item, &row, &err, &where)) {
        ok = fail(*where, err);
        continue;
      }
      std::string k;
      if (kn == nullptr || !key_text(row[key], &k)) {
        ok = fail(item, "row has no string or number field \"" + key + "\"");
        continue;
      }
      if (!out->insert(k, std::move(row))) ok = fail(*kn, "duplicate key \"" + k + "\"");
    }
    return ok;
  }
  if (root.is_map()) {
    for (size_t i = 0; i < root.keys.size(); ++i) {
      Json row;
      std::string err;
      const SrcNode* where = nullptr;
      if (!to_plain_json(root.items[i], &row, &err, &where)) {
        ok = fail(*where, err);
        continue;
      }
      if (!row.is_object()) {
        ok = fail(root.items[i], "table rows must be objects");
        continue;
      }
      out->insert(root.keys[i].text, std::move(row));  // keys are unique: checked by the parser
    }
    return ok;
  }
  return fail(root, "a JSON table is an array of objects or an object of objects");
}

bool table_from_json(const Json& rows, const std::string& key, Table* out, std::string* error) {
  if (rows.is_array()) {
    if (key.empty()) {
      *error = "a table given as a list needs `key:`";
      return false;
    }
    size_t index = 0;
    for (const auto& row : rows) {
      std::string k;
      if (!row.is_object()) {
        *error = "row " + std::to_string(index) + " is not an object";
        return false;
      }
      auto it = row.find(key);
      if (it == row.end() || !key_text(*it, &k)) {
        *error = "row " + std::to_string(index) + " has no string or number field \"" + key + "\"";
        return false;
      }
      if (!out->insert(k, row)) {
        *error = "duplicate key \"" + k + "\"";
        return false;
      }
      ++index;
    }
    return true;
  }
  if (rows.is_object()) {
    for (const auto& [k, row] : rows.items()) {
      if (!row.is_object()) {
        *error = "row \"" + k + "\" is not an object";
        return false;
      }
      out->insert(k, row);
    }
    return true;
  }
  *error = "rows must be a list of objects or a mapping of objects";
  return false;
}

namespace {
std::string file_table_key(std::string_view format, const std::string& key, const std::string& text) {
  std::string k;
  k.reserve(format.size() + key.size() + text.size() + 2);
  k.append(format).push_back('\0');
  k.append(key).push_back('\0');
  k.append(text);
  return k;
}
}  // namespace

SharedFileTables& SharedFileTables::instance() {
  static SharedFileTables tables;
  return tables;
}

std::shared_ptr<const Table::Rows> SharedFileTables::find(std::string_view format, const std::string& key,
                                                          const std::string& text) {
  MutexLock lock(mu_);
  auto it = entries_.find(file_table_key(format, key, text));
  return it == entries_.end() ? nullptr : it->second.lock();
}

void SharedFileTables::remember(std::string_view format, const std::string& key, const std::string& text,
                                const std::shared_ptr<const Table::Rows>& rows) {
  MutexLock lock(mu_);
  std::erase_if(entries_, [](const auto& e) { return e.second.expired(); });
  entries_[file_table_key(format, key, text)] = rows;
}

}  // namespace weir::flows

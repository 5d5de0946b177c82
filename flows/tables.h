// Lookup tables: rows keyed by one column, loaded once at flow load from CSV (header
// row) or JSON, read by the `lookup` step and the `lookup(table, key)` function.
//
// Immutable after loading; safe to read from any number of threads.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "flows/flow.h"

namespace weir::flows {

class Table {
 public:
  // Keys are compared as text: the number 7 and the string "7" find the same row.
  // nullptr when the key is absent or is not a string or number.
  const Json* find(const Json& key) const;
  const Json* find_text(std::string_view key) const;
  // False when the key is already present.
  bool insert(std::string key, Json row);
  size_t size() const { return rows_.size(); }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, Json, Hash, std::equal_to<>> rows_;
};

// The tables of one flow, by name.
class TableSet {
 public:
  const Table* find(std::string_view name) const;
  Table& add(const std::string& name) { return tables_[name]; }
  bool empty() const { return tables_.empty(); }
  std::vector<std::string> names() const;

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
bool load_csv_table(std::string_view text, const std::string& file, const std::string& key,
                    Table* out, std::vector<Diagnostic>* diagnostics);

// Loads JSON text: an array of objects keyed by their field `key`, or an object of
// objects keyed by the object's keys (then `key` may be empty).
bool load_json_table(std::string_view text, const std::string& file, const std::string& key,
                     Table* out, std::vector<Diagnostic>* diagnostics);

// Builds a table from rows already in memory (`rows:` written inline in the flow).
// On a problem returns false with `*error` naming the row.
bool table_from_json(const Json& rows, const std::string& key, Table* out, std::string* error);

}  // namespace weir::flows

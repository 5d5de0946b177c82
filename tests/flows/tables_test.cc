// Lookup tables from CSV and JSON.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "flows/tables.h"

using namespace weir::flows;

TEST_CASE("CSV: header row, quoting, numbers", "[tables]") {
  Table t;
  std::vector<Diagnostic> d;
  std::string csv =
      "\xEF\xBB\xBF"
      "id,name,score,note\r\n"
      "a1,\"Smith, John\",12,\"said \"\"hi\"\"\"\r\n"
      "a2,Plain,-3.5,\"two\nlines\"\r\n"
      "\r\n"
      "7,Seven,007,1e3\n"
      "a4, spaced , 12abc ,\n";
  REQUIRE(load_csv_table(csv, "t.csv", "id", &t, &d));
  CHECK(d.empty());
  CHECK(t.size() == 4);
  const Json* r = t.find(Json("a1"));
  REQUIRE(r);
  CHECK((*r)["name"] == "Smith, John");
  CHECK((*r)["score"] == 12);
  CHECK((*r)["score"].is_number_integer());
  CHECK((*r)["note"] == "said \"hi\"");
  r = t.find(Json("a2"));
  REQUIRE(r);
  CHECK((*r)["score"] == -3.5);
  CHECK((*r)["note"] == "two\nlines");
  r = t.find(Json(7));  // numeric key finds the row by text
  REQUIRE(r);
  CHECK((*r)["id"] == 7);
  CHECK((*r)["score"] == "007");  // leading zeros keep a string (ids, zip codes)
  CHECK((*r)["note"] == 1000.0);
  r = t.find(Json("a4"));
  REQUIRE(r);
  CHECK((*r)["name"] == "spaced");  // cells are trimmed
  CHECK((*r)["score"] == "12abc");
  CHECK((*r)["note"] == "");
  CHECK(t.find(Json("zz")) == nullptr);
  CHECK(t.find(Json::array()) == nullptr);
  CHECK(t.find(Json(nullptr)) == nullptr);
}

TEST_CASE("CSV: every quoted field with \"\" keeps its own text, a comma at the very end is an empty last field",
          "[tables]") {
  // Fields are views into the text, or into a copy when "" had to be unescaped: many such
  // copies must each stay what they were.
  std::string csv = "id,note,tail\n";
  for (int i = 0; i < 300; ++i) {
    csv += "r" + std::to_string(i) + ",\"say \"\"" + std::to_string(i) + "\"\" twice, please\",x\n";
  }
  csv += "last,\"\",";
  Table t;
  std::vector<Diagnostic> d;
  REQUIRE(load_csv_table(csv, "q.csv", "id", &t, &d));
  CHECK(d.empty());
  CHECK(t.size() == 301);
  for (int i = 0; i < 300; i += 37) {
    const Json* r = t.find(Json("r" + std::to_string(i)));
    REQUIRE(r);
    CHECK((*r)["note"] == "say \"" + std::to_string(i) + "\" twice, please");
    CHECK((*r)["tail"] == "x");
  }
  const Json* last = t.find(Json("last"));
  REQUIRE(last);
  CHECK((*last)["note"] == "");
  CHECK((*last)["tail"] == "");
  CHECK(*last == Json({{"id", "last"}, {"note", ""}, {"tail", ""}}));
}

TEST_CASE("CSV cell values", "[tables]") {
  CHECK(csv_cell_value("12") == 12);
  CHECK(csv_cell_value("-0") == 0);
  CHECK(csv_cell_value("+5") == 5);
  CHECK(csv_cell_value("1.25") == 1.25);
  CHECK(csv_cell_value("9223372036854775808").is_number_float());
  CHECK(csv_cell_value("0") == 0);
  CHECK(csv_cell_value("0.5") == 0.5);
  CHECK(csv_cell_value("01") == "01");
  CHECK(csv_cell_value("1.") == "1.");
  CHECK(csv_cell_value(".5") == ".5");
  CHECK(csv_cell_value("inf") == "inf");
  CHECK(csv_cell_value("NaN") == "NaN");
  CHECK(csv_cell_value("0x10") == "0x10");
  CHECK(csv_cell_value("1e999") == "1e999");
  CHECK(csv_cell_value("") == "");
  CHECK(csv_cell_value("c1") == "c1");
}

TEST_CASE("CSV errors carry file:line:column", "[tables][errors]") {
  auto errors = [](const std::string& csv, const std::string& key = "id") {
    Table t;
    std::vector<Diagnostic> d;
    bool ok = load_csv_table(csv, "t.csv", key, &t, &d);
    std::vector<std::string> out;
    for (const auto& x : d) out.push_back(x.str());
    CHECK(ok == out.empty());
    return out;
  };
  CHECK(errors("id,a\n1,2,3\n2,3\n") == std::vector<std::string>{"t.csv:2:1: row has 3 fields, the header has 2"});
  CHECK(errors("id,a\n1,2\n1,3\n") == std::vector<std::string>{"t.csv:3:1: duplicate key \"1\""});
  CHECK(errors("id,a\n1,\"open\n") == std::vector<std::string>{"t.csv:2:3: unterminated quoted field"});
  CHECK(errors("id,a\n1,ab\"c\n") ==
        std::vector<std::string>{"t.csv:2:5: quote inside an unquoted field (quote the whole field)"});
  CHECK(errors("id,a\n1,\"x\"y\n") == std::vector<std::string>{"t.csv:2:6: unexpected text after a quoted field"});
  CHECK(errors("name,a\n1,2\n") == std::vector<std::string>{"t.csv:1:1: key column \"id\" is not in the header row"});
  CHECK(errors("") == std::vector<std::string>{"t.csv:1:1: CSV file has no header row"});
  CHECK(errors("id,,b\n") == std::vector<std::string>{"t.csv:1:4: empty column name in the header row"});
  CHECK(errors("id,a,a\n") == std::vector<std::string>{"t.csv:1:6: duplicate column \"a\""});
  CHECK(errors("id\n\xFF\n") == std::vector<std::string>{"t.csv:2:1: invalid UTF-8"});
  // Header only: an empty table is fine.
  CHECK(errors("id,a\n").empty());
}

TEST_CASE("JSON tables: array keyed by a field, or object of objects", "[tables]") {
  Table t;
  std::vector<Diagnostic> d;
  REQUIRE(load_json_table(R"([{"id": "a", "v": 1}, {"id": 2, "v": [true]}])", "t.json", "id", &t, &d));
  CHECK(t.find(Json("a"))->at("v") == 1);
  CHECK(t.find(Json("2"))->at("v") == Json::parse("[true]"));
  Table o;
  REQUIRE(load_json_table(R"({"x": {"tier": "gold"}, "y": {"tier": "silver"}})", "t.json", "", &o, &d));
  CHECK(o.find(Json("y"))->at("tier") == "silver");
  CHECK(d.empty());
  auto errors = [](const std::string& json, const std::string& key) {
    Table t;
    std::vector<Diagnostic> d;
    CHECK_FALSE(load_json_table(json, "t.json", key, &t, &d));
    std::vector<std::string> out;
    for (const auto& x : d) out.push_back(x.str());
    return out;
  };
  CHECK(errors(R"([{"id": "a"}, 5])", "id") == std::vector<std::string>{"t.json:1:15: table rows must be objects"});
  CHECK(errors(R"([{"x": "a"}])", "id") ==
        std::vector<std::string>{"t.json:1:2: row has no string or number field \"id\""});
  CHECK(errors(R"([{"id": "a"}, {"id": "a"}])", "id") == std::vector<std::string>{"t.json:1:22: duplicate key \"a\""});
  CHECK(errors(R"({"x": 1})", "") == std::vector<std::string>{"t.json:1:7: table rows must be objects"});
  CHECK(errors("5", "id") ==
        std::vector<std::string>{"t.json:1:1: a JSON table is an array of objects or an object of objects"});
  CHECK(errors("[1,", "id").at(0).find("JSON syntax error") != std::string::npos);
  CHECK(errors(R"([{"id": "a"}])", "") ==
        std::vector<std::string>{"t.json:1:1: a table given as an array needs `key:`"});
}

TEST_CASE("inline rows", "[tables]") {
  Table t;
  std::string err;
  REQUIRE(table_from_json(Json::parse(R"([{"k": "a", "v": 1}])"), "k", &t, &err));
  CHECK(t.find(Json("a"))->at("v") == 1);
  Table u;
  CHECK_FALSE(table_from_json(Json::parse(R"([{"k": "a"}, {"k": "a"}])"), "k", &u, &err));
  CHECK(err == "duplicate key \"a\"");
  CHECK_FALSE(table_from_json(Json::parse(R"([{"v": 1}])"), "k", &u, &err));
  CHECK(err.find("row 0 has no string or number field \"k\"") != std::string::npos);
  CHECK_FALSE(table_from_json(Json(5), "k", &u, &err));
  CHECK_FALSE(table_from_json(Json::parse(R"({"a": 1})"), "", &u, &err));
  CHECK(err == "row \"a\" is not an object");
}

// Live (KV) tables: what flows/tables.h promises the runtime's watcher and the flows.
namespace {
std::shared_ptr<const TableSnapshot> snapshot_of(uint64_t generation,
                                                 std::initializer_list<std::pair<std::string, Json>> rows) {
  auto s = std::make_shared<TableSnapshot>();
  s->generation = generation;
  for (const auto& [k, v] : rows) s->rows[k] = std::make_shared<const Json>(v);
  return s;
}
}  // namespace

TEST_CASE("a live table: a flow reads the published snapshot, one snapshot per event", "[tables][kv]") {
  auto r = load_flow_text(R"Y(
flow: kv_tables_unit
from: { http: { path: /kv } }
tables:
  tiers: { kv: unit_tiers, key: customer }
steps:
  - lookup: { table: tiers, key: this.a, as: ra }
  - set: { rb: "lookup(tiers, this.b)" }
to: { out: { http: { url: "http://127.0.0.1:1/" } } }
)Y",
                          "kv.yaml", LoadOptions{});
  REQUIRE(r.flow);
  auto live = LiveTables::instance().get("unit_tiers");
  CHECK(live->key_column() == "customer");
  CHECK_FALSE(live->loaded());
  // Before the first snapshot: an empty table, lookups find nothing.
  Outcome o = r.flow->run(Json::parse(R"({"a": "x", "b": "y"})"));
  REQUIRE(o.kind == Outcome::Kind::kEmit);
  CHECK(o.event["ra"].is_null());
  live->publish(snapshot_of(1, {{"x", {{"gen", 1}}}, {"y", {{"gen", 1}}}}));
  CHECK(live->loaded());
  CHECK(live->entries() == 2);
  o = r.flow->run(Json::parse(R"({"a": "x", "b": "y"})"));
  CHECK(o.event["ra"]["gen"] == 1);
  CHECK(o.event["rb"]["gen"] == 1);
  live->publish(snapshot_of(2, {{"x", {{"gen", 2}}}}));
  o = r.flow->run(Json::parse(R"({"a": "x", "b": "y"})"));
  CHECK(o.event["ra"]["gen"] == 2);
  CHECK(o.event["rb"].is_null());
}

TEST_CASE("a live table: an event keeps the snapshot of its first lookup across a swap", "[tables][kv]") {
  auto live = std::make_shared<LiveTable>("pin_test");
  live->publish(snapshot_of(1, {{"k", {{"gen", 1}}}}));
  Table t;
  t.set_live(live);
  EvalContext event1;
  const Json* before = t.find(Json("k"), event1);
  REQUIRE(before != nullptr);
  live->publish(snapshot_of(2, {{"k", {{"gen", 2}}}}));
  // The old snapshot is still held by event1: the row stays valid and unchanged.
  CHECK((*before)["gen"] == 1);
  CHECK((*t.find(Json("k"), event1))["gen"] == 1);
  EvalContext event2;
  CHECK((*t.find(Json("k"), event2))["gen"] == 2);
  // The plain form answers only for static tables.
  CHECK(t.find(Json("k")) == nullptr);
}

TEST_CASE("a live table: readers racing a writer see whole snapshots", "[tables][kv]") {
  auto live = std::make_shared<LiveTable>("race_test");
  Table t;
  t.set_live(live);
  auto make = [](int gen) {
    auto s = std::make_shared<TableSnapshot>();
    s->generation = static_cast<uint64_t>(gen);
    for (int i = 0; i < 50; ++i) s->rows["k" + std::to_string(i)] = std::make_shared<const Json>(Json{{"gen", gen}});
    return s;
  };
  live->publish(make(0));
  std::atomic<bool> stop{false};
  std::atomic<int> mixed{0}, reads{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        EvalContext ctx;
        int first = (*t.find(Json("k0"), ctx))["gen"].get<int>();
        for (int i = 1; i < 50; ++i) {
          if ((*t.find(Json("k" + std::to_string(i)), ctx))["gen"].get<int>() != first) ++mixed;
        }
        ++reads;
      }
    });
  }
  for (int g = 1; g <= 2000; ++g) live->publish(make(g));
  while (reads.load() < 100) std::this_thread::yield();
  stop = true;
  for (auto& th : readers) th.join();
  CHECK(mixed.load() == 0);
  CHECK(live->current()->generation == 2000);
}

TEST_CASE("a live table: kv names are checked, one source of rows", "[tables][kv]") {
  auto bad = load_flow_text(R"(
flow: kv_bad
from: { http: { path: /kvb } }
tables:
  a: { kv: "no.dots" }
  b: { kv: t, rows: [ { id: 1 } ], key: id }
to: { out: { http: { url: "http://127.0.0.1:1/" } } }
)",
                            "kvb.yaml", LoadOptions{});
  CHECK_FALSE(bad.flow);
  std::string all;
  for (const auto& d : bad.diagnostics) all += d.str() + "\n";
  CHECK(all.find("tables.a.kv: \"no.dots\" must be a KV table name") != std::string::npos);
  CHECK(all.find("tables.b needs `file`, `rows` or `kv` (one of them)") != std::string::npos);
}

TEST_CASE("file tables: flows loading the same file text with the same key share one copy of its rows",
          "[tables][shared]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("weir-shared-tables-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string csv = "id,tier\nc1,gold\nc2,silver\n";
  { std::ofstream(dir / "customers.csv") << csv; }
  auto flow_text = [](const std::string& name, const std::string& key) {
    return "flow: " + name + "\nfrom: { http: { path: /" + name + " } }\n" +
           "tables:\n  customers: { file: customers.csv, key: " + key + " }\n" +
           "steps:\n  - lookup: { table: customers, key: this.c, as: row }\n" +
           "to: { out: { http: { url: \"http://127.0.0.1:1/\" } } }\n";
  };
  auto write_flow = [&](const std::string& name, const std::string& key) {
    std::ofstream(dir / (name + ".yaml")) << flow_text(name, key);
    return load_flow_file((dir / (name + ".yaml")).string());
  };
  auto& shared = SharedFileTables::instance();
  {
    auto a = write_flow("shared_a", "id");
    REQUIRE(a.flow);
    auto rows = shared.find("csv", "id", csv);
    REQUIRE(rows);
    const long with_one = rows.use_count();
    auto b = write_flow("shared_b", "id");
    REQUIRE(b.flow);
    CHECK(shared.find("csv", "id", csv) == rows);
    CHECK(rows.use_count() == with_one + 1);  // b holds the same rows, not a copy
    // Both read it.
    Outcome oa = a.flow->run(Json::parse(R"({"c": "c2"})"));
    Outcome ob = b.flow->run(Json::parse(R"({"c": "c1"})"));
    CHECK(oa.event["row"]["tier"] == "silver");
    CHECK(ob.event["row"]["tier"] == "gold");
    // Another key column is another table.
    auto c = write_flow("shared_c", "tier");
    REQUIRE(c.flow);
    CHECK(shared.find("csv", "tier", csv) != rows);
    CHECK(rows.use_count() == with_one + 1);
    // Other text (the file changed) is another table.
    CHECK_FALSE(shared.find("csv", "id", csv + "c3,bronze\n"));
  }
  // Once no flow uses them, the rows are freed.
  CHECK_FALSE(shared.find("csv", "id", csv));
  fs::remove_all(dir);
}

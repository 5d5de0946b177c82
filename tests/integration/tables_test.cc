// KV lookup tables (ADR 0120) through the real weir binary, its admin
// API and CLI, an embedded nats-server and weir-sink: rows changed while a flow runs are
// seen without a restart; a bulk import under load switches the table for every event at
// once (each delivered event read one generation, never a mix); limits answer clearly.
#include <catch2/catch.hpp>

#include <fstream>

#include "tests/integration/jetstream.h"
#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

// Bodies delivered to the sink, oldest first.
std::vector<json> delivered(const SinkProcess& sink) {
  std::vector<json> out;
  for (const auto& req : sink.requests(100000)) out.push_back(body_of(req));
  return out;
}

std::optional<json> delivered_with_id(const SinkProcess& sink, const std::string& id) {
  for (const auto& b : delivered(sink)) {
    if (b.is_object() && b.value("id", "") == id) return b;
  }
  return std::nullopt;
}

// {"v": [[…[1]…]]}, nested `depth` levels in all (the object is level 1).
std::string nested_row(int depth) {
  std::string v(static_cast<size_t>(depth - 1), '[');
  v += "1";
  v += std::string(static_cast<size_t>(depth - 1), ']');
  return R"({"v":)" + v + "}";
}

}  // namespace

TEST_CASE("kv tables: rows put, changed and deleted while the flow runs, the CLI, limits and metrics",
          "[integration][tables]") {
  SinkProcess sink({"--record", "10000"});
  WeirOptions o;
  o.flows["tiers.yaml"] =
      "flow: tiered\nfrom: { http: { path: /in } }\ntables:\n  tiers: { kv: tiers, key: customer }\n"
      "steps:\n  - lookup: { table: tiers, key: this.customer, as: tier, default: { tier: none } }\n"
      "to:\n  out: { http: { url: \"" +
      sink.url() + "\", retries: 8, timeout: 2s } }\n";
  WeirProcess weir(o);
  weir.start();
  const std::string server = weir.admin_url("");

  // An empty table: the default row.
  REQUIRE(weir.post("/in", R"({"id": "e0", "customer": "c1"})").status == 202);
  REQUIRE(wait_until([&] { return delivered_with_id(sink, "e0").has_value(); }, 10s, 10ms));
  CHECK((*delivered_with_id(sink, "e0"))["tier"] == json{{"tier", "none"}});

  // A put is seen by the running flow within a second of its answer.
  auto seen_within = [&](const std::string& customer, const json& expected, const std::string& tag) {
    const auto put_answered = std::chrono::steady_clock::now();
    std::optional<std::chrono::steady_clock::time_point> first_post_seeing;
    int n = 0;
    REQUIRE(wait_until(
        [&] {
          const std::string id = tag + "-" + std::to_string(n++);
          const auto posted = std::chrono::steady_clock::now();
          REQUIRE(weir.post("/in", json{{"id", id}, {"customer", customer}}.dump()).status == 202);
          if (!wait_until([&] { return delivered_with_id(sink, id).has_value(); }, 10s, 2ms)) return false;
          if ((*delivered_with_id(sink, id))["tier"] != expected) return false;
          first_post_seeing = posted;
          return true;
        },
        5s, 20ms));
    CHECK(*first_post_seeing - put_answered < 1s);
  };
  auto put = weir.admin("PUT", "/tables/tiers/c1", R"({"customer": "c1", "tier": "gold"})");
  REQUIRE(put.status == 200);
  seen_within("c1", json{{"customer", "c1"}, {"tier", "gold"}}, "gold");
  REQUIRE(weir.admin("PUT", "/tables/tiers/c1", R"({"customer": "c1", "tier": "platinum"})").status == 200);
  seen_within("c1", json{{"customer", "c1"}, {"tier", "platinum"}}, "platinum");

  auto got = weir.admin("GET", "/tables/tiers/c1");
  REQUIRE(got.status == 200);
  CHECK(json::parse(got.body)["tier"] == "platinum");
  // A key that is not a plain KV token (space, dot, slash, unicode) round-trips.
  REQUIRE(weir.admin("PUT", "/tables/tiers/a%20b.c%2Fd%C3%A9", R"({"tier": "odd"})").status == 200);
  got = weir.admin("GET", "/tables/tiers/a%20b.c%2Fd%C3%A9");
  REQUIRE(got.status == 200);
  CHECK(json::parse(got.body)["tier"] == "odd");
  seen_within("a b.c/d\xC3\xA9", json{{"tier", "odd"}}, "odd");

  REQUIRE(weir.admin("DELETE", "/tables/tiers/c1").status == 200);
  CHECK(weir.admin("GET", "/tables/tiers/c1").status == 404);
  CHECK(weir.admin("DELETE", "/tables/tiers/c1").status == 404);
  seen_within("c1", json{{"tier", "none"}}, "deleted");

  // Limits and bad input: clear answers, nothing changed.
  auto big = weir.admin("PUT", "/tables/tiers/big", json{{"pad", std::string(70000, 'x')}}.dump());
  CHECK(big.status == 413);
  CHECK(big.body.find("at most 65536 bytes") != std::string::npos);
  CHECK(weir.admin("PUT", "/tables/tiers/x", "[1,2]").status == 400);
  auto bad_csv = weir.admin("PUT", "/tables/tiers?format=csv", "customer,tier\nc9,gold,extra\n");
  CHECK(bad_csv.status == 400);
  CHECK(bad_csv.body.find("row has 3 fields, the header has 2") != std::string::npos);
  CHECK(weir.admin("PUT", "/tables/no.such", "{}").status == 400);
  CHECK(weir.admin("GET", "/tables/never_made").status == 404);
  CHECK(weir.admin("GET", "/tables/tiers/odd-missing").status == 404);

  // The CLI: import a CSV (the key column comes from the flow), get, export, delete.
  weir::testing::TempDir files;
  {
    std::ofstream f(files.file("tiers.csv"));
    f << "customer,tier,limit\nc1,silver,100\nc2,gold,500\n\"c,3\",bronze,7\n";
  }
  auto imported = run_cli({"table", "import", "tiers", files.file("tiers.csv"), "--server", server});
  INFO(imported.output);
  REQUIRE(imported.code == 0);
  CHECK(imported.output.find("\"entries\": 3") != std::string::npos);
  // "applied" says whether this instance's flows read the new rows within the import's short
  // wait; under load the watch may take longer, so only its presence is checked here and the
  // switch itself below, by what events see.
  CHECK(imported.output.find("\"applied\": ") != std::string::npos);
  // The import replaced every row: the odd key is gone, c1 is back as silver.
  seen_within("c1", json{{"customer", "c1"}, {"tier", "silver"}, {"limit", 100}}, "imported");
  CHECK(weir.admin("GET", "/tables/tiers/a%20b.c%2Fd%C3%A9").status == 404);
  auto cli_get = run_cli({"table", "get", "tiers", "c,3", "--server", server});
  CHECK(cli_get.code == 0);
  CHECK(cli_get.output.find("\"bronze\"") != std::string::npos);
  auto exported = run_cli({"table", "export", "tiers", "--server", server});
  REQUIRE(exported.code == 0);
  json rows = json::parse(exported.output);
  CHECK(rows.size() == 3);
  CHECK(rows["c2"]["limit"] == 500);
  CHECK(run_cli({"table", "put", "tiers", "c4", "{\"tier\": \"gold\"}", "--server", server}).code == 0);
  CHECK(run_cli({"table", "delete", "tiers", "c4", "--server", server}).code == 0);
  auto missing = run_cli({"table", "get", "tiers", "c4", "--server", server});
  CHECK(missing.code == 2);
  CHECK(run_cli({"table", "put", "tiers", "c5", "not json", "--server", server}).code == 2);

  // Metrics: entries, generation, last update.
  REQUIRE(wait_until(
      [&] {
        return weir.admin("GET", "/metrics").body.find("weir_table_entries{table=\"tiers\"} 3") != std::string::npos;
      },
      5s, 20ms));
  auto metrics = weir.admin("GET", "/metrics").body;
  CHECK(metrics.find("weir_table_updated_timestamp_seconds{table=\"tiers\"} 1") != std::string::npos);
  CHECK(metrics.find("weir_table_generation{table=\"tiers\"} ") != std::string::npos);
  auto list = weir.admin("GET", "/tables");
  REQUIRE(list.status == 200);
  CHECK(json::parse(list.body)[0]["name"] == "tiers");
  CHECK(weir.terminate() == 0);
}

TEST_CASE("kv tables: imports under load — every event read one whole generation", "[integration][tables]") {
  constexpr int kRows = 300;
  constexpr int kImports = 6;
  SinkProcess sink({"--record", "200000"});
  WeirOptions o;
  // Two lookups of different keys per event: if an event could read half of an import,
  // the two rows would carry different generations.
  o.flows["gens.yaml"] =
      "flow: gens\nfrom: { http: { path: /in } }\ntables:\n  g: { kv: gens, key: k }\n"
      "steps:\n  - set: { ka: \"'k' + string(this.n % " +
      std::to_string(kRows) + ")\", kb: \"'k' + string((this.n * 7 + 3) % " + std::to_string(kRows) +
      ")\" }\n"
      "  - lookup: { table: g, key: this.ka, as: ra }\n"
      "  - set: { gb: \"lookup(g, this.kb).gen\" }\n"
      "to:\n  out: { http: { url: \"" +
      sink.url() + "\", retries: 8, timeout: 2s } }\n";
  WeirProcess weir(o);
  weir.start();
  auto import_gen = [&](int gen) {
    json rows = json::array();
    for (int i = 0; i < kRows; ++i) rows.push_back({{"k", "k" + std::to_string(i)}, {"gen", gen}, {"i", i}});
    auto r = weir.admin("PUT", "/tables/gens?format=json", rows.dump());
    INFO(r.body);
    REQUIRE(r.status == 200);
    CHECK(json::parse(r.body)["entries"] == kRows);
  };
  import_gen(1);
  std::set<std::string> acked;
  {
    Posters posters(weir.ingress_url("/in"), 4);
    REQUIRE(wait_until([&] { return posters.acked() > 200; }, 20s, 10ms));
    for (int gen = 2; gen <= kImports; ++gen) {
      const size_t before = posters.acked();
      import_gen(gen);
      // Some load between two switches.
      REQUIRE(wait_until([&] { return posters.acked() > before + 100; }, 20s, 5ms));
    }
    posters.stop();
    acked = posters.acked_ids();
  }
  REQUIRE(wait_until([&] { return sink.ids().size() >= acked.size(); }, 60s, 20ms));
  std::map<int, size_t> per_gen;
  size_t mixed = 0, missing = 0;
  for (const auto& b : delivered(sink)) {
    if (!b.contains("ra") || !b["ra"].is_object()) {
      ++missing;
      continue;
    }
    const int ga = b["ra"]["gen"].get<int>();
    if (!b["gb"].is_number() || b["gb"].get<int>() != ga) ++mixed;
    per_gen[ga]++;
  }
  INFO("events per generation: " << json(per_gen).dump());
  CHECK(mixed == 0);
  CHECK(missing == 0);
  // The switches happened under load: events read several generations, the last included.
  CHECK(per_gen.size() >= 3);
  CHECK(per_gen.count(kImports) == 1);
  // The table reads as the last import, whole.
  auto exported = weir.admin("GET", "/tables/gens");
  REQUIRE(exported.status == 200);
  json rows = json::parse(exported.body);
  CHECK(rows.size() == kRows);
  CHECK(rows["k0"]["gen"] == kImports);
  CHECK(weir.terminate() == 0);
}

TEST_CASE("kv tables: every instance of a cluster reads the table, a change made through one reaches the other",
          "[integration][tables][cluster]") {
  weir::testing::NatsServer nats;
  SinkProcess sink({"--record", "10000"});
  const std::string flow =
      "flow: tiered\nfrom: { http: { path: /in } }\ntables:\n  tiers: { kv: ctiers, key: customer }\n"
      "steps:\n  - lookup: { table: tiers, key: this.customer, as: tier, default: { tier: none } }\n"
      "to:\n  out: { http: { url: \"" +
      sink.url() + "\", retries: 8, timeout: 2s } }\n";
  WeirProcess a({.nats_url = nats.url(), .flows = {{"tiered.yaml", flow}}, .args = {"--cluster", "c1"}});
  WeirProcess b({.nats_url = nats.url(), .flows = {{"tiered.yaml", flow}}, .args = {"--cluster", "c1"}});
  a.start();
  b.start();
  INFO(a.describe() << "\n" << b.describe());
  // The event posted to `to` after the change made on `from` was answered sees it within 1 s.
  auto seen_on = [&](WeirProcess& to, const std::string& customer, const json& expected, const std::string& tag) {
    const auto changed = std::chrono::steady_clock::now();
    std::optional<std::chrono::steady_clock::duration> after;
    int n = 0;
    REQUIRE(wait_until(
        [&] {
          const std::string id = tag + "-" + std::to_string(n++);
          const auto posted = std::chrono::steady_clock::now();
          REQUIRE(to.post("/in", json{{"id", id}, {"customer", customer}}.dump()).status == 202);
          if (!wait_until([&] { return delivered_with_id(sink, id).has_value(); }, 10s, 2ms)) return false;
          if ((*delivered_with_id(sink, id))["tier"] != expected) return false;
          after = posted - changed;
          return true;
        },
        5s, 20ms));
    CHECK(*after < 1s);
  };
  REQUIRE(a.admin("PUT", "/tables/ctiers/c1", R"({"tier": "gold"})").status == 200);
  seen_on(b, "c1", json{{"tier", "gold"}}, "b-gold");
  REQUIRE(b.admin("PUT", "/tables/ctiers?format=csv&key=customer", "customer,tier\nc1,silver\nc2,gold\n").status ==
          200);
  seen_on(a, "c1", json{{"customer", "c1"}, {"tier", "silver"}}, "a-silver");
  REQUIRE(b.admin("DELETE", "/tables/ctiers/c1").status == 200);
  seen_on(a, "c1", json{{"tier", "none"}}, "a-deleted");
  auto exported = a.admin("GET", "/tables/ctiers");
  REQUIRE(exported.status == 200);
  CHECK(json::parse(exported.body) == json{{"c2", {{"customer", "c2"}, {"tier", "gold"}}}});
  CHECK(a.terminate() == 0);
  CHECK(b.terminate() == 0);
}

// The cause of a flake of the case above (1 in 12 under load): in a cluster either
// instance may run an event, so the events posted to A could be looked up on B while A's
// own copy was still a watch delay (20 ms at least) behind; A's export then answered the
// rows from before B's import. An export answers the table as it is when asked (ADR 0226).
TEST_CASE("kv tables: an export right after a change made through another instance answers the change",
          "[integration][tables][cluster]") {
  weir::testing::NatsServer nats;
  SinkProcess sink;
  const std::string flow =
      "flow: tiered\nfrom: { http: { path: /in } }\ntables:\n  tiers: { kv: xtiers, key: customer }\n"
      "to:\n  out: { http: { url: \"" +
      sink.url() + "\" } }\n";
  WeirProcess a({.nats_url = nats.url(), .flows = {{"tiered.yaml", flow}}, .args = {"--cluster", "c1"}});
  WeirProcess b({.nats_url = nats.url(), .flows = {{"tiered.yaml", flow}}, .args = {"--cluster", "c1"}});
  a.start();
  b.start();
  INFO(a.describe() << "\n" << b.describe());
  for (int round = 0; round < 10; ++round) {
    INFO("round " << round);
    const std::string v = "v" + std::to_string(round);
    const json rows{{"c1", {{"customer", "c1"}, {"tier", v}}}, {"c2", {{"customer", "c2"}, {"tier", v}}}};
    REQUIRE(b.admin("PUT", "/tables/xtiers?format=json&key=customer", rows.dump()).status == 200);
    auto exported = a.admin("GET", "/tables/xtiers");
    REQUIRE(exported.status == 200);
    CHECK(json::parse(exported.body) == rows);
    REQUIRE(b.admin("PUT", "/tables/xtiers/c3", json{{"tier", v}}.dump()).status == 200);
    exported = a.admin("GET", "/tables/xtiers");
    REQUIRE(exported.status == 200);
    CHECK(json::parse(exported.body).value("c3", json()) == json{{"tier", v}});
  }
  CHECK(a.terminate() == 0);
  CHECK(b.terminate() == 0);
}

TEST_CASE("kv tables: tables.max_entries and tables.max_value_bytes bound writes, bad values are exit 2",
          "[integration][tables][config]") {
  {
    WeirOptions o;
    o.config = "tables: { max_entries: 2, max_value_bytes: 100 }\n";
    WeirProcess weir(o);
    weir.start();
    CHECK(weir.admin("PUT", "/tables/small/a", R"({"v": 1})").status == 200);
    CHECK(weir.admin("PUT", "/tables/small/b", R"({"v": 2})").status == 200);
    auto full = weir.admin("PUT", "/tables/small/c", R"({"v": 3})");
    CHECK(full.status == 413);
    CHECK(full.body.find("holds 2 rows, the limit is 2") != std::string::npos);
    CHECK(weir.admin("PUT", "/tables/small/a", R"({"v": 11})").status == 200);  // a replacement fits
    auto big = weir.admin("PUT", "/tables/small/a", json{{"pad", std::string(120, 'x')}}.dump());
    CHECK(big.status == 413);
    CHECK(big.body.find("at most 100 bytes") != std::string::npos);
    auto import = weir.admin("PUT", "/tables/small?format=json", R"({"a": {}, "b": {}, "c": {}})");
    CHECK(import.status == 413);
    CHECK(import.body.find("import of 3 rows refused, the limit is 2") != std::string::npos);
    auto rows = weir.admin("GET", "/tables/small");
    REQUIRE(rows.status == 200);
    CHECK(json::parse(rows.body) == json{{"a", {{"v", 11}}}, {"b", {{"v", 2}}}});
    CHECK(weir.terminate() == 0);
  }
  for (const std::string& bad : {std::string("tables: { max_value_bytes: 2MiB }\n"),
                                 std::string("tables: { max_entries: 0 }\n"), std::string("tables: { rows: 5 }\n")}) {
    INFO(bad);
    WeirOptions o;
    o.config = bad;
    WeirProcess weir(o);
    weir.spawn();
    CHECK(weir.process().wait_exit(20s) == std::optional<int>(2));
    CHECK(weir.log().find("tables.") != std::string::npos);
  }
}

// A row is JSON like an event: nested at most http.max_depth levels. A deeper one is never
// stored, and one that reaches the bucket some other way is skipped by the watcher: rows
// 32k levels deep were stored and delivered, and one PUT crashed weir (a recursive dump).
TEST_CASE("kv tables: a row nested deeper than http.max_depth is refused, and skipped when written to the bucket",
          "[integration][tables][depth]") {
  NatsServer nats;
  SinkProcess sink({"--record", "10000"});
  WeirOptions o;
  o.nats_url = nats.url();
  o.config = "http: { max_depth: 64 }\ntables: { max_value_bytes: 1MiB }\n";
  o.flows["deep.yaml"] =
      "flow: deep\nfrom: { http: { path: /in } }\ntables:\n  t: { kv: deep, key: k }\n"
      "steps:\n  - lookup: { table: t, key: this.k, as: row, default: { none: true } }\n"
      "to:\n  out: { http: { url: \"" +
      sink.url() + "\", retries: 8, timeout: 2s } }\n";
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());

  // At the limit (64 here): stored. One level more, 200 levels, and the row that crashed
  // weir (~64 KiB, 32k levels): 400 naming the limit, nothing stored.
  CHECK(weir.admin("PUT", "/tables/deep/edge", nested_row(64)).status == 200);
  for (int depth : {65, 200, 32000}) {
    INFO("depth " << depth);
    auto r = weir.admin("PUT", "/tables/deep/bomb", nested_row(depth));
    CHECK(r.status == 400);
    CHECK(r.body.find("nested deeper than 64 levels") != std::string::npos);
  }
  CHECK(weir.admin("GET", "/tables/deep/bomb").status == 404);
  // An import is held to the same limit.
  auto import = weir.admin("PUT", "/tables/deep?format=json&key=k",
                           json{{"a", json::parse(nested_row(2))}, {"b", json::parse(nested_row(65))}}.dump());
  CHECK(import.status == 400);
  CHECK(import.body.find("nested deeper than 64 levels") != std::string::npos);

  // A row written into the bucket by someone else (not through weir): the watcher skips it
  // with a logged error, and goes on folding in later rows.
  js_publish(nats.url(), "$KV.weir_table_deep.g0.evil", "kv-evil", nested_row(32000));
  REQUIRE(wait_until([&] { return weir.log().find("table row ignored") != std::string::npos; }, 10s, 10ms));
  REQUIRE(weir.admin("PUT", "/tables/deep/good", R"({"k": "good", "ok": 1})").status == 200);
  REQUIRE(weir.post("/in", R"({"id": "e-evil", "k": "evil"})").status == 202);
  REQUIRE(weir.post("/in", R"({"id": "e-good", "k": "good"})").status == 202);
  REQUIRE(wait_until(
      [&] { return delivered_with_id(sink, "e-evil").has_value() && delivered_with_id(sink, "e-good").has_value(); },
      10s, 10ms));
  CHECK((*delivered_with_id(sink, "e-evil"))["row"] == json{{"none", true}});
  CHECK((*delivered_with_id(sink, "e-good"))["row"] == json{{"k", "good"}, {"ok", 1}});
  // A GET of the stored row answers the refusal, not the row.
  auto got = weir.admin("GET", "/tables/deep/evil");
  CHECK(got.status >= 500);
  CHECK(got.body.find("nested deeper than 64 levels") != std::string::npos);
  CHECK(weir.running());
  CHECK(weir.terminate() == 0);
}

// Each table is a KV bucket and a watcher thread: PUT /tables/<new name>/k must not make
// them without bound. Past tables.max_tables a new name is refused with 413 naming the
// limit; the tables already read go on as before.
TEST_CASE("kv tables: tables.max_tables bounds the tables one instance reads", "[integration][tables][config]") {
  SinkProcess sink;
  WeirOptions o;
  o.config = "tables: { max_tables: 3 }\n";
  o.flows["named.yaml"] =
      "flow: named\nfrom: { http: { path: /in } }\ntables:\n  t: { kv: named, key: k }\n"
      "steps:\n  - lookup: { table: t, key: this.k, as: row, default: { none: true } }\n"
      "to:\n  out: { http: { url: \"" +
      sink.url() + "\", retries: 8, timeout: 2s } }\n";
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());
  // The flow's table is one of the three.
  CHECK(weir.admin("PUT", "/tables/extra1/a", R"({"v": 1})").status == 200);
  CHECK(weir.admin("PUT", "/tables/extra2/a", R"({"v": 2})").status == 200);
  for (const std::string& path : {std::string("/tables/extra3/a"), std::string("/tables/extra4/b")}) {
    auto refused = weir.admin("PUT", path, R"({"v": 3})");
    CHECK(refused.status == 413);
    CHECK(refused.body.find("the limit is 3 (tables.max_tables)") != std::string::npos);
  }
  auto import = weir.admin("PUT", "/tables/extra5?format=json", R"({"a": {"v": 5}})");
  CHECK(import.status == 413);
  CHECK(import.body.find("tables.max_tables") != std::string::npos);
  // Nothing of the refused tables exists; the open ones still take writes.
  auto never_made = weir.admin("GET", "/tables/extra3/a");
  INFO(never_made.body);
  CHECK(never_made.status == 404);
  CHECK(weir.admin("PUT", "/tables/extra2/b", R"({"v": 22})").status == 200);
  CHECK(weir.admin("PUT", "/tables/named/k1", R"({"k": "k1"})").status == 200);
  auto list = weir.admin("GET", "/tables");
  REQUIRE(list.status == 200);
  std::set<std::string> names;
  for (const auto& t : json::parse(list.body)) names.insert(t["name"].get<std::string>());
  CHECK(names == std::set<std::string>{"named", "extra1", "extra2"});
  REQUIRE(weir.post("/in", R"({"id": "e1", "k": "k1"})").status == 202);
  REQUIRE(wait_until([&] { return delivered_with_id(sink, "e1").has_value(); }, 10s, 10ms));
  CHECK((*delivered_with_id(sink, "e1"))["row"] == json{{"k", "k1"}});
  CHECK(weir.terminate() == 0);

  for (const std::string& bad :
       {std::string("tables: { max_tables: 0 }\n"), std::string("tables: { max_tables: x }\n")}) {
    INFO(bad);
    WeirOptions b;
    b.config = bad;
    WeirProcess other(b);
    other.spawn();
    CHECK(other.process().wait_exit(20s) == std::optional<int>(2));
    CHECK(other.log().find("tables.max_tables") != std::string::npos);
  }
}

// docs/admin-api.md (Lookup tables, Import): `Content-Type: text/csv` alone makes the body
// CSV, without ?format=csv; the admin guard takes text/csv on a table import and only
// there (a row is JSON).
TEST_CASE("kv tables: an import sent as Content-Type: text/csv is read as CSV", "[integration][tables]") {
  SinkProcess sink;
  WeirOptions o;
  o.flows["tiers.yaml"] =
      "flow: tiered\nfrom: { http: { path: /in } }\ntables:\n  tiers: { kv: csvtiers, key: customer }\n"
      "to:\n  out: { http: { url: \"" +
      sink.url() + "\" } }\n";
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());
  auto csv = weir::testing::http_request("PUT", weir.admin_url("/tables/csvtiers"),
                                         "customer,tier\nc7,bronze\nc8,gold\n", {"Content-Type: text/csv"});
  INFO(csv.body);
  CHECK(csv.status == 200);
  auto got = weir.admin("GET", "/tables/csvtiers/c8");
  REQUIRE(got.status == 200);
  CHECK(json::parse(got.body)["tier"] == "gold");
  auto exported = weir.admin("GET", "/tables/csvtiers");
  REQUIRE(exported.status == 200);
  CHECK(json::parse(exported.body).size() == 2);
  // A row is JSON: text/csv there is still a 415.
  auto row = weir::testing::http_request("PUT", weir.admin_url("/tables/csvtiers/c9"), "customer,tier\nc9,gold\n",
                                         {"Content-Type: text/csv"});
  CHECK(row.status == 415);
  CHECK(weir.terminate() == 0);
}

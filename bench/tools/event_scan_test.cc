// EventScanner must agree with nlohmann-json (the exact parser it stands in for) on which
// bodies are JSON and on the top-level id and t it reports; where it answers kFallback the
// sink asks nlohmann itself, so those cases are not compared.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <random>
#include <string>
#include <vector>

#include "bench/tools/event_scan.h"

using weir::bench::EventIdT;
using weir::bench::EventScanner;
using weir::bench::ScanResult;
using json = nlohmann::json;

namespace {

EventIdT scan_ok(const std::string& body) {
  EventIdT e;
  REQUIRE(EventScanner::scan(body, &e) == ScanResult::kOk);
  return e;
}

ScanResult scan(const std::string& body) {
  EventIdT e;
  return EventScanner::scan(body, &e);
}

}  // namespace

TEST_CASE("scanner picks the top-level id and t") {
  EventIdT e = scan_ok(R"({"id":"r1-7","t":1796019930921240,"items":[{"id":"x","t":1}]})");
  CHECK(e.id == std::optional<std::string>("r1-7"));
  CHECK(e.t == std::optional<int64_t>(1796019930921240));

  e = scan_ok(R"( {"a":{"id":"nested","t":5}, "id": 12, "t": 3.5 } )");
  CHECK(e.id == std::optional<std::string>("12"));
  CHECK(e.t == std::optional<int64_t>(3));

  e = scan_ok(R"([{"id":"in-array"}])");
  CHECK_FALSE(e.id.has_value());
  e = scan_ok(R"({"t":1e300})");
  CHECK_FALSE(e.t.has_value());  // not representable: no t rather than a wrapped one
}

TEST_CASE("scanner rejects what is not JSON") {
  for (const char* bad : {"", " ", "not json", "{", "{\"id\":\"x\"", "{\"id\":}", "[1,]", "{,}", "01", "1.", "-",
                          "\"tab\tin\"", "{\"a\":1}x", "tru", "{\"a\" 1}", "\"\\x\"", "\"\\u12G4\""}) {
    INFO(bad);
    CHECK(scan(bad) == ScanResult::kInvalid);
  }
}

TEST_CASE("scanner defers escaped ids and deep nesting to the exact parser") {
  CHECK(scan(R"({"id":"e\"sc"})") == ScanResult::kFallback);
  CHECK(scan(R"({"\u0069d":"x"})") == ScanResult::kFallback);
  CHECK(scan(std::string(100, '[') + std::string(100, ']')) == ScanResult::kFallback);
  CHECK(scan(R"({"other":"e\"sc","id":"plain"})") == ScanResult::kOk);
}

TEST_CASE("scanner agrees with nlohmann on mutated events") {
  const std::vector<std::string> seeds = {
      R"({"id":"a1","t":1796019930921240,"customer_id":"c1","items":[{"sku":"s","qty":"2"}],"x":null,"y":true,"z":false,"n":-1.5e3})",
      R"({"id":12,"t":3.5})",
      R"([1,2,{"id":"x"}])",
      R"("str")",
      R"(  {"a":{"id":"n","t":5},"id":"top"}  )",
      R"({"t":-12,"id":"q\u00e9"})",
      R"({"a":[[[[]]]],"t":0})",
      R"({})",
  };
  const std::string alphabet = "{}[]\":,.-+eE0123456789tfnrulsa \\/\t\nid";
  std::mt19937 rng(42);
  int compared = 0;
  for (int round = 0; round < 100000; ++round) {
    std::string s = seeds[rng() % seeds.size()];
    for (int m = static_cast<int>(rng() % 4); m > 0 && !s.empty(); --m) {
      size_t pos = rng() % s.size();
      char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0: s.erase(pos, 1); break;
        case 1: s.insert(pos, 1, c); break;
        default: s[pos] = c; break;
      }
    }
    EventIdT e;
    ScanResult r = EventScanner::scan(s, &e);
    if (r == ScanResult::kFallback) continue;
    json j = json::parse(s, nullptr, /*allow_exceptions=*/false);
    // nlohmann also refuses numbers that overflow a double; the syntax allows them.
    if (j.is_discarded() && r == ScanResult::kOk && s.find_first_of("eE") != std::string::npos) continue;
    INFO(s);
    REQUIRE((r == ScanResult::kOk) == !j.is_discarded());
    ++compared;
    if (!j.is_object() || s.find("\"id\"") != s.rfind("\"id\"") || s.find("\"t\"") != s.rfind("\"t\""))
      continue;  // duplicate keys: which one wins is not the point here
    auto id = j.find("id");
    if (id != j.end() && id->is_string()) CHECK(e.id == std::optional(id->get<std::string>()));
    if (id != j.end() && id->is_number_integer()) CHECK(e.id == std::optional(id->dump()));
    if (id == j.end()) CHECK_FALSE(e.id.has_value());
    auto t = j.find("t");
    if (t != j.end() && t->is_number_integer()) CHECK(e.t == std::optional(t->get<int64_t>()));
  }
  CHECK(compared > 50000);
}

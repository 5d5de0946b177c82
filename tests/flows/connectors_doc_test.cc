// docs/connectors.md documents exactly the keys the loader accepts (flows/schema.h, the
// table the loader's unknown-key check reads): every section has a heading naming it in
// backticks, and a table row "| `key` |" per key; a documented key the loader would refuse
// fails too.
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "flows/flow.h"
#include "flows/schema.h"

namespace {

std::string read_doc() {
  std::ifstream in(std::string(WEIR_SOURCE_DIR) + "/docs/connectors.md");
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The text under the heading that names `section` in backticks, up to the next heading.
std::optional<std::string> section_text(const std::string& doc, std::string_view section) {
  std::istringstream lines(doc);
  std::string line, body;
  bool inside = false;
  const std::string marker = "`" + std::string(section) + "`";
  for (bool found = false; std::getline(lines, line);) {
    if (line.rfind("#", 0) == 0) {
      if (inside) return body;
      inside = line.find(marker) != std::string::npos;
      found = found || inside;
      continue;
    }
    if (inside) body += line + "\n";
  }
  if (inside) return body;
  return std::nullopt;
}

// Keys in rows "| `key` | ..." of a section.
std::set<std::string> documented_keys(const std::string& text) {
  std::set<std::string> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    auto end = line.find('`', 3);
    if (end != std::string::npos) out.insert(line.substr(3, end - 3));
  }
  return out;
}

}  // namespace

TEST_CASE("docs/connectors.md documents every key the flow loader accepts, and no other", "[docs]") {
  const std::string doc = read_doc();
  REQUIRE_FALSE(doc.empty());
  for (const auto& section : weir::flows::schema::kSections) {
    INFO("section " << section.name);
    auto text = section_text(doc, section.name);
    REQUIRE(text.has_value());
    std::set<std::string> documented = documented_keys(*text);
    for (std::string_view key : section.keys) {
      INFO("key " << key << " is accepted by flows/loader.cc but not documented in docs/connectors.md");
      CHECK(documented.count(std::string(key)) == 1);
    }
    std::set<std::string> accepted(section.keys.begin(), section.keys.end());
    for (const auto& key : documented) {
      INFO("key " << key << " is documented but flows/loader.cc refuses it");
      CHECK(accepted.count(key) == 1);
    }
  }
}

TEST_CASE("the loader checks keys against the schema table the docs test reads", "[docs]") {
  // Every key of from.http in the table loads; one more does not, and the error lists the
  // table's keys (a key near one of them names that one alone: teaching_errors_test.cc).
  const std::string ok =
      "flow: f\nfrom: { http: { path: /in/f, hmac: { secret_env: S, header: X-Sig, scheme: github },"
      " bearer: { token_env: T } } }\nto: { out: { http: { url: \"http://127.0.0.1:9/x\" } } }\n";
  CHECK(weir::flows::load_flow_text(ok, "f.yaml").diagnostics.empty());
  std::string bad = ok;
  bad.replace(bad.find("path:"), 5, "endpoint: /x, path:");
  auto r = weir::flows::load_flow_text(bad, "f.yaml");
  REQUIRE(r.diagnostics.size() == 1);
  std::string message = r.diagnostics[0].str();
  CHECK(message.find("unknown key \"endpoint\" in from.http") != std::string::npos);
  for (std::string_view key : weir::flows::schema::kHttpSource)
    CHECK(message.find(std::string(key)) != std::string::npos);
}

// YAML and JSON documents as position-carrying trees; plain scalar resolution.
#include <catch2/catch.hpp>

#include "flows/source_tree.h"

using namespace weir::flows;

namespace {
std::string first_error(const SourceDoc& d) { return d.diagnostics.empty() ? "" : d.diagnostics[0].str(); }
}  // namespace

TEST_CASE("YAML nodes carry 1-based positions and quoting", "[source]") {
  SourceDoc d = parse_yaml("a: 1\nb:\n  - 'x'\n  - y\nc: |\n  line\n", "f.yaml");
  REQUIRE(d.ok);
  const SrcNode* a = d.root.get("a");
  REQUIRE(a);
  CHECK(a->line == 1);
  CHECK(a->column == 4);
  CHECK_FALSE(a->quoted);
  const SrcNode* b = d.root.get("b");
  REQUIRE(b);
  REQUIRE(b->is_seq());
  CHECK(b->items[0].quoted);
  CHECK(b->items[0].line == 3);
  CHECK(b->items[0].column == 5);
  CHECK_FALSE(b->items[1].quoted);
  const SrcNode* c = d.root.get("c");
  REQUIRE(c);
  CHECK(c->block);
  CHECK(c->text == "line\n");
  CHECK(d.root.keys[1].line == 2);
}

TEST_CASE("JSON nodes carry positions - strings are quoted, numbers plain", "[source]") {
  SourceDoc d = parse_json_source("{\n  \"a\": 1,\n  \"b\": [\"x\", true, null, -2.5e3]\n}", "f.json");
  REQUIRE(d.ok);
  const SrcNode* a = d.root.get("a");
  REQUIRE(a);
  CHECK(a->line == 2);
  CHECK(a->column == 8);
  CHECK_FALSE(a->quoted);
  const SrcNode* b = d.root.get("b");
  REQUIRE(b);
  CHECK(b->items[0].quoted);
  CHECK(b->items[0].column == 9);
  CHECK(b->items[2].is_null());
  CHECK(b->items[3].text == "-2.5e3");
  Json v;
  std::string err;
  REQUIRE(to_plain_json(d.root, &v, &err, nullptr));
  CHECK(v == Json::parse(R"({"a": 1, "b": ["x", true, null, -2500.0]})"));
}

TEST_CASE("JSON: strict syntax with positions", "[source][errors]") {
  CHECK(first_error(parse_json_source("{\"a\": 1,}", "f.json")) ==
        "f.json:1:9: JSON syntax error: expected a string key");
  CHECK(first_error(parse_json_source("[1, 2,]", "f.json")) ==
        "f.json:1:7: JSON syntax error: unexpected character ']'");
  CHECK(first_error(parse_json_source("{\"a\" 1}", "f.json")) ==
        "f.json:1:6: JSON syntax error: expected ':' after the key");
  CHECK(first_error(parse_json_source("\n\n  [01]", "f.json")) ==
        "f.json:3:4: JSON syntax error: leading zeros are not allowed in JSON numbers");
  CHECK(first_error(parse_json_source("\"abc", "f.json")).find("unterminated string") != std::string::npos);
  CHECK(first_error(parse_json_source("\"a\\qb\"", "f.json")).find("invalid escape \\q") != std::string::npos);
  CHECK(first_error(parse_json_source("\"\\ud83d\"", "f.json")).find("surrogate") != std::string::npos);
  CHECK(first_error(parse_json_source("\"\\udc00\"", "f.json")).find("lone low surrogate") != std::string::npos);
  CHECK(first_error(parse_json_source("\"a\tb\"", "f.json")).find("control character") != std::string::npos);
  CHECK(first_error(parse_json_source("{} x", "f.json")).find("unexpected text after") != std::string::npos);
  CHECK(first_error(parse_json_source("", "f.json")).find("file is empty") != std::string::npos);
  CHECK(first_error(parse_json_source("tru", "f.json")).find("unexpected character 't'") != std::string::npos);
  CHECK(first_error(parse_json_source("{\"a\": 1, \"a\": 2}", "f.json")) == "f.json:1:10: duplicate key \"a\"");
  // Surrogate pairs (which yaml-cpp rejects) decode to UTF-8.
  SourceDoc d = parse_json_source("\"\\ud83d\\ude00 \\u00e9\\/\"", "f.json");
  REQUIRE(d.ok);
  CHECK(d.root.text == "\xF0\x9F\x98\x80 \xC3\xA9/");
  // A BOM is skipped.
  CHECK(parse_json_source("\xEF\xBB\xBF{}", "f.json").ok);
}

TEST_CASE("YAML errors and limits", "[source][errors]") {
  CHECK(first_error(parse_yaml("a: [1, 2\n", "f.yaml")).find("f.yaml:") == 0);
  CHECK(first_error(parse_yaml("a: \"x\\qy\"\n", "f.yaml")).find("YAML syntax error") != std::string::npos);
  CHECK(first_error(parse_yaml("", "f.yaml")).find("file is empty") != std::string::npos);
  CHECK(first_error(parse_yaml("a: 1\n---\nb: 2\n", "f.yaml")).find("one YAML document") != std::string::npos);
  CHECK(first_error(parse_yaml("a: 1\na: 2\n", "f.yaml")) == "f.yaml:2:1: duplicate key \"a\"");
  CHECK(first_error(parse_yaml("? [1]\n: 2\n", "f.yaml")).find("mapping keys must be plain strings") !=
        std::string::npos);
  CHECK(first_error(parse_yaml("a: \"\xFF\"\n", "f.yaml")) == "f.yaml:1:5: invalid UTF-8");
  CHECK(first_error(parse_yaml("a: 1\nb: x\xC3(\n", "f.yaml")) == "f.yaml:2:5: invalid UTF-8");
  std::string deep = "a: " + std::string(300, '[') + std::string(300, ']') + "\n";
  CHECK(first_error(parse_yaml(deep, "f.yaml")).find("nesting deeper than") != std::string::npos);
  std::string deep_json = std::string(300, '[') + std::string(300, ']');
  CHECK(first_error(parse_json_source(deep_json, "f.json")).find("nesting deeper than") != std::string::npos);
  std::string big(kMaxSourceBytes + 1, ' ');
  CHECK(first_error(parse_yaml(big, "f.yaml")).find("larger than") != std::string::npos);
  // Billion laughs: aliases are expanded with a budget.
  std::string laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  char prev = 'a';
  for (char c = 'b'; c <= 'j'; ++c) {
    laughs += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 10; ++i) laughs += std::string(i ? ", *" : "*") + prev;
    laughs += "]\n";
    prev = c;
  }
  CHECK(first_error(parse_yaml(laughs, "f.yaml")).find("too large after expanding aliases") != std::string::npos);
  // Small aliases are fine.
  SourceDoc ok = parse_yaml("a: &x {b: 1}\nc: *x\n", "f.yaml");
  REQUIRE(ok.ok);
  CHECK(ok.root.get("c")->get("b")->text == "1");
}

TEST_CASE("plain scalars follow the YAML 1.2 core schema", "[source]") {
  CHECK(resolve_plain_scalar("").is_null());
  CHECK(resolve_plain_scalar("~").is_null());
  CHECK(resolve_plain_scalar("null").is_null());
  CHECK(resolve_plain_scalar("NULL").is_null());
  CHECK(resolve_plain_scalar("true") == true);
  CHECK(resolve_plain_scalar("False") == false);
  CHECK(resolve_plain_scalar("yes") == "yes");  // YAML 1.1 booleans are strings
  CHECK(resolve_plain_scalar("on") == "on");
  CHECK(resolve_plain_scalar("42").is_number_integer());
  CHECK(resolve_plain_scalar("-42") == -42);
  CHECK(resolve_plain_scalar("+42") == 42);
  CHECK(resolve_plain_scalar("0x1F") == 31);
  CHECK(resolve_plain_scalar("0o17") == 15);
  CHECK(resolve_plain_scalar("1.5") == 1.5);
  CHECK(resolve_plain_scalar(".5") == 0.5);
  CHECK(resolve_plain_scalar("1e3").is_number_float());
  CHECK(resolve_plain_scalar("99999999999999999999").is_number_float());
  CHECK(resolve_plain_scalar("1e999") == "1e999");  // out of range: kept as text
  CHECK(resolve_plain_scalar("2s") == "2s");
  CHECK(resolve_plain_scalar("this.a > 1") == "this.a > 1");
  CHECK(resolve_plain_scalar("1.2.3") == "1.2.3");
  CHECK(resolve_plain_scalar("0x") == "0x");
  SourceDoc d = parse_yaml("a: .inf\n", "f.yaml");
  REQUIRE(d.ok);
  Json v;
  std::string err;
  const SrcNode* where = nullptr;
  CHECK_FALSE(to_plain_json(d.root, &v, &err, &where));
  CHECK(err.find("out of range") != std::string::npos);
  REQUIRE(where);
  CHECK(where->line == 1);
}

TEST_CASE("${} substitution applies to values, with positions for missing variables", "[source]") {
  SourceDoc d = parse_yaml("url: ${HOST:-localhost}/x\nname: ${MISSING}\n${KEY}: 1\nlist: [\"$${X}\"]\n", "f.yaml");
  REQUIRE(d.ok);
  std::vector<Diagnostic> diags;
  EnvLookup env = [](const std::string& name) -> std::optional<std::string> {
    if (name == "KEY") return "k";
    return std::nullopt;
  };
  substitute_tree(&d.root, env, "f.yaml", &diags);
  CHECK(d.root.get("url")->text == "localhost/x");
  CHECK(d.root.get("${KEY}") != nullptr);  // keys are left alone
  CHECK(d.root.get("list")->items[0].text == "${X}");
  REQUIRE(diags.size() == 1);
  CHECK(diags[0].str().find("f.yaml:2:7: environment variable MISSING is not set") == 0);
}

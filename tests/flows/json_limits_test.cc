// flows/json_limits: the bounded JSON parse every ingress uses.
#include <bit>
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "flows/json_limits.h"

using weir::flows::check_json;
using weir::flows::JsonError;
using weir::flows::parse_json;

TEST_CASE("a NUL byte anywhere is not JSON, never the end of the text", "[json_limits]") {
  using namespace std::string_literals;
  for (const std::string& text : {"123\0"s, "{\"a\":1}\0junk"s, "\0"s, "[\"a\0b\"]"s}) {
    INFO("text of " << text.size() << " bytes");
    JsonError err;
    CHECK_FALSE(check_json(text, 128, &err));
    CHECK(err.message == "NUL byte in JSON text");
    CHECK(err.byte == text.find('\0') + 1);
    CHECK_FALSE(parse_json(text, 128));
  }
  CHECK(check_json("[\"a\\u0000b\"]", 128));  // an escaped NUL is fine
}

TEST_CASE("depth is checked while parsing: at the limit yes, one past it no", "[json_limits]") {
  std::string at(128, '['), past(129, '[');
  at += std::string(128, ']');
  past += std::string(129, ']');
  CHECK(check_json(at, 128));
  JsonError err;
  CHECK_FALSE(check_json(past, 128, &err));
  CHECK(err.too_deep);
  CHECK(parse_json(at, 128));
  CHECK_FALSE(parse_json(past, 128));
}

namespace {

// check_json's quick scan may only say yes where nlohmann's strict parse does: never the
// other way round. check_json itself must answer exactly as nlohmann does.
void check_agrees(const std::string& text, int max_depth = 128) {
  INFO("text: " << text);
  const bool quick = weir::flows::detail::quick_check_json(text, max_depth);
  const bool reference = weir::flows::detail::nlohmann_check_json(text, max_depth);
  if (quick) CHECK(reference);
  CHECK(check_json(text, max_depth) == reference);
}

// The same DOM down to each value's type (nlohmann's == takes 1, 1u and 1.0 as equal).
bool same_dom(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.type() != b.type()) return false;
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
      if (ia.key() != ib.key() || !same_dom(*ia, *ib)) return false;
    }
    return true;
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!same_dom(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_number_float()) {  // bit for bit: -0.0 and 0.0 are two values here
    return std::bit_cast<std::uint64_t>(a.get<double>()) == std::bit_cast<std::uint64_t>(b.get<double>());
  }
  return a == b;
}

// parse_json's quick half may only build a DOM where nlohmann's parse does, and the same.
void parse_agrees(const std::string& text, int max_depth = 128) {
  INFO("text: " << text);
  const auto quick = weir::flows::detail::quick_parse_json(text, max_depth);
  const auto reference = weir::flows::detail::nlohmann_parse_json(text, max_depth);
  if (quick) {
    REQUIRE(reference);
    CHECK(same_dom(*quick, *reference));
    CHECK(quick->dump() == reference->dump());
  }
  const auto parsed = parse_json(text, max_depth);
  REQUIRE(parsed.has_value() == reference.has_value());
  if (parsed) CHECK(same_dom(*parsed, *reference));
}

}  // namespace

TEST_CASE("parse_json's quick scan builds nlohmann's DOM: value types, escapes, duplicate keys", "[json_limits]") {
  using weir::flows::detail::quick_parse_json;
  const std::vector<std::string> built = {
      R"({"id": "o-17", "t": 1767225600000000, "amount": "123.45", "items": [{"sku": "a", "qty": 2}, {}], "n": null})",
      R"([0, -0, 7, -7, 18446744073709551615, -9223372036854775808, 0.5, -0.0, 1e2, 1E-2, 2.5e+10, 1.5e99, 123456789.123456789e-12])",
      R"(["\"\\\/\b\f\n\r\t", "\u0000\u0041\u00e9\u20ac\uFFFD", "caf\u00e9 \u2603"])",
      "[\"\xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e\"]",
      R"({"a": 1, "a": {"b": [true, false]}, "a": 3, "": ""})",  // the last duplicate wins
      R"(  {"x" : [ [ ] , { } , "" ] }  )",
      "7",
      "\"text\"",
      "true",
      "null",
      "[]",
      "{}"};
  for (const std::string& text : built) {
    INFO("text: " << text);
    CHECK(quick_parse_json(text, 128));
    parse_agrees(text);
  }
  // Left to nlohmann: surrogate escapes, integers past 64 bits, a byte order mark, a double
  // that underflows, depth past the limit, and everything that is not JSON.
  const std::vector<std::string> left = {R"(["\ud834\udd1e"])",
                                         "18446744073709551616",
                                         "-9223372036854775809",
                                         "\xef\xbb\xbf[1]",
                                         "1.7976931348623157e308",
                                         "1e-99999",
                                         "[1e-400]",
                                         "[[1]]",
                                         "[1,]",
                                         "{\"a\"}",
                                         ""};
  for (const std::string& text : left) {
    INFO("text: " << text);
    CHECK_FALSE(quick_parse_json(text, 1));
    parse_agrees(text, 1);
  }
  const std::string underflows = "0." + std::string(400, '0') + "1";  // two exponent digits or none
  CHECK_FALSE(quick_parse_json(underflows, 128));
  parse_agrees(underflows);
  CHECK(parse_json("18446744073709551616", 128)->is_number_float());  // nlohmann's answer
  CHECK(parse_json(R"(["\ud834\udd1e"])", 128)->at(0) == "\xf0\x9d\x84\x9e");
}

TEST_CASE("write_json (dump_safe) writes what nlohmann's dump with the replace handler writes", "[json_limits]") {
  using nlohmann::json;
  const auto nlohmann_dump = [](const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); };
  std::string controls;
  for (int c = 0; c < 0x20; ++c) controls += static_cast<char>(c);
  controls += "\x7f\"\\/ plain";
  const std::vector<json> values = {
      json::parse(R"({"id":"o1","t":1767225600000000,"lines":[{"sku":"a","qty":2,"total":21.0}],"n":null,"ok":true})"),
      json::array({0.0, -0.0, 250.0, 0.1, 1e300, 1e-7, 5e-324, 123456789.125, -1.5e-10, 1e16, 1e15}),
      json::array({std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                   -std::numeric_limits<double>::infinity()}),
      json::array({std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(),
                   std::numeric_limits<std::uint64_t>::max(), 0, -1}),
      json(controls),
      json("caf\xc3\xa9 \xe2\x82\xac \xf0\x9d\x84\x9e"),
      json("bad \xff utf-8 \xc3 and \xed\xa0\x80 a surrogate"),  // replaced by U+FFFD
      json::object({{"k\n\xfe", "v"}, {"", json::object()}, {"arr", json::array()}}),
      json::binary({1, 2, 3}),
      json(),
      json(false),
      json("")};
  for (const json& v : values) {
    INFO(nlohmann_dump(v));
    CHECK(weir::flows::write_json(v) == nlohmann_dump(v));
  }
}

TEST_CASE("the quick JSON scan takes ordinary bodies and says yes only where nlohmann does", "[json_limits]") {
  using weir::flows::detail::quick_check_json;
  const std::string order =
      R"({"id": "o-17", "t": 1767225600000000, "customer_id": "c42", "amount": "123.45", "currency": "EUR",)"
      R"( "ts": "2026-01-01T00:00:00Z", "items": [{"sku": "sku-1", "qty": "2", "price": "10.50"},)"
      R"( {"sku": "sku-2", "qty": "1", "price": "102.45"}]})";
  std::string at_limit(128, '[');
  at_limit += std::string(128, ']');
  // Taken by the scan itself: what webhooks send.
  for (const std::string& text :
       {order, std::string("{}"), std::string("[]"), std::string(" 0 "), std::string("-0"), std::string("1.5e10"),
        std::string("-12.25E-7"), std::string("\"a\""), std::string("true"), std::string("false"), std::string("null"),
        std::string("\t{\"a\" : [1, 2.5, -3e-2, \"x\\n\\u00e9\\/\", {\"b\": null}, []]}\r\n"),
        std::string("[\"\xc3\xa9 \xe2\x82\xac \xf0\x9d\x84\x9e \xed\x9f\xbf \xf4\x8f\xbf\xbf\"]"),
        std::string("[\"a\\u0000b\"]"), at_limit}) {
    INFO("text: " << text);
    CHECK(quick_check_json(text, 128));
    check_agrees(text);
  }
  // Valid, but left to nlohmann (check_json still says yes).
  for (const std::string& text : {std::string("\xef\xbb\xbf{}"), std::string("[\"\\ud834\\udd1e\"]"),
                                  std::string("1e-400"), std::string("1") + std::string(250, '0')}) {
    INFO("text: " << text);
    CHECK_FALSE(quick_check_json(text, 128));
    CHECK(check_json(text, 128));
    check_agrees(text);
  }
  // Not JSON, or too deep for the limit: both say no.
  std::string past(129, '[');
  past += std::string(129, ']');
  for (const std::string& text : {std::string(""),
                                  std::string("  "),
                                  std::string("{\"a\":1,}"),
                                  std::string("[1,]"),
                                  std::string("01"),
                                  std::string("1."),
                                  std::string(".5"),
                                  std::string("+1"),
                                  std::string("-"),
                                  std::string("1e"),
                                  std::string("1e+"),
                                  std::string("\"\x01\""),
                                  std::string("\"\\ud800\""),
                                  std::string("\"\\udc00\""),
                                  std::string("\"\\u12G4\""),
                                  std::string("\"\\x\""),
                                  std::string("\"\xc0\x80\""),
                                  std::string("\"\xed\xa0\x80\""),
                                  std::string("\"\xf5\x80\x80\x80\""),
                                  std::string("\"\xe2\x82\""),
                                  std::string("\"\x80\""),
                                  std::string("tru"),
                                  std::string("nul"),
                                  std::string("truex"),
                                  std::string("[1 2]"),
                                  std::string("{\"a\" 1}"),
                                  std::string("{1:2}"),
                                  std::string("[]]"),
                                  std::string("["),
                                  std::string("{"),
                                  std::string("\"abc"),
                                  std::string("1e999"),
                                  std::string(400, '9'),
                                  std::string("{\"a\":1} x"),
                                  std::string("NaN"),
                                  std::string("'a'"),
                                  std::string("[1,,2]"),
                                  std::string("{,}"),
                                  std::string("{\"a\":}"),
                                  std::string("[\"a\":1]"),
                                  std::string("{\"a\",1}"),
                                  past}) {
    INFO("text: " << text);
    CHECK_FALSE(quick_check_json(text, 128));
    check_agrees(text);
  }
  // Depth: the scan's limit is the caller's.
  CHECK_FALSE(quick_check_json("[[1]]", 1));
  CHECK(quick_check_json("[[1]]", 2));
  CHECK_FALSE(quick_check_json("[]", 0));
  CHECK(quick_check_json("7", 0));
}

TEST_CASE("the quick JSON scan never says yes where nlohmann says no, and builds its DOM: 30,000 mutated bodies",
          "[json_limits]") {
  // Deterministic: a fixed seed, single bytes replaced, inserted or cut from valid bodies,
  // and the bodies cut short, so the scan meets every kind of almost-JSON.
  const std::vector<std::string> seeds = {
      R"({"id":"o1","t":17,"items":[{"sku":"a","qty":"2","price":"10.50"}],"x":[true,false,null,-1.5e3]})",
      "[\"\xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e\", \"\\u00e9\\ud834\\udd1e\\n\", 0.5, 12345678901234567890]",
      R"({"a":{"b":{"c":[[],{},"",0,-0,1E+2]}}})"};
  const std::string alphabet = std::string("{}[]\":,.-+eE0123456789 \t\n\\u/abfnrtlsxdD") +
                               "\x80\xbf\xc3\xed\xf0\xf4\xef";
  std::uint64_t state = 0x9e3779b97f4a7c15ULL;
  auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int quick_yes = 0;
  int quick_built = 0;
  for (int i = 0; i < 30000; ++i) {
    std::string text = seeds[next() % seeds.size()];
    const int edits = 1 + static_cast<int>(next() % 3);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = next() % text.size();
      const char c = alphabet[next() % alphabet.size()];
      switch (next() % 4) {
        case 0: text[at] = c; break;
        case 1: text.insert(at, 1, c); break;
        case 2: text.erase(at, 1); break;
        default: text.resize(at); break;
      }
    }
    const bool quick = weir::flows::detail::quick_check_json(text, 4);
    quick_yes += quick ? 1 : 0;
    if (quick && !weir::flows::detail::nlohmann_check_json(text, 4))
      FAIL("quick scan took what nlohmann refuses: " << text);
    const auto built = weir::flows::detail::quick_parse_json(text, 4);
    if (built.has_value() && !quick) FAIL("quick parse took what the quick scan refuses: " << text);
    quick_built += built ? 1 : 0;
    if (built) {
      const auto reference = weir::flows::detail::nlohmann_parse_json(text, 4);
      if (!reference || !same_dom(*built, *reference)) FAIL("quick parse differs from nlohmann: " << text);
      if (weir::flows::write_json(*built) != reference->dump()) FAIL("write_json differs from nlohmann: " << text);
    }
  }
  CHECK(quick_yes > 1000);  // the mutations also leave valid JSON the scan must take
  CHECK(quick_built > 1000);
}

TEST_CASE("parse_form: fields decoded, repeats as arrays, payload as JSON, errors with their byte", "[json][form]") {
  using weir::flows::parse_form;
  weir::flows::JsonError err;
  auto f = parse_form("a=1&b=x+y%20z&b=2&c&=e&&d=%E2%82%AC", 128, &err);
  REQUIRE(f);
  CHECK(*f == nlohmann::json::parse(R"({"a":"1","b":["x y z","2"],"c":"","":"e","d":"€"})"));
  CHECK(*parse_form("", 128, &err) == nlohmann::json::object());
  // GitHub's payload field: JSON when it is JSON, text otherwise.
  CHECK(*parse_form("payload=%7B%22n%22%3A%5B1%5D%7D", 128, &err) == nlohmann::json::parse(R"({"payload":{"n":[1]}})"));
  CHECK(*parse_form("payload=not+json", 128, &err) == nlohmann::json::parse(R"({"payload":"not json"})"));
  // Errors.
  CHECK_FALSE(parse_form("a=1&b=%4", 128, &err));
  CHECK(err.byte == 7);
  CHECK(err.message == "a '%' not followed by two hex digits");
  CHECK_FALSE(parse_form("a=%C3%28", 128, &err));
  CHECK(err.message == "a field that is not UTF-8 once percent-decoded");
  err = {};
  CHECK_FALSE(parse_form("x=1&payload=%5B%5B%5B%5D%5D%5D", 3, &err));  // depth 3 inside the object: 4
  CHECK(err.too_deep);
  CHECK(err.byte == 13);
  INFO(err.message);
  CHECK(err.message.find("payload is JSON nested deeper than 2 levels inside the event (http.max_depth 3)") == 0);
}

// Bounded JSON parsing for event data: every place that turns event bytes
// into a DOM goes through here, so no event deeper than the limit ever exists as a DOM.
// nlohmann-json parses iteratively, but dump(), copy, compare and destruction recurse
// once per nesting level: a 1 MiB `[[[…]]]` would overflow a thread's stack. The limit
// is checked while parsing (SAX), in one pass, before any recursive walk can happen.
//
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace weir::flows {

// Default for http.max_depth and every other source (docs/configuration.md).
inline constexpr int kDefaultMaxDepth = 128;

struct JsonError {
  bool too_deep = false;  // nesting passed the limit (the text may be valid JSON)
  size_t byte = 0;        // 1-based position of the problem in the text
  std::string message;    // "nested deeper than 128 levels" or the parser's reason
};

// Parses `text`, allowing at most `max_depth` nested arrays and objects (a scalar is
// depth 0, `[]` depth 1). On failure returns nullopt and fills `error` when given.
// The quick scan builds the DOM when it can say yes; nlohmann parses the rest.
std::optional<nlohmann::json> parse_json(std::string_view text, int max_depth, JsonError* error = nullptr);

// Checks `text` as parse_json would, without building a DOM (ingress validation): a quick
// scan first, nlohmann's parse when the scan cannot say yes (errors and their wording).
bool check_json(std::string_view text, int max_depth, JsonError* error = nullptr);

namespace detail {
// check_json's two halves, for tests and benchmarks. quick_check_json: a scan that only says
// true for texts nlohmann accepts within max_depth (false also when unsure, and on every
// error). nlohmann_check_json: nlohmann's strict SAX pass, the authority and the error text.
bool quick_check_json(std::string_view text, int max_depth);
bool nlohmann_check_json(std::string_view text, int max_depth, JsonError* error = nullptr);
// parse_json's first half: the same scan building the DOM nlohmann would (nullopt where the
// scan says no or is unsure; parse_json then asks nlohmann).
std::optional<nlohmann::json> quick_parse_json(std::string_view text, int max_depth);
// parse_json's second half: nlohmann's DOM parser with the depth limit, the authority.
std::optional<nlohmann::json> nlohmann_parse_json(std::string_view text, int max_depth, JsonError* error = nullptr);
}  // namespace detail

// Compact JSON as nlohmann's dump(-1, ' ', false, replace) writes it, byte for byte (keys
// in order, invalid UTF-8 replaced by U+FFFD, non-finite doubles as null), without its
// per-byte escaping pass (ADR 0271). Never throws but for allocation. The flow stage writes
// its outputs with it; flows/value.h's dump_safe is the same function.
std::string write_json(const nlohmann::json& value);

// A broker payload parsed as the `payload` member of its event (one level down): JSON
// within max_depth - 1 levels, nullopt when it is not JSON (the caller keeps it as text).
// When it is JSON but too deep, nullopt with *too_deep set to the reason (dead-letter it).
std::optional<nlohmann::json> parse_payload(std::string_view payload, int max_depth, std::string* too_deep);

// An `application/x-www-form-urlencoded` body as a JSON object (docs/connectors.md, http):
// each `name=value` pair percent-decoded (`+` is a space); a name given more than once
// becomes an array of its values in order; a lone `payload` whose value is JSON (GitHub's
// form deliveries) is that JSON, within max_depth - 1 levels. nullopt with *error (its
// byte 1-based in `body`) for a bad `%` escape, text that is not UTF-8 once decoded, or a
// payload nested too deep (error->too_deep).
std::optional<nlohmann::json> parse_form(std::string_view body, int max_depth, JsonError* error);

// A URL's query (after the `?`) as a JSON object of its fields, decoded as a form body
// (parse_form) but with no field read as JSON. nullopt with *error as parse_form.
std::optional<nlohmann::json> parse_query(std::string_view query, JsonError* error);

// Nesting depth of a DOM, counted without recursion; stops counting past `limit`
// (returns limit + 1 then). For values that did not come from parse_json.
int json_depth(const nlohmann::json& value, int limit);

}  // namespace weir::flows

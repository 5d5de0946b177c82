// Request metadata of http-in events (docs/adr/0312-request-metadata.md): which request
// headers are stored beside the body, which never are, and the bounds of what is stored.
// The loader checks `from.http.meta_headers` with these; http-in builds the metadata.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace weir::flows {

// Names `from.http.meta_headers` may add to the default list.
inline constexpr size_t kMaxMetaHeaderNames = 32;
// The stored metadata (method, path, query, headers) as compact JSON, at most: a request
// whose metadata is larger is refused with 400, nothing stored.
inline constexpr size_t kMaxMetaBytes = 8192;
// Query parameters stored, at most (the same 400 beyond).
inline constexpr size_t kMaxMetaQueryParams = 64;

// The headers every http-in event keeps, lower case: the event-type and delivery headers
// of the common webhook senders (docs/connectors.md has the list with their senders).
const std::vector<std::string>& default_meta_headers();

// Why the header `name` (any case) may never be stored: it is a credential or a signature
// (Authorization, Cookie, a name holding "signature", "token", …, or the flow's own
// `hmac.header`); "" when it may be.
std::string refused_meta_header(std::string_view name, std::string_view hmac_header = {});

// `name` in lower case (header names are ASCII).
std::string lower_header_name(std::string_view name);

// One stored request header: its name in lower case and its value.
struct MetaHeader {
  std::string_view name;
  std::string_view value;
};

// The metadata as stored (Weir-Meta's value): compact JSON with the keys in order,
// {"headers":{…},"method":…,"path":…,"query":…}, headers sorted by name (the first of a
// name kept), ASCII only (a NATS header value is one line of text; invalid UTF-8 becomes
// U+FFFD). `query_json` is the query object's compact JSON ("{}" for none). The text is
// the one nlohmann::json's dump(-1, ' ', true, replace) gives for that object, written
// directly: http-in writes one per request (tests/flows/request_meta_test.cc compares them).
std::string write_request_meta(std::string_view method, std::string_view path, std::string_view query_json,
                               std::vector<MetaHeader> headers);

}  // namespace weir::flows

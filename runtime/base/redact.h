// URLs fit for logs, errors and /status: the one definition for the runtime and every
// connector (HTTP sink, poll, NATS source and sink, the bus). Credentials never leave it:
// userinfo ("user:pass@", "token@") becomes "***@", a query "?***" (names and values: an
// API key may be either), the fragment is dropped. Scheme, host, port and path stay, so
// the line still says where; the markers say that credentials were given.
//
// Pure functions of their argument, any thread. Depends on the standard library alone.
#pragma once

#include <string>
#include <string_view>

namespace weir {

// One URL. Text without "scheme://" is returned as it is, except a leading "…@" (cnats
// takes "token@host:4222").
std::string redact_url(std::string_view url);

// A comma-separated list of URLs (a NATS server list, as `nats.url` takes it), each
// redacted. Not for one HTTP URL: a comma in its query would split it.
std::string redact_urls(std::string_view urls);

}  // namespace weir

// PollSource: the `poll` source — GET a URL every `every`, split the JSON answer into
// events, follow cursor pagination, authenticate with OAuth2 client credentials; a cluster
// singleton (the runtime wraps it in cluster::Singleton when clustered). Design and
// trade-offs: docs/adr/0070-poll-source.md.
//
// One poll: the page at the stored cursor (none: the URL as written) is fetched with the
// spec's headers, and with If-None-Match / If-Modified-Since when the validators of that
// same request URL are known. 304 → nothing. 200 → the body's `split` path selects the
// events (an array: one event per item; any other value: one event; missing: none); each
// is published, and once every event of the page has its PubAck the state is written:
// the next cursor (`cursor_field` of the body) and the page's ETag / Last-Modified. Then
// the next page follows at once, until a page has no cursor (the next poll starts again at
// the first page), repeats its cursor or has no items (the next poll continues from that
// cursor). State lives in `SourceContext::state` under `poll.<flow>.<hash of url>`, so a
// new lease holder resumes at the first page whose events were not all acknowledged.
//
// Event ids (Nats-Msg-Id, so a re-fetched page is stored once within the stream's
// duplicate window): an item with a top-level `id` (string or integer) gets
// `<flow>-id-<id>` (ids over 128 bytes or with unusual characters: `<flow>-id-h<hash>`);
// any other item `<flow>-page-<hash of url, cursor, index and the item>`, so re-fetching
// the same page yields the same ids and a changed item a new one.
//
// OAuth2: POST token_url, form-encoded grant_type=client_credentials, client_id,
// client_secret (from the environment at create time) and scope. The token is reused until
// 30 s before `expires_in` (10% of it for short lifetimes) and fetched again once on a 401.
// Secrets (client secret, tokens, header values) never appear in logs or errors; URLs are
// logged without userinfo or query.
//
// Threading: start/stop from the owner's thread; all polling (curl, state, publishing) on
// one thread of the source's own. stop() returns within about a second: transfers are
// aborted from curl's progress callback, waits are interruptible. Publish callbacks touch
// only shared counters, never the source, so they may outlive it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flows/flow.h"
#include "flows/text.h"
#include "runtime/ports/source.h"

namespace weir::connectors {

struct PollSourceOptions {
  // Looks up client_id_env / client_secret_env; empty: the process environment.
  std::function<std::optional<std::string>(const std::string&)> env;
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds request_timeout{30000};
  std::chrono::milliseconds publish_timeout{5000};
  std::chrono::milliseconds backoff_min{1000};    // first retry after a failed poll
  std::chrono::milliseconds backoff_max{300000};  // doubling up to this
  int max_pages = 1000;                           // per poll; the rest follows next poll
  int64_t max_body = 32 << 20;                    // bytes per response
  size_t max_in_flight = 256;                     // publishes awaiting their PubAck
};

class PollSource final : public Source {
 public:
  // Validates the spec (url http/https, every ≥ 1 ms, cursor_param with cursor_field,
  // header names) and reads the OAuth2 client id and secret from the environment; a
  // missing variable is an error naming it.
  static Result<std::unique_ptr<PollSource>> create(const flows::PollSourceSpec& spec, std::string flow,
                                                    PollSourceOptions options = {});
  ~PollSource() override;
  PollSource(const PollSource&) = delete;
  PollSource& operator=(const PollSource&) = delete;

  Status start(SourceContext& context) override;
  void stop() override;  // idempotent; no publish or state write starts after it returns
  bool singleton() const override { return true; }

  // Counters for tests and logs.
  uint64_t polls() const;             // requests answered (any status)
  uint64_t events_published() const;  // events whose PubAck came back ok
  uint64_t token_fetches() const;     // successful OAuth2 token requests

 private:
  struct Impl;
  explicit PollSource(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---- Pure parts, exposed for unit tests -------------------------------------------------

namespace poll {

// `path` in `value`: dotted segments; a segment of digits indexes an array; "" is the value
// itself. nullptr when any segment is missing.
const flows::Json* select(const flows::Json& value, std::string_view path);

// The events of one response body, per the rules above.
std::vector<flows::Json> split(const flows::Json& body, std::string_view path);

// The next cursor at `field`: a non-empty string, or an integer as text; "" otherwise.
std::string cursor_of(const flows::Json& body, std::string_view field);

// `url` with `param=<cursor>` appended (percent-encoded); `url` itself when cursor is "".
std::string page_url(const std::string& url, const std::string& param, const std::string& cursor);

std::string event_id(std::string_view flow, std::string_view url, std::string_view cursor, size_t index,
                     const flows::Json& item);

// KV key of a flow's poll state: poll.<flow>.<first 16 hex of sha-256(url)>.
std::string state_key(std::string_view flow, std::string_view url);

using flows::sha256_hex;  // flows/text.h: the one copy

// ETag / Last-Modified of one response, for the URL it answered (by hash: URLs may carry
// API keys in their query, and state is not a place for secrets).
struct Validators {
  std::string url_hash;
  std::string etag, last_modified;
  bool empty() const { return etag.empty() && last_modified.empty(); }
  bool operator==(const Validators&) const = default;
};

// What a poll source keeps in SourceState, as JSON.
struct PollState {
  std::string cursor;  // the page to fetch next ("" = the first page)
  Validators first;    // of the page that began the last poll
  Validators last;     // of the last page fetched
  bool operator==(const PollState&) const = default;
  std::string to_json() const;
  // nullopt when the text is not a state this version wrote.
  static std::optional<PollState> from_json(std::string_view text);
  // The validators known for a request to `url` (first or last), or nullptr.
  const Validators* validators_for(std::string_view url) const;
};

// OAuth2 (token cache, token request and answer): runtime/base/oauth2.h, shared with the
// HTTP sink.

using flows::url_encode;  // flows/text.h

}  // namespace poll

}  // namespace weir::connectors

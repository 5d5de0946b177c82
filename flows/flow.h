// weir::flows — the flow file model and its interpreter.
//
// Contract: this library depends on nothing of the runtime (only nlohmann-json and
// yaml-cpp). The CLI (`weir validate`, `weir test`), the runtime's flow stage, tests
// and benchmarks all use it through this header.
//
// Lifecycle: `load_flow_file` parses, validates and compiles a file once. The
// resulting `Flow` is immutable and safe to share between threads; `Flow::run`
// is const and may be called concurrently from any number of threads.
//
// Errors: loading never throws; every problem in a file is a Diagnostic
// (file:line:column). `run` never throws: a data problem is an Outcome of kind kError
// carrying a FlowError. The language is documented in docs/flow-language.md.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace weir::flows {

using Json = nlohmann::json;
using Millis = std::chrono::milliseconds;

// A place in a flow or config file. line and column are 1-based; 0 when unknown.
struct Location {
  std::string file;
  int line = 0;
  int column = 0;
};

// One problem found while loading a file. `str()` gives "file:line:column: message".
struct Diagnostic {
  Location where;
  std::string message;
  std::string str() const;
};

// ---- Sources (`from:`), exactly one per flow -----------------------------------------

struct HmacSpec {
  // docs/connectors.md, `from.http`: the header, signed content and timestamp rule of each.
  enum class Scheme { kGithub, kStandard, kStripe, kSlack, kShopify };
  std::string secret_env;                      // name of the env variable holding the secret
  std::string header = "X-Hub-Signature-256";  // github scheme only
  Scheme scheme = Scheme::kGithub;
};

struct HttpSourceSpec {
  std::string path;        // starts with '/'
  std::string path_shown;  // for answers and logs: as written when it reads the environment (`/in/${HOOK}`)
  std::optional<HmacSpec> hmac;
  std::optional<std::string> bearer_token_env;  // `bearer: {token_env: NAME}`
  // `meta_headers:` beyond flows/request_meta.h's default list, lower case, each once
  // (docs/adr/0312-request-metadata.md).
  std::vector<std::string> meta_headers;
};

struct MqttSourceSpec {
  std::string broker;               // tcp://host:port or ssl://host:port
  std::vector<std::string> topics;  // `topic:` (string) or `topics:` (list)
  int qos = 1;                      // 0 or 1
  std::string client_id;            // default: weir-<flow>
  bool clean_session = false;
  std::string username_env, password_env;
  std::string ca_file, cert_file, key_file;  // TLS, optional
  bool insecure_skip_verify = false;
};

struct NatsSourceSpec {
  std::string subject;
  std::string queue;  // default: weir-<flow>
};

struct TimerSourceSpec {
  std::optional<Millis> every;    // exactly one of every / cron
  std::string cron;               // 5-field cron expression
  Json payload = Json::object();  // the event each tick emits (plus tick fields)
};

// OAuth2 client credentials (RFC 6749 §4.4): `oauth2:` of a poll source and of an HTTP
// sink. The client id and secret are read from the environment by the connector at start.
struct OAuth2Spec {
  std::string token_url, client_id_env, client_secret_env;
  std::vector<std::string> scopes;
};

struct PollSourceSpec {
  std::string url;
  Millis every{60000};
  std::map<std::string, std::string> headers;
  std::string split;         // path of the array to split into events ("" = whole body)
  std::string cursor_field;  // response field holding the next cursor ("" = none)
  std::string cursor_param;  // query parameter that carries the cursor
  using OAuth2 = OAuth2Spec;
  std::optional<OAuth2> oauth2;
};

struct ExecSourceSpec {
  std::vector<std::string> command;  // argv; no shell
  std::string format = "json";       // json | text
  int64_t max_line = 1 << 20;        // bytes
  // Names of weir's environment variables the command sees besides PATH, HOME and LANG
  // (`env:`); nothing else is passed, so secrets meant for weir stay with weir.
  std::vector<std::string> env;
};

struct FlowSourceSpec {
  std::string flow;  // `from: {flow: other.sink}`
  std::string sink;
};

using SourceSpec = std::variant<HttpSourceSpec, MqttSourceSpec, NatsSourceSpec, TimerSourceSpec, PollSourceSpec,
                                ExecSourceSpec, FlowSourceSpec>;

// ---- Sinks (`to:`), one or more, by name ---------------------------------------------

// A sink's retry schedule (`retry:`; docs/adr/0295-durable-retry-schedule.md): after the
// k-th failed attempt of an event the next waits backoff[k-1] (the last step repeats), and
// an event failing for give_up_after since its first failure is dead-lettered.
struct RetrySpec {
  std::vector<Millis> backoff{std::chrono::seconds(1), std::chrono::seconds(5),  std::chrono::seconds(30),
                              std::chrono::minutes(2), std::chrono::minutes(10), std::chrono::minutes(30),
                              std::chrono::hours(1)};
  Millis give_up_after{std::chrono::hours(72)};
  // The wait after `failed` failed attempts (1-based), before jitter.
  Millis after(uint64_t failed) const {
    if (backoff.empty()) return Millis(1000);
    const size_t i = failed == 0 ? 0 : static_cast<size_t>(std::min<uint64_t>(failed, backoff.size()) - 1);
    return backoff[i];
  }
};
// `retries: N` on a sink: an attempt cap for those who want one (dead-lettered after N + 1
// attempts); unset, only `retry.give_up_after` ends an event's retries.
inline constexpr int kNoRetryCap = -1;

class EventExpression;

// `sign:` on an HTTP sink (docs/adr/0300-outbound-webhook-signatures.md): which signature
// headers every request carries and the environment variables holding the secrets, read
// when the sink starts. Empty `secret_envs`: not signed.
struct HttpSignSpec {
  enum class Scheme { kStandard, kGithub };
  Scheme scheme = Scheme::kStandard;
  std::vector<std::string> secret_envs;  // `secret_env: A` or `secrets_env: [NEW, OLD]`
};

struct HttpSinkSpec {
  // The fixed URL; with `url: {base, expr, allow}` the base, scheme://host[:port]
  // (docs/adr/0317-per-event-urls.md).
  std::string url;
  // `url: {base, expr, allow}`: the URL of each delivery computed from the event: a path
  // (and query) on `url`, or a whole URL on `url`'s origin or one of `url_allow`'s. null =
  // every delivery goes to `url`.
  std::shared_ptr<const EventExpression> url_expr;
  std::vector<std::string> url_allow;  // origins as written: "https://host[:port]"
  std::string method = "POST";
  std::map<std::string, std::string> headers;
  Millis timeout{5000};
  int retries = kNoRetryCap;
  RetrySpec retry;
  int max_connections = 8;
  // `rate: 200/s` (also /min, /h): deliveries per second this instance sends at most, with
  // a burst of TokenBucket::default_burst (runtime/base/token_bucket.h); 0 = no limit.
  // `rate` is the text as written, for logs. docs/adr/0296-per-instance-rate-limits.md.
  double rate_per_s = 0;
  std::string rate;
  // `order_by: this.customer_id`: events with the same key are delivered one at a time, in
  // stream order; null = no order (docs/adr/0310-per-key-order.md).
  std::shared_ptr<const EventExpression> order_by;
  // `headers: {Name: {expr: …}}`: header values computed per event, compiled by the loader
  // (docs/adr/0301-http-sink-header-expressions.md); fixed headers stay in `headers`.
  std::map<std::string, std::shared_ptr<const EventExpression>> header_exprs;
  HttpSignSpec sign;

  // Authenticating to the receiver (docs/adr/0302-http-sink-tls-and-oauth2.md).
  // `tls:` (an https:// url only): ca_file replaces the system trust store for this sink;
  // cert_file and key_file (together) are the client certificate for mTLS. Paths as the
  // loader resolved them (relative to the flow file); the sink reads them at start.
  struct Tls {
    std::string ca_file, cert_file, key_file;
  };
  std::optional<Tls> tls;
  // `oauth2:`: a client-credentials token in `Authorization: Bearer`, cached and refreshed.
  std::optional<OAuth2Spec> oauth2;
};

class Expression;

// An expression over the event that a connector evaluates per event, compiled by the
// loader (so a typo is a load error, not a literal): the MQTT sink's `topic: {expr: …}`.
// Immutable; eval_string may be called from any number of threads at once.
class EventExpression {
 public:
  EventExpression(std::string text, std::shared_ptr<const Expression> compiled);
  const std::string& text() const { return text_; }
  // The value over `event` when it is a string; false with *error (evaluation failed, or
  // the value is not a string).
  // `meta`: the event's request metadata as JSON text (Flow::run), read as `meta`.
  bool eval_string(const Json& event, std::string* out, std::string* error, std::string_view meta = {}) const;
  // The value over `event` as a key (`order_by:`): a string as it is, any other value as
  // its JSON text (42, null, true); false with *error when evaluation failed.
  bool eval_key(const Json& event, std::string* out, std::string* error, std::string_view meta = {}) const;

 private:
  std::string text_;
  std::shared_ptr<const Expression> compiled_;
};

struct MqttSinkSpec {
  std::string broker;                                 // one of schema::kMqttSinkSchemes
  std::string topic;                                  // `topic: out/orders`: the topic as written ("" with topic_expr)
  std::shared_ptr<const EventExpression> topic_expr;  // `topic: {expr: …}` (docs/adr/0181)
  int qos = 1;
  bool retain = false;
  std::string client_id;
  std::string username_env, password_env;
  int retries = kNoRetryCap;
};

struct NatsSinkSpec {
  std::string subject;
};

struct FlowSinkSpec {};  // `to: {x: {flow: {}}}`: other flows read it with `from: {flow: this.x}`

struct SinkSpec {
  std::string name;
  std::variant<HttpSinkSpec, MqttSinkSpec, NatsSinkSpec, FlowSinkSpec> kind;
  Location where;
};

// ---- Running a flow -------------------------------------------------------------------

// A run-time flow error: names the step and the expression that failed.
struct FlowError {
  std::string flow;
  int64_t version = 0;
  int step = -1;           // 0-based index in `steps` (nested steps: the top-level index)
  std::string expression;  // the expression's text
  std::string message;
  std::string step_path;    // the step's kind and place: "set", "branch arm 1 > filter"
  std::string str() const;  // one line, for logs and dead-letter headers
};

// What one event became. One output per input, to one sink or (a `to:` list, a fan-out;
// docs/adr/0299-fan-out.md) to several: branch takes the first arm.
struct Outcome {
  enum class Kind { kEmit, kDropped, kError };
  Kind kind = Kind::kEmit;
  std::string sink;               // kEmit: the sink name it routes to (a fan-out's first)
  std::vector<std::string> also;  // kEmit: a fan-out's other sinks, as written (else empty)
  Json event;                     // kEmit: the output event; kError: the event as it
                                  // was when the step failed (for debugging only)
  FlowError error;                // kError

  // kEmit: whether the event goes to `name` (`sink` or one of `also`).
  bool goes_to(std::string_view name) const;
};

enum class OnError { kDlq, kDrop };

class Program;  // compiled steps; private to the library

// A setting that names the environment variable holding a secret (`hmac.secret_env`,
// `bearer.token_env`, `username_env`, `oauth2.client_secret_env`, …) and where it is written.
struct SecretVariable {
  std::string variable;        // GITHUB_SECRET
  std::string setting;         // from.http.hmac.secret_env
  Location where;              // of the variable's name in the flow file
  bool empty_allowed = false;  // MQTT user names and passwords may be empty
};

class Flow {
 public:
  const std::string& name() const { return name_; }
  int64_t version() const { return version_; }
  // Hex sha-256 of the file bytes. Computed on the first call (thread-safe), not at load:
  // standalone start-up never needs it, and OpenSSL's first digest (library and provider
  // initialisation) would otherwise sit on the compile path (ADR 0215).
  const std::string& content_hash() const;
  const std::string& file() const { return file_; }
  const SourceSpec& source() const { return source_; }
  const std::vector<SinkSpec>& sinks() const { return sinks_; }
  OnError on_error() const { return on_error_; }
  const Json& tests() const { return tests_; }  // the `tests:` list, as written
  // Every secret variable the flow's connectors read when they start, in file order.
  const std::vector<SecretVariable>& secret_variables() const { return secret_variables_; }

  // Runs the steps over one event. Never throws for data reasons: a type error is
  // Outcome::Kind::kError. Thread-safe. `meta`: the event's request metadata, the JSON text
  // of its Weir-Meta header (docs/adr/0312-request-metadata.md); empty when it has none.
  Outcome run(Json event, std::string_view meta = {}) const;

  // A flow without steps forwards each event unchanged to its one sink (its bytes kept): that
  // sink's name; "" when the flow has steps. The runtime then skips run() and keeps the
  // event's bytes.
  const std::string& pass_through_sink() const;

  // Set by the runtime when a registry assigns versions (cluster deploys).
  void set_version(int64_t v) { version_ = v; }

  ~Flow();
  Flow();
  Flow(Flow&&) noexcept;
  Flow& operator=(Flow&&) noexcept;

 private:
  friend struct FlowBuilder;
  struct ContentHash;
  std::string name_, file_;
  std::unique_ptr<ContentHash> hash_;
  int64_t version_ = 1;
  SourceSpec source_;
  std::vector<SinkSpec> sinks_;
  OnError on_error_ = OnError::kDlq;
  Json tests_;
  std::vector<SecretVariable> secret_variables_;
  std::unique_ptr<Program> program_;
};

// The secret variables of `flow` that `env` leaves unset (or empty, where a value is
// required), one "file:line:column" diagnostic each that names the variable and the
// setting, never a value: `weir validate` warns with them, `weir run` refuses to start.
std::vector<Diagnostic> unset_secret_variables(
    const Flow& flow, const std::function<std::optional<std::string>(const std::string&)>& env);

struct LoadResult {
  std::shared_ptr<const Flow> flow;     // null when diagnostics is not empty
  std::vector<Diagnostic> diagnostics;  // every problem found, not only the first
};

// Loads a flow file (.yaml, .yml or .json; .json is parsed as strict JSON). `${NAME}` /
// `${NAME:-default}` are substituted from the environment. Tables are read relative to
// the file's folder.
LoadResult load_flow_file(const std::string& path);
// Same, from text already in memory (`name` is used in diagnostics and for tables'
// folder). Used by deploys through the admin API.
LoadResult load_flow_text(const std::string& text, const std::string& name);

struct LoadOptions {
  // Resolves `${NAME}`; empty: the process environment. Tests inject their own.
  std::function<std::optional<std::string>(const std::string&)> env;
  // false: `tables:` may only give rows inline, no `file:` is read. A flow deployed
  // over the network should not name files on the server (it could read any of them).
  bool allow_table_files = true;
  // false (a flow sent over the network, docs/adr/0101, docs/adr/0274): `${NAME}` reads
  // the environment only for the names `env_allowed` admits, and anywhere under `from:`
  // and `to:` when `wiring_kept` (the caller checked before compiling that they are the
  // running version's, written by the operator). Any other `${NAME}` is an error that
  // names the variable, never a value: a deploy cannot read the server's environment back.
  bool substitute_env = true;
  bool wiring_kept = true;
  std::function<bool(const std::string&)> env_allowed;  // empty: no name
};
LoadResult load_flow_file(const std::string& path, const LoadOptions& options);

// A flow text's `flow`, `from` and `to`, each as text that ignores how it was written (flow
// or block style, quoting, key order: `path: "/in/x"` and `path: /in/x` are the same
// wiring), read with the loader's limits (size, depth, nodes after aliases; an alias
// cycle is an error) before anything walks it. nullopt with *error when it does not parse.
struct Wiring {
  std::string flow, from, to;
};
std::optional<Wiring> read_wiring(const std::string& text, std::string* error);
LoadResult load_flow_text(const std::string& text, const std::string& name, const LoadOptions& options);

}  // namespace weir::flows

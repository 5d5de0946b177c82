// Schema: the keys the flow loader accepts in each mapping of a flow file, per section.
// One table for two readers: the loader's unknown-key check (flows/loader.cc) and the test
// that docs/connectors.md documents every one of them (tests/flows/connectors_doc_test.cc),
// so a key added here without its line in the docs fails the build's tests.
// Constant data; safe from any thread.
#pragma once

#include <span>
#include <string_view>

namespace weir::flows::schema {

using Keys = std::span<const std::string_view>;

inline constexpr std::string_view kFlowFile[] = {"flow",  "description", "from",     "tables",
                                                 "steps", "to",          "on_error", "tests"};
// Sources (`from: {<kind>: {...}}`); `from.flow` takes a string, no keys.
inline constexpr std::string_view kHttpSource[] = {"path", "hmac", "bearer", "meta_headers"};
inline constexpr std::string_view kHttpSourceHmac[] = {"secret_env", "header", "scheme"};
inline constexpr std::string_view kHttpSourceBearer[] = {"token_env"};
inline constexpr std::string_view kMqttSource[] = {
    "broker",       "topic",        "topics",  "qos",       "client_id", "clean_session",
    "username_env", "password_env", "ca_file", "cert_file", "key_file",  "insecure_skip_verify"};
inline constexpr std::string_view kNatsSource[] = {"subject", "queue"};
inline constexpr std::string_view kTimerSource[] = {"every", "cron", "payload"};
inline constexpr std::string_view kPollSource[] = {"url",          "every",        "headers", "split",
                                                   "cursor_field", "cursor_param", "oauth2",  "oauth"};
inline constexpr std::string_view kPollSourceOauth2[] = {"token_url", "client_id_env", "client_secret_env", "scopes",
                                                         "insecure_http"};
inline constexpr std::string_view kExecSource[] = {"command", "format", "max_line", "env"};
// Sinks (`to: {<name>: {<kind>: {...}}}`); `flow: {}` takes no keys.
inline constexpr std::string_view kHttpSink[] = {
    "url", "method", "headers", "timeout", "retries", "retry", "max_connections", "rate", "order_by", "sign",
    // authenticating to the receiver (docs/adr/0302-http-sink-tls-and-oauth2.md)
    "tls", "oauth2"};
inline constexpr std::string_view kHttpSinkUrl[] = {"base", "expr", "allow"};  // `url: {…}`, ADR 0317
inline constexpr std::string_view kHttpSinkRetry[] = {"backoff", "give_up_after"};
inline constexpr std::string_view kHttpSinkHeaderExpr[] = {"expr"};  // `headers: {Name: {expr: …}}`
inline constexpr std::string_view kHttpSinkSign[] = {"scheme", "secret_env", "secrets_env"};
inline constexpr std::string_view kHttpSinkTls[] = {"ca_file", "cert_file", "key_file"};
inline constexpr std::string_view kHttpSinkOauth2[] = {"token_url", "client_id_env", "client_secret_env", "scope",
                                                       "insecure_http"};
inline constexpr std::string_view kMqttSink[] = {"broker",    "topic",        "qos",          "retain",
                                                 "client_id", "username_env", "password_env", "retries"};
inline constexpr std::string_view kMqttSinkTopic[] = {"expr"};  // `topic: {expr: …}`
inline constexpr std::string_view kNatsSink[] = {"subject"};
// Tables and the steps with mappings.
inline constexpr std::string_view kTable[] = {"file", "key", "rows", "kv"};
inline constexpr std::string_view kLookupStep[] = {"table", "key", "as", "default"};
inline constexpr std::string_view kBranchArm[] = {"when", "steps", "to"};

// MQTT broker URL schemes (`scheme://host[:port]`), the one list the loader and the MQTT
// connectors check. The source speaks MQTT 3.1.1 itself over TCP or TLS
// (connectors/mqtt/mqtt_transport, docs/adr/0060); the sink publishes through Paho C 1.3.12
// (Debian 12), which also speaks MQTT over WebSocket. TLS: ssl, mqtts, wss.
inline constexpr std::string_view kMqttSourceSchemes[] = {"tcp", "mqtt", "ssl", "mqtts"};
inline constexpr std::string_view kMqttSinkSchemes[] = {"tcp", "mqtt", "ssl", "mqtts", "ws", "wss"};
inline constexpr std::string_view kMqttTlsSchemes[] = {"ssl", "mqtts", "wss"};

struct Section {
  std::string_view name;  // as docs/connectors.md heads it: "from.http", "to.<name>.http", ...
  Keys keys;
};

inline constexpr Section kSections[] = {
    {"flow file", kFlowFile},
    {"from.http", kHttpSource},
    {"from.http.hmac", kHttpSourceHmac},
    {"from.http.bearer", kHttpSourceBearer},
    {"from.mqtt", kMqttSource},
    {"from.nats", kNatsSource},
    {"from.timer", kTimerSource},
    {"from.poll", kPollSource},
    {"from.poll.oauth2", kPollSourceOauth2},
    {"from.exec", kExecSource},
    {"to.<name>.http", kHttpSink},
    {"to.<name>.http.retry", kHttpSinkRetry},
    {"to.<name>.http.headers.<header>", kHttpSinkHeaderExpr},
    {"to.<name>.http.sign", kHttpSinkSign},
    {"to.<name>.http.url", kHttpSinkUrl},
    {"to.<name>.http.tls", kHttpSinkTls},
    {"to.<name>.http.oauth2", kHttpSinkOauth2},
    {"to.<name>.mqtt", kMqttSink},
    {"to.<name>.mqtt.topic", kMqttSinkTopic},
    {"to.<name>.nats", kNatsSink},
    {"tables.<name>", kTable},
    {"lookup", kLookupStep},
    {"branch arm", kBranchArm},
};

}  // namespace weir::flows::schema

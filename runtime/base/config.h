// RuntimeConfig: weir.yaml (docs/configuration.md) merged with command-line flags.
// Loading is an edge: errors are thrown as ConfigError (exit code 2 in main) with
// "file:line:column: field: message". Every key is optional; unknown keys are errors.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace weir {

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A listener's certificate (docs/configuration.md, ADR 0305): both PEM files, or neither
// (plain HTTP). Re-read on SIGHUP (ADR 0306).
struct TlsFiles {
  std::string cert_file;  // the certificate chain, leaf first
  std::string key_file;   // its private key (unencrypted PEM)
  bool enabled() const { return !cert_file.empty(); }
};

struct RuntimeConfig {
  struct Nats {
    std::string url;  // empty: spawn the embedded nats-server
    std::string creds;
    int replicas = 1;  // stream and KV replicas (3 on a NATS cluster)
    // Each flow's stream (docs/adr/0080-backlog-admission.md); shared out at start (down
    // to 8 MiB, logged) when the server's JetStream storage (max_file_store) has less room.
    int64_t stream_max_bytes = int64_t{1} << 30;
    // Threads of cnats' shared delivery pool: the threaded connection's callbacks (ADR 0150, 0258).
    int delivery_threads = 2;
  } nats;
  std::string data_dir = "./weir-data";
  struct Http {
    std::string listen = "127.0.0.1:8080";
    int64_t max_body = 1 << 20;
    int64_t max_header = 16 * 1024;
    std::chrono::milliseconds read_timeout{10000};
    std::chrono::milliseconds ack_timeout{5000};  // PubAck wait before answering 503
    int max_depth = 128;                          // JSON nesting limit at every source
    int max_connections = 4096;                   // open ingress connections; past it 503 and close
    // Open connections from one client address; past it 503 and close. 0: a quarter of
    // max_connections (docs/connectors.md, http-in).
    int max_connections_per_client = 0;
    // A keep-alive connection older than this is closed after its next answer.
    std::chrono::milliseconds max_connection_age{300000};
    TlsFiles tls;  // set: http-in speaks HTTPS only
  } http;
  struct Admin {
    std::string listen = "127.0.0.1:8081";
    std::string token_env;
    int max_connections = 256;           // open admin connections; past it 503 and close
    int max_connections_per_client = 0;  // as http.max_connections_per_client
    // What a flow sent over the network (a deploy, a registry version) may do beyond its
    // steps (docs/adr/0274, docs/admin-api.md "What the token grants"): run an `exec`
    // source, read these environment variables with `${NAME}`, and reach these hosts from
    // its HTTP, poll and MQTT connectors (empty: any host).
    bool allow_exec = false;
    std::vector<std::string> allow_env;
    std::vector<std::string> allow_hosts;
    TlsFiles tls;  // set: the admin API speaks HTTPS only
  } admin;
  std::string flows = "./flows";
  struct Cluster {
    std::string name;
    std::chrono::milliseconds lease_ttl{1000};  // docs/adr/0040-leases.md
  } cluster;
  struct Log {
    std::string level = "info";
    std::string format = "text";
  } log;
  struct Dlq {                             // dead-letter retention; 0 = no limit (ADR 0090)
    std::chrono::milliseconds max_age{0};  // dead letters older than this expire
    int64_t max_bytes = 0;                 // past it the stream refuses writes: stages hold
  } dlq;
  struct Tables {                        // KV lookup tables (ADR 0120); past a limit a write is 413
    int max_entries = 1'000'000;         // rows per table
    int64_t max_value_bytes = 64 << 10;  // one row, as JSON
    int max_tables = 64;                 // tables one instance reads (a KV bucket and a watcher each)
  } tables;
  struct Trace {                // OTLP/HTTP span export (ADR 0141); off without an endpoint
    std::string otlp_endpoint;  // full URL, e.g. http://127.0.0.1:4318/v1/traces
    std::string service_name = "weir";
    int max_queue = 2048;  // spans waiting for export; past it they are dropped
  } trace;
  std::chrono::milliseconds drain_timeout{10000};
  // Ingress backpressure (ADR 0080): a source's event is refused (http-in: 503
  // + Retry-After) while its flow's stream holds `max_bytes` / `max_events`, or while the
  // process has `max_pending` events waiting for their PubAck.
  struct Backlog {
    int64_t max_bytes = 0;  // 0: 3/4 of nats.stream_max_bytes
    int64_t max_events = 100000;
    int max_pending = 10000;
    // Opt-in latency bound (ADR 0085): while the flow delivers, refuse past what it drains
    // in this long at its recent rate. 0 = off (a burst is stored up to the size bounds).
    std::chrono::milliseconds max_delay{0};
    // How many nice steps (Linux, 0-19) the io thread — http-in and the admin API — runs
    // below the process's other threads (ADR 0268): when the CPU is short, delivery gets it
    // first and ingest slows to the rate the flows deliver at. 0 = the same priority.
    int ingress_nice = 10;
    // The bound in force: max_bytes, or its default from the stream size.
    int64_t bytes_bound(int64_t stream_max_bytes) const { return max_bytes > 0 ? max_bytes : stream_max_bytes / 4 * 3; }
  } backlog;
  int max_deliver = 5;  // a stage dead-letters an event on this delivery (poison events: ADR 0081)
  // Loop threads for the flow and sink stages (ADR 0272): 1 = one shared thread and NATS
  // connection ("weir-delivery"), 2 = one each ("weir-flows", "weir-sinks"), 0 = auto:
  // 1 when this process may use fewer than 4 CPUs, else 2.
  int delivery_loops = 0;
  int delivery_loops_in_force() const;
  std::string config_file;  // where it came from ("" = defaults only)
};

// The CPUs this process may run on (its affinity mask), at least 1.
int usable_cpus();

// Reads `path` (YAML); `${NAME}` / `${NAME:-default}` substituted from the environment.
RuntimeConfig load_runtime_config(const std::string& path);

}  // namespace weir

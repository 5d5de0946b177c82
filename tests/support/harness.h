// Integration-test harness: the weir binary and weir-sink as black boxes, driven
// only through their documented surface (CLI and weir.yaml: docs/operations.md, docs/configuration.md; flow files:
// docs/flow-language.md; admin API and ingress answers: docs/admin-api.md).
//
// Contract:
// - WeirProcess owns a TempDir holding weir.yaml, the flows directory, the data
//   dir and the log; it spawns WEIR_BINARY with port 0 for http-in and admin, reads
//   the bound ports from weir's `listening http=… admin=…` log line, and
//   keeps those ports across restarts (clients and the sink see the same addresses).
//   No port is probed and released first, so no other process can take it meanwhile.
// - SinkProcess spawns weir-sink on a free port and wraps its control API.
// - Posters runs N client threads posting JSON events over keep-alive
//   connections and records which ids were acknowledged (2xx).
// - All helpers throw std::runtime_error on harness failures (with the child's log),
//   which Catch reports as a failed test; children die with their owner.
// - One test thread uses a WeirProcess / SinkProcess at a time; Posters' own
//   threads only touch its internal, mutex-guarded state.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/base/thread_annotations.h"  // header-only: the lock annotations (ADR 0210)
#include "tests/support/support.h"

namespace weir::itest {

using json = nlohmann::json;
using namespace std::chrono_literals;
using weir::testing::HttpReply;

// Path of the weir binary and of weir-sink under test ("" when not built); the
// environment variables WEIR_BINARY / WEIR_SINK_BINARY override the built ones.
std::string weir_binary();
std::string sink_binary();

// ---------------------------------------------------------------- weir-sink

class SinkProcess {
 public:
  // extra_args: e.g. {"--fail-first", "300", "--fail-status", "503"}. port 0: a free
  // one; a given port lets a test start the sink where weir already delivers.
  explicit SinkProcess(std::vector<std::string> extra_args = {}, int port = 0);
  int port() const { return port_; }
  std::string url(const std::string& path = "/out") const;

  json stats() const;                        // GET /stats
  void reset() const;                        // POST /reset
  void control(const json& settings) const;  // POST /control
  json requests(int limit) const;            // GET /requests?limit=N → array
  // GET /ids: the top-level "id" of every delivered (2xx-answered) body, once each.
  std::set<std::string> ids() const;
  int64_t stat(const std::string& key) const;  // stats()[key] as a number; throws when absent
  std::string log() const { return proc_.read_log(); }

 private:
  weir::testing::TempDir dir_;
  weir::testing::Process proc_;
  int port_ = 0;
};

// ---------------------------------------------------------------- weir

// The sink retry schedule the fault tests were written against: 200 ms doubling, as weir
// retried before the schedule of ADR 0295 (whose default starts 1 s, 5 s, 30 s); a literal,
// so `"retries: 8, " WEIR_TEST_RETRY` is one string.
#define WEIR_TEST_RETRY "retry: {backoff: [200ms, 400ms, 800ms, 1600ms, 3200ms, 6400ms, 12800ms, 25600ms]}"

// A flow file (docs/flow-language.md) with an http source and one http sink named `out`.
// `source_extra` / `sink_extra` are added inside the braces (", hmac: {...}").
std::string http_flow(const std::string& name, const std::string& path, const std::string& sink_url,
                      const std::string& sink_extra = "retries: 8, " WEIR_TEST_RETRY ", timeout: 2s",
                      const std::string& source_extra = "");

struct WeirOptions {
  std::string nats_url;                      // "" = embedded nats-server
  std::map<std::string, std::string> flows;  // file name in the flows dir → content
  std::string config;                        // weir.yaml content; "" = no --config
  std::map<std::string, std::string> env;    // added to the environment
  // Pass --flows/--data-dir/--http/--admin (and --nats) as flags. When false, the
  // config must carry them (use the {HTTP} {ADMIN} {DATA} {FLOWS} {NATS} placeholders).
  bool use_flags = true;
  std::vector<std::string> args;  // more `weir run` flags, e.g. {"--cluster", "c1"}
};

class WeirProcess {
 public:
  explicit WeirProcess(WeirOptions options);
  ~WeirProcess();

  // Spawns weir (does not wait). Placeholders {HTTP} {ADMIN} {DATA} {FLOWS} {NATS}
  // {DIR} in config and flow files are replaced with this instance's values.
  void spawn();
  // Waits for GET /readyz → 200; false on timeout or when weir exited.
  bool wait_ready(std::chrono::milliseconds timeout = 30s);
  // spawn() + wait_ready(), throwing with the log on failure.
  void start();
  // kill -9, reap.
  void kill9();
  // SIGTERM; exit code (nullopt: still running after timeout).
  std::optional<int> terminate(std::chrono::milliseconds timeout = 15s);

  weir::testing::Process& process() { return proc_; }
  bool running() { return proc_.running(); }
  std::string log() const { return proc_.read_log(); }
  const std::string& dir() const { return dir_.path(); }
  std::string flows_dir() const { return dir_.path() + "/flows"; }
  std::string data_dir() const { return dir_.path() + "/data"; }
  std::string config_path() const { return dir_.path() + "/weir.yaml"; }
  std::string flow_path(const std::string& file) const { return flows_dir() + "/" + file; }
  // The bound ports; wait (up to 30 s) for weir to report them after the first spawn.
  int http_port() const;
  int admin_port() const;
  std::string ingress_url(const std::string& path) const;
  std::string admin_url(const std::string& path) const;

  HttpReply post(const std::string& path, const std::string& body, std::vector<std::string> headers = {},
                 std::chrono::milliseconds timeout = 10s) const;
  HttpReply admin(const std::string& method, const std::string& path, const std::string& body = "",
                  std::vector<std::string> headers = {}) const;

  // Everything needed to understand a failure: exit state and the log's tail.
  std::string describe() const;

 private:
  std::string expand(std::string text) const;
  // Reads the ports from this spawn's `listening` log line; true once known.
  bool learn_ports() const;
  void ensure_ports() const;

  WeirOptions options_;
  weir::testing::TempDir dir_;
  weir::testing::Process proc_;
  mutable int http_port_ = 0;  // 0 until the first spawn reported its bound port
  mutable int admin_port_ = 0;
  int spawns_ = 0;
};

// ---------------------------------------------------------------- load

// The id in a 202 body {"id": "..."}; "" when the body is not that.
std::string id_from_reply(const HttpReply& reply);

struct PostRecord {
  std::chrono::steady_clock::time_point sent;
  std::chrono::steady_clock::time_point answered;
  int status = 0;
  bool has_retry_after = false;
};

// N client threads POSTing {"id": "<unique>", "client": c, "n": k, "pad": "..."} to
// url, each on its own keep-alive connection. weir-sink identifies deliveries by the
// body's "id", so acked_ids() are those body ids. Clients with an even index also send
// it as Idempotency-Key and retry the same event (same key) until it is acknowledged,
// like a webhook sender; odd ones let weir pick the event id and move on to a new
// event after a failure.
class Posters {
 public:
  Posters(std::string url, int clients, std::chrono::microseconds pause = std::chrono::microseconds(1000));
  ~Posters();  // stops and joins
  void stop();
  std::set<std::string> acked_ids() const;
  size_t acked() const { return acked_.load(); }
  size_t failed() const { return failed_.load(); }
  std::vector<PostRecord> records() const;
  std::map<int, size_t> status_counts() const;
  // Keyed posts whose 202 named another id than the Idempotency-Key sent.
  size_t key_mismatches() const {
    MutexLock lock(mu_);
    return key_mismatches_;
  }

 private:
  void run(int client);

  std::string url_;
  std::string prefix_;  // unique per instance, so ids never collide across Posters
  std::chrono::microseconds pause_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> acked_{0};
  std::atomic<size_t> failed_{0};
  mutable Mutex mu_;
  std::set<std::string> ids_ GUARDED_BY(mu_);
  std::vector<PostRecord> records_ GUARDED_BY(mu_);
  size_t key_mismatches_ GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_;
};

// Several Posters (one per instance of a cluster) taken together: acknowledgements so far,
// their ids, and the answers counted by status.
size_t acked_total(const std::vector<Posters*>& posters);
std::set<std::string> acked_ids(const std::vector<Posters*>& posters);
std::map<int, size_t> status_counts(const std::vector<Posters*>& posters);
// Waits until the posters have `n` more acknowledgements than when called; false at the timeout.
bool more_acks(const std::vector<Posters*>& posters, size_t n, std::chrono::milliseconds timeout);
bool more_acks(Posters& posters, size_t n, std::chrono::milliseconds timeout);

// The weir CLI run to its end (a client command such as `weir deploy`): exit code (-1 when
// it did not exit within 60 s) and its stdout and stderr. WEIR_ADMIN_TOKEN is set empty
// unless `env` sets it, so the test's own environment never lends the CLI a token.
struct CliResult {
  int code = -1;
  std::string output;  // stdout and stderr
};
CliResult run_cli(std::vector<std::string> args, std::map<std::string, std::string> env = {});

// A request recorded by weir-sink (GET /requests): its header, case-insensitive
// name ("" when absent), and its body parsed as JSON.
std::string header_of(const json& request, const std::string& name);
json body_of(const json& request);

// Streams and consumers as the nats-server monitor on `monitor_port` sees them (/jsz):
// messages and sequences per stream; pending, ack pending, redelivered and waiting pull
// requests per consumer. For failure messages.
std::string jetstream_state(int monitor_port);

// Ids in `want` that are missing from `have`.
std::vector<std::string> missing(const std::set<std::string>& want, const std::set<std::string>& have);

// Waits until every id of `acked` reached the sink (GET /ids); returns the ids still
// missing at the deadline (empty: all delivered).
std::vector<std::string> wait_delivered(const std::set<std::string>& acked, const SinkProcess& sink,
                                        std::chrono::milliseconds timeout);

// The leader of JetStream stream `stream` as the nats-server monitoring endpoint on
// `monitor_port` sees it (GET /jsz); "" when unknown or not clustered.
std::string stream_leader(int monitor_port, const std::string& stream);

// The delivery loops a weir said it runs (its "delivery loops loops=N" start line, ADR
// 0272): 1 (thread weir-delivery) or 2 (weir-flows, weir-sinks); 0 when not logged.
int delivery_loops_logged(const std::string& log);

// Prometheus text → samples "name{labels}" → value (label text kept as written).
std::multimap<std::string, std::pair<std::string, double>> parse_metrics(const std::string& text);

// Sum of a stage counter (e.g. weir_events_acked_total, stage "flow" or "sink:out") on one
// instance; -1 when /metrics does not answer.
double stage_counter(const WeirProcess& weir, const std::string& name, const std::string& stage);

// HMAC-SHA256(key, data) as lower-case hex and as base64.
std::string hmac_sha256_hex(const std::string& key, const std::string& data);
std::string hmac_sha256_base64(const std::string& key, const std::string& data);
std::string base64(const std::string& data);

}  // namespace weir::itest

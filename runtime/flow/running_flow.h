// RunningFlow: one flow of this process — its source, its FlowStage, one SinkStage per sink
// and its versions (the FlowControl the cluster registry drives; a standalone deploy uses
// it too). One start path for every flow: a chained flow (`from: {flow: other.sink}`)
// differs only in where its stage reads and in having no source of its own
// (docs/adr/0200-thin-runtime-core.md).
//
// Ownership: owned by FlowHost; borrows everything in FlowDeps, which outlives it.
// Threads: start/stop on the lifecycle thread (or the registry's watch thread for a flow it
// activates); describe/healthy from the io and admin threads; the FlowControl from
// cluster/'s threads and the admin worker. Versions are guarded by their own mutex.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "flows/flow.h"
#include "runtime/ports/cluster_hooks.h"
#include "runtime/ports/connectors.h"
#include "runtime/base/config.h"
#include "runtime/base/control.h"
#include "runtime/flow/ingest.h"
#include "runtime/ports/source.h"
#include "runtime/flow/stage.h"

namespace weir {

class BacklogMonitor;
class HttpRouter;
class LoopPublisher;
class StateStore;

// What a running flow borrows from the process. The cluster parts are null standalone.
struct FlowDeps {
  const RuntimeConfig* config = nullptr;
  ConnectorFactory* connectors = nullptr;
  Metrics* metrics = nullptr;
  Bus* bus = nullptr;
  DeadLetters* dlq = nullptr;
  LoopPublisher* ingress_pub = nullptr;  // http-in's publisher on the io thread (ADR 0130)
  BacklogMonitor* backlog = nullptr;
  HttpRouter* router = nullptr;
  SourceState* state = nullptr;
  ClusterMembership* membership = nullptr;
  SingletonRunner* singletons = nullptr;
  VersionRegistry* registry = nullptr;
};

// Where a version's text comes from decides what it may do (docs/adr/0101, docs/adr/0274).
enum class TextOrigin {
  kLocal,       // the flow file on this server: its tables may name files, `${NAME}` reads the environment
  kKeptWiring,  // sent over the network with from:/to: checked to be the running version's (same_wiring):
                // those keep their `${NAME}`; elsewhere only admin.allow_env names, inline tables only
  kNetwork,     // sent over the network for a flow that does not run here: admin.allow_env names only,
                // no exec source unless admin.allow_exec, no server files, hosts within admin.allow_hosts
};

// The compiled flow of one version; `path` places its tables' files. invalid with one
// diagnostic a line (none quotes an environment value the text may not read).
Result<std::shared_ptr<const flows::Flow>> compile_version(const std::string& text, const std::string& path,
                                                           int64_t version, TextOrigin origin,
                                                           const RuntimeConfig::Admin& admin);
// kKeptWiring when `text` keeps the from:/to: of `running_text` (non-empty), else kNetwork.
TextOrigin network_origin(const std::string& running_text, const std::string& text);
// A live switch swaps the compiled steps only: `flow`, `from` and `to` of `new_text` must
// be those of `old_text` however they are written (ADR 0042); invalid saying which not.
// Both texts go through the loader's bounded parser first (an alias cycle is invalid).
Status same_wiring(const std::string& old_text, const std::string& new_text);
Result<std::string> read_text_file(const std::string& path);
// Written next to `path`, then renamed over it: a reader sees the old file or the new one.
// internal "cannot <verb> <path>" when either fails.
Status write_file_atomically(const std::string& path, const std::string& text, const char* verb);

// Standalone, the version number a flow runs as survives a restart (docs/admin-api.md,
// "Flows"): `<data_dir>/flow-versions/<flow>` holds "<version> <content hash>".
// kept_version: the kept number when its hash is the file's, the next one (kept) when the
// file changed while weir was stopped, 1 when none is kept. keep_version writes it
// atomically; an error says the number could not be kept.
int64_t kept_version(const RuntimeConfig& config, const std::string& flow, const std::string& hash);
Status keep_version(const RuntimeConfig& config, const std::string& flow, int64_t version, const std::string& hash);

class RunningFlow {
 public:
  // `text`: the version's flow file ("" when unknown; a later version is then not checked
  // against it).
  RunningFlow(const FlowDeps& deps, std::shared_ptr<const flows::Flow> flow, const std::string& text);
  ~RunningFlow();
  RunningFlow(const RunningFlow&) = delete;
  RunningFlow& operator=(const RunningFlow&) = delete;

  // Starts the sink stages, the flow stage (paused: a promote is at its barrier), follows
  // the registry (clustered), then the source. On an error the parts started stay until
  // stop(); once followed() the registry holds this flow's FlowControl until it stops, so
  // the owner must keep the flow (parked) rather than destroy it.
  Status start(bool paused);
  bool followed() const { return followed_; }

  const flows::Flow& flow() const { return *flow_; }  // as started: name, source, sinks
  std::shared_ptr<const flows::Flow> started_flow() const { return flow_; }
  const std::string& name() const { return flow_->name(); }
  const std::string& path() const { return path_; }  // its file in the flows dir
  int64_t version() const { return version_.load(); }
  // The flow file text of the version that runs.
  std::string running_text() const;
  // Why not, in *why: the stage or a sink is not running.
  bool healthy(std::string* why) const;
  // Appends to `out` one line per broker sink whose connection is down (/readyz's
  // "degraded", docs/adr/0315-broker-sink-health.md).
  void degraded(std::vector<std::string>& out) const;
  // GET /flows/{name}: versions, hash, source, sinks, counters, the registry's view.
  nlohmann::json describe() const;
  // GET /sinks: each sink stage's circuit (docs/adr/0294-sink-circuit-breaker.md), appended to `out`.
  void describe_sinks(nlohmann::json& out) const;
  // POST /sinks/{flow}/{sink}/pause|resume: kNotFound when the flow has no such sink stage here.
  ControlResult control_sink(const std::string& sink, bool pause);

  // Standalone deploy (ADR 0043): compiles `body` as the next version, replaces the flow
  // file atomically, pauses (up to `pause_timeout`) and switches to it.
  ControlResult replace_file(const std::string& body, std::chrono::milliseconds pause_timeout);
  // Reload (ADR 0306): `text`, already in the flow file, as the next version — the switch
  // of replace_file without writing the file. invalid or unavailable, saying why.
  Status switch_to_file(const std::string& text, std::chrono::milliseconds pause_timeout);

  // Drain, in order: stop_source(); request_stop(); stop_within() (one thread per stage,
  // appended to `stoppers`, sinks bounded by `sink_budget`). stop() does it all at once.
  void stop_source();
  void request_stop();
  void stop_within(std::vector<std::thread>& stoppers, std::chrono::milliseconds sink_budget);
  void stop();

 private:
  class Versions;  // the FlowControl

  StageOptions stage_options() const;
  // Sinks, stage, registry watch: everything of the flow but its source.
  Status start_pipeline(bool paused);
  Status start_sinks(const StageOptions& options);
  Status start_stage(const StageOptions& options, bool paused);
  Status start_source();
  void switched(std::shared_ptr<const flows::Flow> flow, int64_t version);

  FlowDeps deps_;
  std::shared_ptr<const flows::Flow> flow_;
  std::atomic<int64_t> version_{1};  // the version the stage runs
  std::atomic<int64_t> switched_at_ms_{0};
  std::string path_;
  std::unique_ptr<Versions> versions_;
  bool followed_ = false;
  std::unique_ptr<FlowIngest> ingest_;
  SourceContext source_ctx_;
  std::unique_ptr<Source> source_;
  std::unique_ptr<FlowStage> stage_;
  std::vector<std::unique_ptr<SinkStage>> sinks_;
};

}  // namespace weir

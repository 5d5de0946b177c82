// FlowHost: the flows this process runs and the control-plane calls on them — start at
// start-up, deploy (standalone: the flow file; clustered: the registry), promote, rollback,
// the flows the cluster registry activates later (ADR 0121), readiness and GET /flows,
// /status. It answers the admin API in ControlResults (AdminBackend); admin_service.h turns
// them into HTTP. Runtime owns it and keeps only the process lifecycle
// (docs/adr/0200-thin-runtime-core.md).
//
// Threads: load/start_*/drain steps on the lifecycle thread; the AdminBackend calls on the
// io thread (ready) and the admin worker; start_registry_flow on the registry's watch
// thread. `running_` is written under running_mu_ exclusively and read shared; every start
// holds lifecycle_mu_, which the drain takes too (no flow starts once draining). Checked by
// clang's -Wthread-safety (runtime/base/thread_annotations.h).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/admin/admin_service.h"
#include "runtime/control/flow_set.h"
#include "runtime/flow/running_flow.h"
#include "runtime/base/thread_annotations.h"

namespace weir {

class KvTables;

class FlowHost final : public AdminBackend {
 public:
  // `cluster` null: standalone.
  FlowHost(const RuntimeConfig& config, ClusterHooks* cluster);
  ~FlowHost() override;

  // The flows dir, compiled and checked together (check_flow_set); invalid with every error.
  Result<FlowList> load() const;
  // Once NATS is connected, before any flow starts.
  void connect(const FlowDeps& deps, KvTables* tables);
  void set_listen(std::string http, std::string admin);
  // Starts a flow of the flows dir; clustered, the registry's active version of it (ADR
  // 0042). Logs why not; the Status's code gives the exit code.
  Status start_local(const std::shared_ptr<const flows::Flow>& flow) EXCLUDES(lifecycle_mu_);
  // http-in paths and their flows, for the ready line.
  std::vector<std::pair<std::string, std::string>> http_routes() const;
  size_t size() const;
  // Serving: deploys may start flows; clustered, flows the registry activates start too.
  void serve();

  // The drain, in order (Runtime::drain): begin_drain, stop_sources, stop_stages, end_drain.
  // From begin_drain to end_drain no flow starts (a start under way finishes first).
  void begin_drain() ACQUIRE(lifecycle_mu_);
  void stop_sources() EXCLUDES(running_mu_);
  void stop_stages(std::chrono::steady_clock::time_point deadline) EXCLUDES(running_mu_);
  void end_drain() RELEASE(lifecycle_mu_);
  // SIGHUP (docs/adr/0306-reload-on-sighup.md): the flows dir read again and the running
  // flows made to match it — removed flows stop, changed ones switch as a deploy does, new
  // ones start — each change logged. Every file is compiled and checked first: any error
  // (with the refusals of a deploy) and nothing changes. Standalone only (clustered, the
  // registry decides what runs). `*summary`: what changed ("added a, changed b, …").
  Status reload(std::string* summary) EXCLUDES(lifecycle_mu_, running_mu_);
  // At destruction: stops every part at once; then clear() drops the flows.
  void stop_all() EXCLUDES(running_mu_);
  void clear() EXCLUDES(running_mu_);

  // ---- AdminBackend ----
  bool ready(std::string* why) const override;
  std::vector<std::string> degraded() const override;
  nlohmann::json flows() const override;
  std::optional<nlohmann::json> flow(const std::string& name) const override;
  ControlResult deploy(const std::string& name, const std::string& body, const std::string& target) override;
  ControlResult promote(const std::string& name, int64_t version, int64_t expected_active) override;
  ControlResult rollback(const std::string& name) override;
  nlohmann::json status() const override;
  nlohmann::json sinks() const override;
  ControlResult control_sink(const std::string& flow, const std::string& sink, bool pause) override;

 private:
  bool clustered() const { return cluster_ != nullptr; }
  RunningFlow* find(const std::string& name) const;
  FlowList running_flows() const;  // as started
  std::shared_ptr<const flows::Flow> kept_version_of(const std::shared_ptr<const flows::Flow>& flow,
                                                     const Result<std::string>& file_text) const;
  Status start(const std::shared_ptr<const flows::Flow>& flow, const std::string& text, bool paused)
      REQUIRES(lifecycle_mu_);
  ControlResult check_target(const std::string& target) const;
  ControlResult deploy_new(const std::string& name, const std::string& body, const flows::Flow& flow);
  ControlResult start_new_flow(const std::string& name, const std::string& body) EXCLUDES(lifecycle_mu_);
  ControlResult check_flows_dir(const std::string& name, const std::string& path) const;
  void start_registry_flow(const std::string& name) EXCLUDES(lifecycle_mu_);
  // reload()'s two halves: what the flows dir asks for, checked whole; then doing it.
  struct ReloadPlan;
  Status plan_reload(const FlowList& loaded, ReloadPlan* plan) const EXCLUDES(running_mu_);
  Status apply_reload(const ReloadPlan& plan) REQUIRES(lifecycle_mu_) EXCLUDES(running_mu_);

  const RuntimeConfig& config_;
  ClusterHooks* cluster_;
  FlowDeps deps_;                   // set by connect()
  KvTables* tables_ = nullptr;      // set by connect()
  std::atomic<Bus*> bus_{nullptr};  // set by connect(); read by /status, /readyz
  Mutex lifecycle_mu_;              // held by every start and by the drain
  mutable SharedMutex running_mu_;
  std::vector<std::unique_ptr<RunningFlow>> running_ GUARDED_BY(running_mu_);
  // Failed to start after the registry followed them.
  std::vector<std::unique_ptr<RunningFlow>> parked_ GUARDED_BY(lifecycle_mu_);
  std::atomic<bool> serving_{false};  // set once http-in listens; cleared on drain
  std::atomic<bool> draining_{false};
  mutable Mutex listen_mu_;
  std::string listen_http_ GUARDED_BY(listen_mu_);
  std::string listen_admin_ GUARDED_BY(listen_mu_);
};

}  // namespace weir

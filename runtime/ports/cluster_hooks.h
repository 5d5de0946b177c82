// ClusterHooks: what the runtime asks of cluster/ when an instance joins a cluster
// (`--cluster NAME`). Implemented in cluster/runtime_hooks.cc; main wires it in, so the
// runtime does not depend on cluster/ (docs/adr/0001-architecture-and-layout.md).
//
// Three narrow interfaces (membership, singletons, versions), each answering with
// Status/Result/ControlResult, never HTTP codes (docs/adr/0200-thin-runtime-core.md).
// FlowControl is called on a thread of cluster/'s (a registry watch or
// the heartbeat), never while the runtime calls into the hooks.
//
// Versions (docs/adr/0042-version-registry.md): in a cluster the flow registry in KV is
// the source of truth; the runtime compiles and runs what it is told, through FlowControl.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/nats/bus.h"
#include "runtime/base/config.h"
#include "runtime/base/control.h"
#include "runtime/ports/source.h"

namespace weir {

// What the version registry asks of one running flow. Implemented by the runtime.
class FlowControl {
 public:
  virtual ~FlowControl() = default;
  // Stops handling events of this flow; true once nothing is being handled (the batch in
  // hand is published and acked), false after `timeout` (the flow stays paused).
  virtual bool pause(std::chrono::milliseconds timeout) = 0;
  // Compiles version `version` from its flow file text and keeps it ready; an error when
  // it does not compile or cannot replace the running one (another source or sinks).
  virtual Status load(int64_t version, const std::string& text) = 0;
  // Runs `version` (loaded before) from the next batch on, and un-pauses.
  virtual void resume(int64_t version) = 0;
};

// The active version of a flow as the registry holds it.
struct ActiveFlow {
  int64_t version = 0;
  std::string text;      // the flow file of that version
  bool pausing = false;  // a promote is at its barrier: start paused
};

// What a clustered instance asks of its membership. Threading: start/stop from the
// runtime's lifecycle thread, status() from the admin worker, may_handle() from stage threads.
class ClusterMembership {
 public:
  virtual ~ClusterMembership() = default;
  // Opens what the cluster needs on the bus (the lease bucket, the registry's buckets) and
  // joins. Called once connected.
  virtual Status start(Bus& bus, const RuntimeConfig& config) = 0;
  // Members and lease holders, for GET /status.
  virtual nlohmann::json status() const = 0;
  // Stops following flows and leaves the cluster (the member key is removed).
  virtual void stop() = 0;
  // True while this instance's member key is known to be alive: flow stages start a batch
  // only then (cheap; called per batch from stage threads).
  virtual bool may_handle() const = 0;
};

// Runs a singleton source (timer, poll, exec) on exactly one instance. During start-up
// and on the registry's watch thread.
class SingletonRunner {
 public:
  virtual ~SingletonRunner() = default;
  // `factory` makes a fresh inner source for each term of the lease.
  virtual std::unique_ptr<Source> singleton(const std::string& key,
                                            std::function<std::unique_ptr<Source>()> factory) = 0;
};

// The version registry (ADR 0042). Answers are ControlResults (runtime/base/control.h): the
// registry never speaks HTTP. attach/follow at start-up and on the watch thread; deploy,
// promote, rollback and describe from the admin worker.
class VersionRegistry {
 public:
  virtual ~VersionRegistry() = default;
  // At start: registers `flow` in the registry, seeding version 1 from the flow file's
  // `text` when the registry has no record of it, and returns the active version.
  virtual Result<ActiveFlow> attach_flow(const std::string& flow, const std::string& text, const std::string& hash) = 0;
  // Starts following the flow's active version; `control` must outlive stop().
  virtual Status follow_flow(const std::string& flow, FlowControl* control) = 0;
  // Stores a validated flow file as the flow's next version (kCreated with the version;
  // kDone when it is the latest already).
  virtual ControlResult deploy(const std::string& flow, const std::string& text, const std::string& hash) = 0;
  // `expected_active` != 0: only if that version is the active one (else kConflict, stale).
  virtual ControlResult promote(const std::string& flow, int64_t version, int64_t expected_active) = 0;
  virtual ControlResult rollback(const std::string& flow) = 0;
  // The registry's view of a flow: active, latest, phase, history (an empty object when
  // the registry cannot be read).
  virtual nlohmann::json describe(const std::string& flow) = 0;
  // Calls `on_flow(name)` on a thread of cluster/'s for each flow the registry has active —
  // at once for those active now, later for each one activated or switched — so that an
  // instance starts the flows it does not run yet (ADR 0121). Called once, after start-up;
  // ClusterMembership::stop() ends it (waiting for a call in progress).
  virtual Status watch_flows(std::function<void(const std::string& flow)> on_flow) = 0;
};

// All three, as cluster/ implements them in one object; app/main hands it to the Runtime,
// which gives each part only the interface it needs.
class ClusterHooks : public ClusterMembership, public SingletonRunner, public VersionRegistry {};

}  // namespace weir

// Runtime: one weir process (`weir run`). Loads the config and flows, brings up NATS
// (embedded or external), the bus, one FlowStage per flow, one SinkStage per sink,
// every source, the ingress and admin servers; then waits for SIGTERM/SIGINT and
// drains in reverse order (docs/adr/0003-threading-model.md).
//
// Threads: the caller's (signals and lifecycle), the io thread (ingress + admin), one
// thread per flow stage, one per sink stage (plus the sink's own), cnats' threads,
// the bus deadline sweeper and the admin worker.
#pragma once

#include <memory>

#include "runtime/ports/cluster_hooks.h"
#include "runtime/base/config.h"
#include "runtime/ports/connectors.h"

namespace weir {

class Runtime {
 public:
  // `cluster` is used when config.cluster.name is set; may be null otherwise.
  Runtime(RuntimeConfig config, ConnectorFactory& connectors, ClusterHooks* cluster = nullptr);
  ~Runtime();
  // Runs until a signal; returns the process exit code (0 clean, 1 runtime failure,
  // 2 configuration error). SIGTERM/SIGINT must be blocked in every thread before.
  int run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir

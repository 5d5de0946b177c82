// ClusterHooks: what the runtime asks of cluster/ when an instance joins a cluster
// (`--cluster NAME`). Implemented in cluster/runtime_hooks.cc; main wires it in, so the
// runtime does not depend on cluster/ (docs/adr/0001-architecture-and-layout.md).
//
// Threading: start/stop from the runtime's lifecycle thread; singleton() during start-up;
// status() from the admin thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/bus.h"
#include "runtime/config.h"
#include "runtime/source.h"

namespace weir {

class ClusterHooks {
 public:
  virtual ~ClusterHooks() = default;
  // Opens what the cluster needs on the bus (the lease bucket). Called once connected.
  virtual Status start(Bus& bus, const RuntimeConfig& config) = 0;
  // Wraps a singleton source (timer, poll, exec) so it runs on exactly one instance:
  // `factory` makes a fresh inner source for each term of the lease.
  virtual std::unique_ptr<Source> singleton(const std::string& key,
                                            std::function<std::unique_ptr<Source>()> factory) = 0;
  virtual nlohmann::json status() const = 0;
  virtual const std::string& instance_id() const = 0;
};

}  // namespace weir

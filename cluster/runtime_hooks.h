// ClusterRuntime: cluster/'s implementation of the runtime's ClusterHooks. Opens the
// lease bucket (one per lease TTL: `weir_leases_<ttl ms>`) on the runtime's NATS
// connection and wraps singleton sources in cluster::Singleton. Opens the version
// registry's buckets (`weir_flows_<cluster>`, `weir_members_<cluster>` with the lease TTL)
// and runs the FlowRegistry with its member heartbeat (docs/adr/0042-version-registry.md).
// Threading as ClusterHooks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cluster/flow_registry.h"
#include "runtime/nats/nats_kv.h"
#include "cluster/singleton.h"
#include "runtime/ports/cluster_hooks.h"
#include "runtime/base/thread_annotations.h"

namespace weir::cluster {

class ClusterRuntime final : public ClusterHooks {
 public:
  ClusterRuntime();
  Status start(Bus& bus, const RuntimeConfig& config) override;
  std::unique_ptr<Source> singleton(const std::string& key, std::function<std::unique_ptr<Source>()> factory) override;
  nlohmann::json status() const override;

  Result<ActiveFlow> attach_flow(const std::string& flow, const std::string& text, const std::string& hash) override;
  Status follow_flow(const std::string& flow, FlowControl* control) override;
  ControlResult deploy(const std::string& flow, const std::string& text, const std::string& hash) override;
  ControlResult promote(const std::string& flow, int64_t version, int64_t expected_active) override;
  bool may_handle() const override { return registry_ && registry_->member_fresh(); }
  ControlResult rollback(const std::string& flow) override;
  nlohmann::json describe(const std::string& flow) override;
  Status watch_flows(std::function<void(const std::string& flow)> on_flow) override;
  void stop() override;

 private:
  std::string instance_id_;
  LeaseOptions lease_options_;
  std::unique_ptr<NatsKv> leases_;
  std::unique_ptr<NatsKv> flows_kv_, members_kv_;
  std::unique_ptr<FlowRegistry> registry_;
  mutable Mutex mu_;
  std::vector<const Singleton*> singletons_ GUARDED_BY(mu_);  // owned by the runtime's flows
};

}  // namespace weir::cluster

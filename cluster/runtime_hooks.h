// ClusterRuntime: cluster/'s implementation of the runtime's ClusterHooks. Opens the
// lease bucket (one per lease TTL: `weir_leases_<ttl ms>`) on the runtime's NATS
// connection and wraps singleton sources in cluster::Singleton.
// Threading as ClusterHooks.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cluster/nats_kv.h"
#include "cluster/singleton.h"
#include "runtime/cluster_hooks.h"

namespace weir::cluster {

class ClusterRuntime final : public ClusterHooks {
 public:
  ClusterRuntime();
  Status start(Bus& bus, const RuntimeConfig& config) override;
  std::unique_ptr<Source> singleton(const std::string& key,
                                    std::function<std::unique_ptr<Source>()> factory) override;
  nlohmann::json status() const override;
  const std::string& instance_id() const override { return instance_id_; }

 private:
  std::string instance_id_;
  LeaseOptions lease_options_;
  std::unique_ptr<NatsKv> leases_;
  mutable std::mutex mu_;
  std::vector<const Singleton*> singletons_;   // GUARDED_BY(mu_); owned by the runtime's flows
};

}  // namespace weir::cluster

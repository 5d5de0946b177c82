#include "cluster/runtime_hooks.h"

#include <unistd.h>

#include <random>

#include "runtime/log.h"

namespace weir::cluster {

ClusterRuntime::ClusterRuntime() {
  char host[128] = {0};
  gethostname(host, sizeof host - 1);
  std::random_device rd;
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "%06x", rd() & 0xffffff);
  instance_id_ = std::string(host) + "-" + std::to_string(getpid()) + "-" + suffix;
}

Status ClusterRuntime::start(Bus& bus, const RuntimeConfig& config) {
  lease_options_ = LeaseOptions::for_ttl(config.cluster.lease_ttl);
  if (Status s = lease_options_.validate(); !s) return Status::invalid("cluster.lease_ttl: " + s.message());
  NatsKvOptions o;
  o.bucket = "weir_leases_" + std::to_string(config.cluster.lease_ttl.count());
  o.ttl = config.cluster.lease_ttl;
  o.replicas = config.nats.replicas;
  auto kv = NatsKv::open(bus.connection(), o);
  if (!kv) return kv.status();
  leases_ = std::move(kv.value());
  log::info("joined cluster", {{"cluster", config.cluster.name}, {"instance", instance_id_},
                               {"lease_bucket", o.bucket}});
  return Status::ok();
}

std::unique_ptr<Source> ClusterRuntime::singleton(const std::string& key,
                                                  std::function<std::unique_ptr<Source>()> factory) {
  SingletonOptions so;
  so.key = key;
  so.owner = instance_id_;
  so.lease = lease_options_;
  auto s = std::make_unique<Singleton>(*leases_, so, std::move(factory));
  std::lock_guard lock(mu_);
  singletons_.push_back(s.get());
  return s;
}

nlohmann::json ClusterRuntime::status() const {
  nlohmann::json leases = nlohmann::json::array();
  std::lock_guard lock(mu_);
  for (const Singleton* s : singletons_) {
    nlohmann::json j = {{"key", s->key()}, {"held_here", s->running()}};
    if (auto t = s->fencing_token()) j["token"] = *t;
    if (leases_) {
      if (auto e = leases_->get(s->key()); e) j["holder"] = e->value;
    }
    leases.push_back(std::move(j));
  }
  return {{"instance", instance_id_}, {"leases", leases}};
}

}  // namespace weir::cluster

#include "cluster/runtime_hooks.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <random>
#include <thread>

#include "cluster/lease.h"
#include "runtime/base/log.h"

namespace weir::cluster {

ClusterRuntime::ClusterRuntime() {
  char host[128] = {0};
  gethostname(host, sizeof host - 1);
  std::random_device rd;
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "%06x", rd() & 0xffffff);
  instance_id_ = std::string(host) + "-" + std::to_string(getpid()) + "-" + suffix;
  // The id is part of KV keys (`m.<id>`): keep it to [A-Za-z0-9_-].
  for (char& c : instance_id_) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  }
}

Status ClusterRuntime::start(Bus& bus, const RuntimeConfig& config) {
  lease_options_ = LeaseOptions::for_ttl(config.cluster.lease_ttl);
  if (Status s = lease_options_.validate(); !s) return Status::invalid("cluster.lease_ttl: " + s.message());
  NatsKvOptions o;
  // One lease bucket per cluster and TTL: two clusters on one NATS never share a lease.
  o.bucket = lease_bucket_name(config.cluster.name, config.cluster.lease_ttl);
  o.ttl = config.cluster.lease_ttl;
  o.replicas = config.nats.replicas;
  auto kv = NatsKv::open(bus.connection(), o);
  if (!kv) return kv.status();
  leases_ = std::move(kv.value());

  // The version registry (ADR 0042).
  if (!valid_kv_bucket(config.cluster.name)) {
    return Status::invalid("cluster.name: '" + config.cluster.name + "' must be [A-Za-z0-9_-]+ (it names KV buckets)");
  }
  NatsKvOptions fo;
  fo.bucket = "weir_flows_" + config.cluster.name;
  fo.replicas = config.nats.replicas;
  fo.timeout = std::chrono::milliseconds(2000);
  auto flows = NatsKv::open(bus.connection(), fo);
  if (!flows) return flows.status();
  flows_kv_ = std::move(flows.value());
  NatsKvOptions mo;
  mo.bucket = "weir_members_" + config.cluster.name;
  mo.ttl = config.cluster.lease_ttl;
  mo.replicas = config.nats.replicas;
  mo.timeout = std::chrono::milliseconds(500);
  auto members = NatsKv::open(bus.connection(), mo);
  if (!members) return members.status();
  members_kv_ = std::move(members.value());
  RegistryOptions ro;
  ro.instance = instance_id_;
  ro.member_ttl = config.cluster.lease_ttl;
  ro.heartbeat = std::max(std::chrono::milliseconds(50), config.cluster.lease_ttl / 4);
  ro.barrier_timeout = std::max(std::chrono::milliseconds(2000), config.cluster.lease_ttl * 2);
  registry_ = std::make_unique<FlowRegistry>(
      *flows_kv_, *members_kv_, [this] { return members_kv_->keys("m.", std::chrono::milliseconds(1000)); }, ro);
  // Be a member before attaching any flow: a promoter then waits for this instance. A bucket
  // created a moment ago may still answer "no responders" / time out (seen under load on a
  // single node): retried like the other set-up calls (docs/adr/0110-startup-on-any-nats.md).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int attempt = 1;; ++attempt) {
    Status s = registry_->heartbeat();
    if (s) break;
    if ((s.code() != Status::Code::kTimeout && s.code() != Status::Code::kUnavailable) ||
        std::chrono::steady_clock::now() >= deadline) {
      return s;
    }
    log::info("cluster membership not ready, retrying", {{"error", s.str()}});
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(2000, 100 << std::min(attempt - 1, 5))));
  }
  registry_->start_heartbeat();
  log::info("joined cluster", {{"cluster", config.cluster.name},
                               {"instance", instance_id_},
                               {"lease_bucket", o.bucket},
                               {"flows_bucket", fo.bucket}});
  return Status::ok();
}

Result<ActiveFlow> ClusterRuntime::attach_flow(const std::string& flow, const std::string& text,
                                               const std::string& hash) {
  if (!registry_) return Status::unavailable("not in a cluster yet");
  // At start-up a fresh (R3) cluster may time out while its leaders settle: "not yet"
  // answers are retried with backoff for up to 30 s (attach is idempotent: creates that
  // lose to a peer count as done). docs/adr/0110-startup-on-any-nats.md.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int attempt = 1;; ++attempt) {
    auto a = registry_->attach(flow, text, hash);
    const auto code = a ? Status::Code::kOk : a.status().code();
    if (a || (code != Status::Code::kTimeout && code != Status::Code::kUnavailable) ||
        std::chrono::steady_clock::now() >= deadline) {
      return a;
    }
    log::info("flow registry not ready, retrying", {{"flow", flow}, {"error", a.status().str()}});
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(2000, 100 << std::min(attempt - 1, 5))));
  }
}

Status ClusterRuntime::watch_flows(std::function<void(const std::string& flow)> on_flow) {
  if (!registry_) return Status::unavailable("not in a cluster yet");
  return registry_->watch_flows(std::move(on_flow));
}

Status ClusterRuntime::follow_flow(const std::string& flow, FlowControl* control) {
  if (!registry_) return Status::unavailable("not in a cluster yet");
  return registry_->follow(flow, control);
}

ControlResult ClusterRuntime::deploy(const std::string& flow, const std::string& text, const std::string& hash) {
  if (!registry_) return ControlResult::failed(Outcome::kUnavailable, "not in a cluster yet");
  return registry_->deploy(flow, text, hash, instance_id_);
}

ControlResult ClusterRuntime::promote(const std::string& flow, int64_t version, int64_t expected_active) {
  if (!registry_) return ControlResult::failed(Outcome::kUnavailable, "not in a cluster yet");
  return registry_->promote(flow, version, instance_id_, expected_active);
}

ControlResult ClusterRuntime::rollback(const std::string& flow) {
  if (!registry_) return ControlResult::failed(Outcome::kUnavailable, "not in a cluster yet");
  return registry_->rollback(flow, instance_id_);
}

nlohmann::json ClusterRuntime::describe(const std::string& flow) {
  if (!registry_) return nlohmann::json::object();
  return registry_->describe(flow);
}

void ClusterRuntime::stop() {
  if (registry_) registry_->stop();
}

std::unique_ptr<Source> ClusterRuntime::singleton(const std::string& key,
                                                  std::function<std::unique_ptr<Source>()> factory) {
  SingletonOptions so;
  so.key = key;
  so.owner = instance_id_;
  so.lease = lease_options_;
  auto s = std::make_unique<Singleton>(*leases_, so, std::move(factory));
  MutexLock lock(mu_);
  singletons_.push_back(s.get());
  return s;
}

nlohmann::json ClusterRuntime::status() const {
  nlohmann::json leases = nlohmann::json::array();
  MutexLock lock(mu_);
  for (const Singleton* s : singletons_) {
    nlohmann::json j = {{"key", s->key()}, {"held_here", s->running()}};
    if (auto t = s->fencing_token()) j["token"] = *t;
    if (leases_) {
      if (auto e = leases_->get(s->key()); e) j["holder"] = e->value;
    }
    leases.push_back(std::move(j));
  }
  nlohmann::json j = {{"instance", instance_id_}, {"leases", leases}};
  if (members_kv_) {
    if (auto m = members_kv_->keys("m.", std::chrono::milliseconds(1000)); m) j["members"] = m.value();
  }
  if (registry_) j["fenced"] = registry_->fenced();
  return j;
}

}  // namespace weir::cluster

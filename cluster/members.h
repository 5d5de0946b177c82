// NatsKeyList: lists the keys of a JetStream KV bucket (cnats kvStore_Keys). The version
// registry uses it to learn which instances are alive: each one keeps a `m.<instance>`
// key in the members bucket, whose bucket TTL removes the keys of dead instances
// (docs/adr/0042-version-registry.md). KvStore has no listing on purpose: leases never
// need one, and a listing is a scan (an ordered consumer per call), not for hot paths.
//
// Contract: does not own the connection (it must outlive this). Owns its jsCtx and
// kvStore handle. Thread-safe. The bucket must exist (NatsKv::open creates it).
#pragma once

#include <nats/nats.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace weir::cluster {

class NatsKeyList {
 public:
  static Result<std::unique_ptr<NatsKeyList>> open(natsConnection* connection, const std::string& bucket,
                                                   std::chrono::milliseconds timeout);
  ~NatsKeyList();
  NatsKeyList(const NatsKeyList&) = delete;
  NatsKeyList& operator=(const NatsKeyList&) = delete;

  // Keys that start with `prefix`, with the prefix removed. Empty when there are none.
  Result<std::vector<std::string>> keys(const std::string& prefix);

 private:
  NatsKeyList(jsCtx* js, kvStore* kv) : js_(js), kv_(kv) {}
  jsCtx* js_;
  kvStore* kv_;
};

}  // namespace weir::cluster

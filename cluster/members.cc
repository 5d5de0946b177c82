#include "cluster/members.h"

#include "runtime/nats_status.h"

namespace weir::cluster {

Result<std::unique_ptr<NatsKeyList>> NatsKeyList::open(natsConnection* connection, const std::string& bucket,
                                                       std::chrono::milliseconds timeout) {
  if (connection == nullptr) return Status::invalid("kv keys: no NATS connection");
  jsOptions o;
  jsOptions_Init(&o);
  o.Wait = timeout.count();
  jsCtx* js = nullptr;
  natsStatus s = natsConnection_JetStream(&js, connection, &o);
  if (s != NATS_OK) return nats_status(s, "JetStream context for kv keys");
  kvStore* kv = nullptr;
  // A stream info; on a fresh R3 cluster under load one attempt timed out and weir
  // exited at start (tests/integration/cluster_test.cc [r3]), as in NatsKv::open.
  for (int attempt = 0; attempt < 5; ++attempt) {
    s = js_KeyValue(&kv, js, bucket.c_str());
    if (s != NATS_TIMEOUT) break;
  }
  if (s != NATS_OK) {
    Status st = nats_status(s, "kv open bucket " + bucket);
    jsCtx_Destroy(js);
    return st;
  }
  return std::unique_ptr<NatsKeyList>(new NatsKeyList(js, kv));
}

NatsKeyList::~NatsKeyList() {
  kvStore_Destroy(kv_);
  jsCtx_Destroy(js_);
}

Result<std::vector<std::string>> NatsKeyList::keys(const std::string& prefix) {
  kvKeysList list{};
  natsStatus s = kvStore_Keys(&list, kv_, nullptr);
  std::vector<std::string> out;
  if (s == NATS_NOT_FOUND) return out;  // an empty bucket
  if (s != NATS_OK) return nats_status(s, "kv keys");
  for (int i = 0; i < list.Count; ++i) {
    std::string k = list.Keys[i];
    if (k.compare(0, prefix.size(), prefix) == 0) out.push_back(k.substr(prefix.size()));
  }
  kvKeysList_Destroy(&list);
  return out;
}

}  // namespace weir::cluster

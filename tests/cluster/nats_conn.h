// A plain cnats connection for integration tests (one per simulated instance).
// Throws when it cannot connect: a failed helper fails the test loudly.
#pragma once

#include <nats/nats.h>

#include <stdexcept>
#include <string>

namespace weir::cluster::testing {

class NatsConn {
 public:
  explicit NatsConn(const std::string& url) {
    natsOptions* options = nullptr;
    natsStatus s = natsOptions_Create(&options);
    if (s == NATS_OK) s = natsOptions_SetURL(options, url.c_str());
    if (s == NATS_OK) s = natsOptions_SetSendAsap(options, true);
    if (s == NATS_OK) s = natsOptions_SetMaxReconnect(options, -1);
    if (s == NATS_OK) s = natsOptions_SetReconnectWait(options, 100);
    if (s == NATS_OK) s = natsConnection_Connect(&nc_, options);
    natsOptions_Destroy(options);
    if (s != NATS_OK) throw std::runtime_error("connect " + url + ": " + natsStatus_GetText(s));
  }
  ~NatsConn() { natsConnection_Destroy(nc_); }
  NatsConn(const NatsConn&) = delete;
  NatsConn& operator=(const NatsConn&) = delete;
  natsConnection* get() const { return nc_; }

 private:
  natsConnection* nc_ = nullptr;
};

}  // namespace weir::cluster::testing

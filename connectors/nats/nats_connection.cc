#include "connectors/nats/nats_connection.h"

#include <nats/nats.h>

#include "runtime/base/redact.h"

namespace weir::connectors {

Result<std::unique_ptr<NatsConnection>> NatsConnection::open(const NatsConnectOptions& o) {
  natsOptions* opts = nullptr;
  natsStatus s = natsOptions_Create(&opts);
  if (s == NATS_OK) s = natsOptions_SetURL(opts, o.url.c_str());
  if (s == NATS_OK && !o.name.empty()) s = natsOptions_SetName(opts, o.name.c_str());
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(opts, -1);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(opts, 250);
  if (s == NATS_OK && o.send_asap) s = natsOptions_SetSendAsap(opts, true);
  if (s == NATS_OK && !o.creds_file.empty()) {
    s = natsOptions_SetUserCredentialsFromFiles(opts, o.creds_file.c_str(), nullptr);
  }
  std::unique_ptr<NatsConnection> c(new NatsConnection());
  if (s == NATS_OK) s = natsConnection_Connect(&c->nc_, opts);
  if (opts) natsOptions_Destroy(opts);
  if (s != NATS_OK) {
    c->nc_ = nullptr;
    return Status::unavailable("cannot connect to NATS at " + redact_urls(o.url) + ": " + natsStatus_GetText(s));
  }
  return c;
}

NatsConnection::~NatsConnection() {
  if (nc_) {
    natsConnection_Close(nc_);
    natsConnection_Destroy(nc_);
  }
}

bool NatsConnection::connected() const { return nc_ && natsConnection_Status(nc_) == NATS_CONN_STATUS_CONNECTED; }

}  // namespace weir::connectors

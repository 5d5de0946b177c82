#include "connectors/nats/nats_connection.h"

#include <nats/nats.h>

#include <chrono>
#include <thread>

#include "runtime/base/redact.h"
#include "runtime/base/wall_clock.h"

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
  c->server_ = redact_urls(o.url);
  if (s == NATS_OK) s = natsOptions_SetDisconnectedCB(opts, &NatsConnection::on_disconnected, c.get());
  if (s == NATS_OK) s = natsOptions_SetReconnectedCB(opts, &NatsConnection::on_reconnected, c.get());
  if (s == NATS_OK) s = natsOptions_SetClosedCB(opts, &NatsConnection::on_closed, c.get());
  if (s == NATS_OK) s = natsConnection_Connect(&c->nc_, opts);
  if (opts) natsOptions_Destroy(opts);
  if (s != NATS_OK) {
    c->nc_ = nullptr;
    return Status::unavailable("cannot connect to NATS at " + redact_urls(o.url) + ": " + natsStatus_GetText(s));
  }
  {
    MutexLock lock(c->mu_);
    c->since_ms_ = wall_ms();
  }
  return c;
}

void NatsConnection::on_disconnected(natsConnection* nc, void* self) {
  auto* c = static_cast<NatsConnection*>(self);
  // cnats keeps no text for most drops (a read failure, a stale ping): then the line ends here.
  const char* text = nullptr;
  const natsStatus s = natsConnection_GetLastError(nc, &text);
  std::string error = "the connection to NATS at " + c->server_ + " was lost";
  if (s != NATS_OK) error += ": " + redact_urls(text != nullptr && *text != 0 ? text : natsStatus_GetText(s));
  MutexLock lock(c->mu_);
  c->since_ms_ = wall_ms();
  c->last_error_ = std::move(error);
}

void NatsConnection::on_reconnected(natsConnection*, void* self) {
  auto* c = static_cast<NatsConnection*>(self);
  MutexLock lock(c->mu_);
  c->since_ms_ = wall_ms();
}

void NatsConnection::on_closed(natsConnection*, void* self) {
  static_cast<NatsConnection*>(self)->closed_.store(true, std::memory_order_release);  // the last touch
}

BrokerLink NatsConnection::link() const {
  BrokerLink l;
  l.broker = server_;
  l.connected = connected();
  MutexLock lock(mu_);
  l.since_ms = since_ms_;
  l.last_error = last_error_;
  return l;
}

NatsConnection::~NatsConnection() {
  if (nc_) {
    natsConnection_Close(nc_);
    // The callbacks above run on cnats' thread after Close returns: wait for the last one
    // (bounded, in case none comes) so none runs on a destroyed object, as runtime/nats/bus.cc.
    for (int i = 0; i < 2000 && !closed_.load(std::memory_order_acquire); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    natsConnection_Destroy(nc_);
  }
}

bool NatsConnection::connected() const { return nc_ && natsConnection_Status(nc_) == NATS_CONN_STATUS_CONNECTED; }

}  // namespace weir::connectors

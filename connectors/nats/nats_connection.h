// A core NATS connection of the nats source or sink's own (not the bus's: a slow subject
// must not hold up JetStream acks, and a subscription's delivery thread is its own).
//
// Ownership: NatsConnection owns the natsConnection and destroys it (after closing) in the
// destructor. cnats' calls on it are thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "runtime/base/status.h"
#include "runtime/base/thread_annotations.h"
#include "runtime/ports/sink.h"

struct __natsConnection;

namespace weir::connectors {

struct NatsConnectOptions {
  std::string url;         // nats://host:port (several, comma-separated, are fine)
  std::string creds_file;  // optional .creds file
  std::string name;        // client name the server shows
  bool send_asap = false;  // write every publish at once (replies) instead of batching
};

class NatsConnection {
 public:
  // Connects (reconnecting forever after a loss). Errors name the URL without credentials.
  static Result<std::unique_ptr<NatsConnection>> open(const NatsConnectOptions& options);
  ~NatsConnection();
  NatsConnection(const NatsConnection&) = delete;
  NatsConnection& operator=(const NatsConnection&) = delete;

  __natsConnection* get() const { return nc_; }
  bool connected() const;
  // Connected or not, since when, and the last error cnats saw (for a sink's /status row,
  // docs/adr/0315-broker-sink-health.md). Any thread.
  BrokerLink link() const;

 private:
  NatsConnection() = default;
  // cnats' disconnected, reconnected and closed callbacks (its callback thread; closed is
  // the last, and the destructor waits for it: they run after natsConnection_Close returns).
  static void on_disconnected(__natsConnection* nc, void* self);
  static void on_reconnected(__natsConnection* nc, void* self);
  static void on_closed(__natsConnection* nc, void* self);
  __natsConnection* nc_ = nullptr;
  std::atomic<bool> closed_{false};
  std::string server_;  // the URL without credentials
  mutable Mutex mu_;
  int64_t since_ms_ GUARDED_BY(mu_) = 0;
  std::string last_error_ GUARDED_BY(mu_);
};

}  // namespace weir::connectors

// A core NATS connection of the nats source or sink's own (not the bus's: a slow subject
// must not hold up JetStream acks, and a subscription's delivery thread is its own).
//
// Ownership: NatsConnection owns the natsConnection and destroys it (after closing) in the
// destructor. cnats' calls on it are thread-safe.
#pragma once

#include <memory>
#include <string>

#include "runtime/base/status.h"

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

 private:
  NatsConnection() = default;
  __natsConnection* nc_ = nullptr;
};

}  // namespace weir::connectors

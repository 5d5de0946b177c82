// A plain cnats connection for integration tests (one per simulated instance); `url` may
// be a comma-separated list of servers.
// Throws when it cannot connect: a failed helper fails the test loudly.
#pragma once

#include <nats/nats.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace weir::cluster::testing {

class NatsConn {
 public:
  explicit NatsConn(const std::string& url) {
    natsOptions* options = nullptr;
    natsStatus s = natsOptions_Create(&options);
    // "a,b,c": a server list the client fails over between.
    std::vector<std::string> urls;
    for (size_t start = 0;;) {
      const size_t comma = url.find(',', start);
      urls.push_back(url.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    std::vector<const char*> servers;
    for (const std::string& u : urls) servers.push_back(u.c_str());
    if (s == NATS_OK) s = natsOptions_SetServers(options, servers.data(), static_cast<int>(servers.size()));
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

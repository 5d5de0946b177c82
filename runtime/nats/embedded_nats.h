// EmbeddedNats: the nats-server weir spawns when no NATS URL is configured
// (docs/configuration.md: nats.url).
// JetStream on, file store under <data_dir>/jetstream, loopback only, a free port
// chosen by the server (`-p -1`, read back from its ports file). The child gets
// PR_SET_PDEATHSIG so it dies with weir even under kill -9; stop() ends it by PID.
// Its environment is weir's with GOMAXPROCS at half the CPUs weir may run on (at least
// one) unless weir's environment sets GOMAXPROCS itself (ADR 0265).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>

#include "runtime/base/status.h"

namespace weir {

class EmbeddedNats {
 public:
  static Result<std::unique_ptr<EmbeddedNats>> start(const std::string& data_dir,
                                                     std::chrono::milliseconds wait = std::chrono::seconds(10));
  ~EmbeddedNats();
  const std::string& url() const { return url_; }
  pid_t pid() const { return pid_; }
  void stop();

 private:
  EmbeddedNats() = default;
  pid_t pid_ = -1;
  std::string url_;
};

}  // namespace weir

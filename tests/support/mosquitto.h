// Mosquitto: a throwaway mosquitto broker for tests, on a free loopback port, with
// persistence in its own temp dir so a restart keeps sessions and queued messages.
//
// Contract (like weir::testing::NatsServer): owns the process (started with `-c conf`,
// signalled by PID only, SIGKILLed and reaped in the destructor, PR_SET_PDEATHSIG through
// weir::testing::Process); throws std::runtime_error when it does not come up. When the
// tests run as root, mosquitto drops to the `mosquitto` user: its directory is chowned to
// that user (and made traversable) or it could not save sessions. Not thread-safe: one
// test thread drives it.
#pragma once

#include <string>

#include "tests/support/support.h"

namespace weir::ctest {

struct MosquittoOptions {
  int max_inflight = 20;  // mosquitto's default: QoS 1 messages sent to a client unacknowledged
  bool persistence = true;
  // Non-empty: anonymous clients are refused and this one user (mosquitto_passwd) may connect.
  std::string user;
  std::string password;
};

class Mosquitto {
 public:
  explicit Mosquitto(MosquittoOptions options = {});
  ~Mosquitto();
  Mosquitto(const Mosquitto&) = delete;
  Mosquitto& operator=(const Mosquitto&) = delete;

  int port() const { return port_; }
  std::string url() const { return "tcp://127.0.0.1:" + std::to_string(port_); }
  pid_t pid() const { return proc_.pid(); }
  bool running() { return proc_.running(); }
  std::string log() const;

  void start();  // same port, same persistence; waits until it accepts connections
  void stop();   // SIGTERM (mosquitto saves its database), wait; SIGKILL after 10 s
  void kill();   // SIGKILL

 private:
  MosquittoOptions options_;
  weir::testing::TempDir dir_;
  std::string data_dir_;
  int port_ = 0;
  weir::testing::Process proc_;
};

}  // namespace weir::ctest

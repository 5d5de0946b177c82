// NatsCluster: a three-node nats-server cluster with JetStream on loopback (free ports; a
// start that loses a port to another process is retried on new ones), for the R3 tests.
//
// Contract (as weir::testing::NatsServer): owns its processes (SIGKILL + reap on
// destruction, each by PID) and its temp dir; throws std::runtime_error when a node does
// not come up. One thread at a time; create it on the test's main thread (PDEATHSIG).
#pragma once

#include <csignal>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/support.h"

namespace weir::cluster::testing {

class NatsCluster {
 public:
  explicit NatsCluster(int nodes = 3) : nodes_(nodes) {
    // The route ports must be known before any node starts (each lists the others'), so
    // they come from free_port(), and another process may take one between the probe and
    // nats-server's bind. Such a start is retried on new ports; any other failure throws.
    for (int attempt = 1;; ++attempt) {
      try {
        configure();
        // All at once: a node's JetStream waits for a meta leader, which needs a quorum.
        for (size_t i = 0; i < nodes_.size(); ++i) spawn(i);
        for (size_t i = 0; i < nodes_.size(); ++i) wait_healthy(i, true);
        return;
      } catch (const std::runtime_error&) {
        bool port_taken = false;
        for (Node& n : nodes_) {
          n.proc.kill_and_wait();
          port_taken = port_taken || n.proc.read_log().find("address already in use") != std::string::npos;
          std::filesystem::remove_all(dir_.file(n.name));  // the next attempt starts from an empty store
        }
        if (attempt == 5 || !port_taken) throw;
      }
    }
  }

  std::string url(size_t i) const { return "nats://127.0.0.1:" + std::to_string(nodes_.at(i).port); }
  // Every node, comma separated: a client fails over between them.
  std::string urls() const {
    std::string out;
    for (size_t i = 0; i < nodes_.size(); ++i) out += (i ? "," : "") + url(i);
    return out;
  }
  const std::string& name(size_t i) const { return nodes_.at(i).name; }
  int monitor_port(size_t i) const { return nodes_.at(i).monitor; }  // GET /jsz, /healthz
  size_t size() const { return nodes_.size(); }
  size_t index_of(const std::string& server_name) const {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].name == server_name) return i;
    }
    throw std::runtime_error("NatsCluster: no node named " + server_name);
  }

  void kill(size_t i) { nodes_.at(i).proc.kill_and_wait(); }
  // SIGTERM: a stream leader on it hands leadership over before it exits.
  void stop(size_t i) {
    Node& n = nodes_.at(i);
    n.proc.signal(SIGTERM);
    if (!n.proc.wait_exit(std::chrono::seconds(10))) n.proc.kill_and_wait();
  }
  void start(size_t i) {
    spawn(i);
    wait_healthy(i);
  }

 private:
  struct Node {
    std::string name, conf, log;
    int port = 0, monitor = 0, route = 0;
    weir::testing::Process proc;
  };

  // Fresh ports and config files for every node.
  void configure() {
    for (Node& n : nodes_) {
      n.port = weir::testing::free_port();
      n.monitor = weir::testing::free_port();
      n.route = weir::testing::free_port();
    }
    for (size_t i = 0; i < nodes_.size(); ++i) {
      Node& n = nodes_[i];
      n.name = "n" + std::to_string(i + 1);
      n.conf = dir_.file(n.name + ".conf");
      n.log = dir_.file(n.name + ".log");
      std::string routes;
      for (size_t j = 0; j < nodes_.size(); ++j) {
        if (j == i) continue;
        if (!routes.empty()) routes += ", ";
        routes += "nats-route://127.0.0.1:" + std::to_string(nodes_[j].route);
      }
      weir::testing::write_file(
          n.conf, "server_name: " + n.name + "\n" + "listen: 127.0.0.1:" + std::to_string(n.port) + "\n" +
                      "http: 127.0.0.1:" + std::to_string(n.monitor) + "\n" + "jetstream { store_dir: \"" +
                      dir_.file(n.name) + "\" }\n" + "cluster {\n  name: weirtest\n  listen: 127.0.0.1:" +
                      std::to_string(n.route) + "\n  routes: [ " + routes + " ]\n}\n");
    }
  }

  void spawn(size_t i) {
    Node& n = nodes_.at(i);
    n.proc = weir::testing::Process::spawn({"nats-server", "-c", n.conf}, {}, n.log);
  }

  // `together`: the nodes start as one (the constructor), so any of them exiting fails it.
  void wait_healthy(size_t i, bool together = false) {
    Node& n = nodes_.at(i);
    const std::string health = "http://127.0.0.1:" + std::to_string(n.monitor) + "/healthz";
    const bool up = weir::testing::wait_until(
        [&] {
          // A node that exited (a port taken) fails the start at once: the others would
          // wait for a quorum that cannot come.
          for (Node& other : nodes_) {
            if ((together || &other == &n) && !other.proc.running()) return true;
          }
          return weir::testing::http_request("GET", health, "", {}, std::chrono::milliseconds(500)).status == 200;
        },
        std::chrono::seconds(30), std::chrono::milliseconds(50));
    for (Node& other : nodes_) {
      if ((together || &other == &n) && !other.proc.running()) {
        throw std::runtime_error("NatsCluster: " + other.name + " exited; log:\n" + other.proc.read_log());
      }
    }
    if (!up) throw std::runtime_error("NatsCluster: " + n.name + " did not become healthy; log:\n" + n.proc.read_log());
  }

  weir::testing::TempDir dir_;
  std::vector<Node> nodes_;
};

}  // namespace weir::cluster::testing

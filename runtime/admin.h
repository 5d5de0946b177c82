// Admin: the admin HTTP API of spec §5 (/healthz, /readyz, /metrics, /status, /flows, /dlq,
// /tables)
// and the dashboard at `/` (runtime/dashboard/; docs/admin-api.md, docs/dashboard.md).
// Handlers run on the io thread; slow calls (dead-letter listing and replay, which
// read the stream message by message) run on the admin worker thread and answer
// from there. With a token, every call but /healthz and /readyz needs
// `Authorization: Bearer <token>`.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/dlq.h"
#include "runtime/http_server.h"
#include "runtime/kv_tables.h"
#include "runtime/metrics.h"

namespace weir {

// What the admin API asks of the running process.
class AdminBackend {
 public:
  virtual ~AdminBackend() = default;
  virtual bool ready(std::string* why) const = 0;
  virtual nlohmann::json flows() const = 0;                                 // array
  virtual std::optional<nlohmann::json> flow(const std::string& name) const = 0;
  // Deploy/promote/rollback: answered with (status code, JSON body). `target`: the
  // `?target=` of the PUT: "" (the mode's default), "file" or "registry" (ADR 0043).
  virtual std::pair<int, nlohmann::json> deploy(const std::string& name, const std::string& body,
                                                const std::string& target) = 0;
  // `expected_active` != 0: a compare-and-set from the client (409 when another is active).
  virtual std::pair<int, nlohmann::json> promote(const std::string& name, int64_t version,
                                                 int64_t expected_active) = 0;
  virtual std::pair<int, nlohmann::json> rollback(const std::string& name) = 0;
  virtual nlohmann::json status() const = 0;
};

class Admin {
 public:
  Admin(AdminBackend& backend, Metrics& metrics, DeadLetters* dlq, std::string token);
  ~Admin();
  Handler handler();
  // The dead-letter stream becomes available once NATS is connected.
  void set_dead_letters(DeadLetters* dlq) { dlq_.store(dlq); }
  // KV lookup tables (/tables), likewise once NATS is connected.
  void set_tables(KvTables* tables) { tables_.store(tables); }

 private:
  void handle(HttpRequest& req, Responder respond);
  bool serve_dashboard(std::string_view path, const Responder& respond);
  void on_worker(std::function<void()> job);
  bool handle_tables(HttpRequest& req, const Responder& respond);

  AdminBackend& backend_;
  Metrics& metrics_;
  std::atomic<DeadLetters*> dlq_;
  std::atomic<KvTables*> tables_{nullptr};
  std::string token_;   // never logged
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;   // GUARDED_BY(mu_)
  bool stopping_ = false;                    // GUARDED_BY(mu_)
  std::thread worker_;
};

}  // namespace weir

// Admin: the admin HTTP API (/healthz, /readyz, /metrics, /status, /flows, /dlq,
// /tables)
// and the dashboard at `/` (runtime/admin/dashboard/; docs/admin-api.md, docs/dashboard.md).
// Handlers run on the io thread; slow calls (dead-letter listing and replay, which
// read the stream message by message) run on the admin worker thread and answer
// from there. With a token, every call but /healthz and /readyz needs
// `Authorization: Bearer <token>`, checked before the body is read (check_header).
// Worker jobs: at most kMaxQueuedJobs wait (past it 503 + Retry-After); a job that
// throws answers 500 with a generic message and the worker goes on.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/admin/admin_service.h"
#include "runtime/flow/dlq.h"
#include "runtime/http/http_server.h"
#include "runtime/flow/kv_tables.h"
#include "runtime/base/metrics.h"
#include "runtime/base/thread_annotations.h"

namespace weir {

class Admin {
 public:
  // Jobs waiting for the worker, past the one it runs; past it a call is 503.
  static constexpr size_t kMaxQueuedJobs = 64;

  Admin(AdminBackend& backend, Metrics& metrics, DeadLetters* dlq, std::string token);
  ~Admin();
  Handler handler();
  // For HttpServerOptions::check_header: 401 for a call that needs the token and lacks
  // it, answered before the body is read.
  std::function<std::optional<HttpResponse>(const HttpRequest&)> header_check() const;
  // The dead-letter stream becomes available once NATS is connected.
  void set_dead_letters(DeadLetters* dlq) { dlq_.store(dlq); }
  // KV lookup tables (/tables), likewise once NATS is connected.
  void set_tables(KvTables* tables) { tables_.store(tables); }

 private:
  void handle(HttpRequest& req, const Responder& respond);
  bool serve_dashboard(std::string_view path, const Responder& respond);
  // Runs `job` on the worker with a Responder that answers once; 503 when the queue is
  // full, 500 when the job throws without having answered.
  void on_worker(const Responder& respond, std::function<void(const Responder&)> job) EXCLUDES(mu_);
  bool authorized(const HttpRequest& req, const Responder& respond) const;
  bool needs_token(const HttpRequest& req) const;
  bool token_ok(const HttpRequest& req) const;
  bool handle_metrics(const HttpRequest& req, const Responder& respond);
  bool handle_flows(HttpRequest& req, const Responder& respond);
  bool handle_tables(HttpRequest& req, const Responder& respond);
  bool handle_dlq(HttpRequest& req, const Responder& respond);
  void list_dead_letters(DeadLetters& dlq, const HttpRequest& req, const Responder& respond);
  void replay_dead_letters(DeadLetters& dlq, const HttpRequest& req, const Responder& respond);

  AdminBackend& backend_;
  AdminService service_;  // the flow and version calls, as HTTP answers
  Metrics& metrics_;
  std::atomic<DeadLetters*> dlq_;
  std::atomic<KvTables*> tables_{nullptr};
  std::string token_;  // never logged
  Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread worker_;
};

}  // namespace weir

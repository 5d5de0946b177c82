// AdminService: the admin API's flow and version calls (docs/admin-api.md: GET /flows,
// /flows/{name}, /status, PUT /flows/{name}, promote, rollback) as HTTP answers. The one
// place that maps the runtime's control-plane results (runtime/base/control.h: Outcome) to
// HTTP statuses; the runtime, its flows and cluster/ answer in Outcomes
// (docs/adr/0200-thin-runtime-core.md).
// Admin (admin.h) routes requests here and writes the answers.
//
// Thread: called on the admin worker thread (the backend's calls may take KV round trips);
// holds no state of its own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/control.h"

namespace weir {

// What the admin API asks of the running process (implemented by the runtime's FlowHost).
class AdminBackend {
 public:
  virtual ~AdminBackend() = default;
  virtual bool ready(std::string* why) const = 0;
  // Ready, but a broker sink is not connected: one line each (docs/adr/0315-broker-sink-health.md).
  virtual std::vector<std::string> degraded() const { return {}; }
  virtual nlohmann::json flows() const = 0;  // array
  virtual std::optional<nlohmann::json> flow(const std::string& name) const = 0;
  // `target`: the `?target=` of the PUT: "" (the mode's default), "file" or "registry"
  // (ADR 0043).
  virtual ControlResult deploy(const std::string& name, const std::string& body, const std::string& target) = 0;
  // `expected_active` != 0: a compare-and-set from the client (kConflict when another is active).
  virtual ControlResult promote(const std::string& name, int64_t version, int64_t expected_active) = 0;
  virtual ControlResult rollback(const std::string& name) = 0;
  virtual nlohmann::json status() const = 0;
  // GET /sinks: every sink stage's circuit here (docs/adr/0294-sink-circuit-breaker.md).
  virtual nlohmann::json sinks() const { return nlohmann::json::array(); }
  // POST /sinks/{flow}/{sink}/pause|resume.
  virtual ControlResult control_sink(const std::string& flow, const std::string& sink, bool pause) {
    (void)flow, (void)sink, (void)pause;
    return ControlResult::failed(Outcome::kNotSupported, "sinks cannot be paused here");
  }
};

// An HTTP status and its JSON body.
struct AdminAnswer {
  int code = 200;
  nlohmann::json body;
};

// kDone 200, kCreated 201, kBadRequest 400, kNotFound 404, kConflict 409, kTooLarge 413,
// kInvalid 422, kFailed 500, kNotSupported 501, kUnavailable 503.
int http_status(Outcome outcome);
// A result as the HTTP answer (the table calls of runtime/flow/kv_tables.h use it too).
AdminAnswer answer(ControlResult r);

class AdminService {
 public:
  explicit AdminService(AdminBackend& backend) : backend_(backend) {}
  AdminAnswer flows() const { return {200, backend_.flows()}; }
  AdminAnswer flow(const std::string& name) const;  // 404 for a flow that does not run here
  AdminAnswer status() const { return {200, backend_.status()}; }
  AdminAnswer sinks() const { return {200, backend_.sinks()}; }
  AdminAnswer control_sink(const std::string& flow, const std::string& sink, bool pause) {
    return answer(backend_.control_sink(flow, sink, pause));
  }
  AdminAnswer deploy(const std::string& name, const std::string& body, const std::string& target);
  AdminAnswer promote(const std::string& name, int64_t version, int64_t expected_active);
  AdminAnswer rollback(const std::string& name);

 private:
  AdminBackend& backend_;
};

}  // namespace weir

// ControlResult: the answer of a control-plane call (deploy, promote, rollback) in the
// runtime's own words — what happened and the JSON that describes it — so the flows, the
// version registry (cluster/) and the runtime never speak HTTP. admin_service.h is the one
// place that turns an Outcome into an HTTP status (docs/adr/0200-thin-runtime-core.md).
// A value type; no threads.
#pragma once

#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "runtime/base/status.h"

namespace weir {

enum class Outcome {
  kDone,          // done (or nothing to do: the same version again)
  kCreated,       // something new was stored or started
  kBadRequest,    // the call itself is malformed (an unknown target, version 0)
  kInvalid,       // the flow file or version cannot run
  kNotFound,      // no such flow or version
  kConflict,      // the state does not allow it now (stale, a switch in progress, taken)
  kTooLarge,      // over a configured limit (a table's rows or row size)
  kNotSupported,  // not in this mode (versions need a cluster)
  kUnavailable,   // not now: starting, draining, a store that did not answer; try again
  kFailed,        // an internal failure (a file that cannot be written)
};

struct [[nodiscard]] ControlResult {
  Outcome outcome = Outcome::kDone;
  nlohmann::json body = nlohmann::json::object();  // on failure: {"error": why, …details}

  bool ok() const { return outcome == Outcome::kDone || outcome == Outcome::kCreated; }
  static ControlResult done(nlohmann::json body) { return {Outcome::kDone, std::move(body)}; }
  static ControlResult created(nlohmann::json body) { return {Outcome::kCreated, std::move(body)}; }
  static ControlResult failed(Outcome outcome, const std::string& error) {
    return {outcome, nlohmann::json{{"error", error}}};
  }
  // A Status as a failure: invalid → kInvalid, not_found → kNotFound, conflict →
  // kConflict, unavailable/timeout → kUnavailable, too_large → kTooLarge, internal → kFailed.
  static ControlResult from(const Status& s);
};

inline ControlResult ControlResult::from(const Status& s) {
  switch (s.code()) {
    case Status::Code::kOk: return done(nlohmann::json::object());
    case Status::Code::kInvalid: return failed(Outcome::kInvalid, s.message());
    case Status::Code::kNotFound: return failed(Outcome::kNotFound, s.message());
    case Status::Code::kConflict: return failed(Outcome::kConflict, s.message());
    case Status::Code::kUnavailable:
    case Status::Code::kTimeout: return failed(Outcome::kUnavailable, s.message());
    case Status::Code::kTooLarge: return failed(Outcome::kTooLarge, s.message());
    case Status::Code::kInternal: return failed(Outcome::kFailed, s.message());
  }
  return failed(Outcome::kFailed, s.message());
}

}  // namespace weir

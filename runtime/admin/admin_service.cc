#include "runtime/admin/admin_service.h"

namespace weir {
AdminAnswer answer(ControlResult r) { return {http_status(r.outcome), std::move(r.body)}; }

int http_status(Outcome outcome) {
  switch (outcome) {
    case Outcome::kDone: return 200;
    case Outcome::kCreated: return 201;
    case Outcome::kBadRequest: return 400;
    case Outcome::kNotFound: return 404;
    case Outcome::kConflict: return 409;
    case Outcome::kTooLarge: return 413;
    case Outcome::kInvalid: return 422;
    case Outcome::kFailed: return 500;
    case Outcome::kNotSupported: return 501;
    case Outcome::kUnavailable: return 503;
  }
  return 500;
}

AdminAnswer AdminService::flow(const std::string& name) const {
  if (auto f = backend_.flow(name)) return {200, std::move(*f)};
  return {404, {{"error", "no flow named " + name}}};
}

AdminAnswer AdminService::deploy(const std::string& name, const std::string& body, const std::string& target) {
  return answer(backend_.deploy(name, body, target));
}

AdminAnswer AdminService::promote(const std::string& name, int64_t version, int64_t expected_active) {
  return answer(backend_.promote(name, version, expected_active));
}

AdminAnswer AdminService::rollback(const std::string& name) { return answer(backend_.rollback(name)); }

}  // namespace weir

#include "runtime/admin/replay_request.h"

#include <algorithm>
#include <cstdint>

#include "flows/time_format.h"

namespace weir {
namespace {

constexpr const char* kKeys = "flow, sink, ids, since, until, reason or dry_run";

// A non-empty string at `key`, or why not.
std::optional<std::string> text(const nlohmann::json& j, const char* key, const char* what,
                                std::optional<std::string>* out) {
  if (!j.contains(key)) return std::nullopt;
  const auto& v = j.at(key);
  if (!v.is_string() || v.get<std::string>().empty()) return std::string(key) + " must be " + what;
  *out = v.get<std::string>();
  return std::nullopt;
}

// A time at `key`: an RFC 3339 string, or whole milliseconds since the epoch (as `at`).
std::optional<std::string> instant(const nlohmann::json& j, const char* key, std::optional<int64_t>* out) {
  if (!j.contains(key)) return std::nullopt;
  const auto& v = j.at(key);
  const std::string expected = std::string(key) +
                               " must be an RFC 3339 timestamp such as \"2026-01-02T15:04:05Z\" "
                               "or whole milliseconds since the epoch";
  if (v.is_number_unsigned()) {
    *out = static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX));
    return std::nullopt;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    *out = v.get<int64_t>();
    return std::nullopt;
  }
  if (!v.is_string()) return expected;
  const std::string s = v.get<std::string>();
  int64_t ms = 0;
  std::string error;
  if (s.empty()) return expected;
  if (!flows::parse_rfc3339(s, &ms, &error)) return std::string(key) + " \"" + s.substr(0, 64) + "\" is " + error;
  *out = ms;
  return std::nullopt;
}

}  // namespace

std::optional<std::string> parse_replay_request(std::string_view body, ReplayRequest* out) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return std::nullopt;
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "the body must be a JSON object";
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k != "flow" && k != "sink" && k != "ids" && k != "since" && k != "until" && k != "reason" && k != "dry_run") {
      return "unknown key \"" + k.substr(0, 64) + "\" (expected " + kKeys + ")";
    }
  }
  ReplayFilter& f = out->filter;
  if (auto bad = text(j, "flow", "a flow name (a non-empty string)", &f.flow)) return bad;
  if (auto bad = text(j, "sink", "a sink name (a non-empty string)", &f.sink)) return bad;
  if (auto bad = text(j, "reason", "text the reason contains (a non-empty string)", &f.reason)) return bad;
  if (j.contains("ids")) {
    const auto& ids = j.at("ids");
    if (!ids.is_array()) return "ids must be an array of event ids";
    if (ids.empty()) return "ids must name at least one event id (send {} to replay all)";
    for (const auto& id : ids) {
      if (!id.is_string() || id.get<std::string>().empty()) return "ids must hold event ids (non-empty strings)";
      f.ids.push_back(id.get<std::string>());
    }
  }
  if (auto bad = instant(j, "since", &f.since_ms)) return bad;
  if (auto bad = instant(j, "until", &f.until_ms)) return bad;
  if (f.since_ms && f.until_ms && *f.since_ms >= *f.until_ms) {
    return "since must be before until (the range is since inclusive, until exclusive)";
  }
  if (j.contains("dry_run")) {
    if (!j.at("dry_run").is_boolean()) return "dry_run must be true or false";
    out->dry_run = j.at("dry_run").get<bool>();
  }
  return std::nullopt;
}

nlohmann::json replay_answer(const ReplayResult& r, bool dry_run) {
  if (dry_run) {
    nlohmann::json flows = nlohmann::json::object();
    for (const auto& [flow, stages] : r.by_stage) {
      for (const auto& [stage, n] : stages) flows[flow][stage] = n;
    }
    return {{"dry_run", true}, {"would_replay", r.matched}, {"flows", std::move(flows)}};
  }
  nlohmann::json j = {{"replayed", r.replayed}, {"remaining", r.remaining}};
  if (!r.held.empty()) j["held"] = r.held;
  return j;
}

}  // namespace weir

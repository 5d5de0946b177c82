#include "runtime/dlq.h"

#include <chrono>
#include <future>

#include "flows/json_limits.h"

namespace weir {
namespace {
constexpr const char* kFlow = "Weir-Flow";
constexpr const char* kVersion = "Weir-Version";
constexpr const char* kStage = "Weir-Stage";
constexpr const char* kReason = "Weir-Reason";
constexpr const char* kDeliveries = "Weir-Deliveries";
constexpr const char* kSubject = "Weir-Subject";

std::string stage_token(const std::string& stage) {
  std::string t = stage;
  for (char& c : t) {
    if (c == ':' || c == '.' || c == '*' || c == '>' || c == ' ') c = '-';
  }
  return t;
}

std::string header_of(const StoredMessage& m, const char* name) {
  for (const auto& [k, v] : m.headers) {
    if (k == name) return v;
  }
  return {};
}

// Header values must be one line.
std::string one_line(std::string s) {
  for (char& c : s) {
    if (c == '\r' || c == '\n') c = ' ';
  }
  if (s.size() > 1000) s.resize(1000);
  return s;
}
}  // namespace

void DeadLetters::publish(const DeadLetter& d, PublishCallback done) {
  Headers h = {
      {layout::kHeaderId, d.event_id},
      // One dead letter per dying message: a redelivered copy of the same message that
      // dies again is deduplicated, a replayed one (new sequence) is not.
      {layout::kHeaderMsgId,
       "dlq:" + d.source_stream + ":" + (d.source_key.empty() ? std::to_string(d.source_sequence) : d.source_key)},
      {kFlow, d.flow},
      {kVersion, std::to_string(d.version)},
      {kStage, d.stage},
      {kReason, one_line(d.reason)},
      {kDeliveries, std::to_string(d.deliveries)},
      {kSubject, d.replay_subject},
  };
  bus_.publish(layout::dlq_subject(d.flow, stage_token(d.stage)), d.body, h, std::chrono::seconds(5),
               std::move(done));
}

Result<nlohmann::json> DeadLetters::list(const std::optional<std::string>& flow, size_t limit) {
  auto bounds = bus_.stream_bounds(layout::kDlqStream);
  if (!bounds) return bounds.status();
  nlohmann::json out = nlohmann::json::array();
  auto [first, last] = bounds.value();
  for (uint64_t seq = first; seq != 0 && seq <= last && out.size() < limit; ++seq) {
    auto m = bus_.get_message(layout::kDlqStream, seq);
    if (!m) continue;   // deleted (replayed) sequences leave gaps
    std::string f = header_of(m.value(), kFlow);
    if (flow && f != *flow) continue;
    // Bounded: a dead letter may be the very event that was too deep to run.
    auto parsed = flows::parse_json(m->data, flows::kDefaultMaxDepth);
    nlohmann::json event = parsed ? std::move(*parsed) : nlohmann::json(m->data);
    auto num = [&](const char* name) -> int64_t {
      try {
        return std::stoll(header_of(m.value(), name));
      } catch (...) {
        return 0;
      }
    };
    out.push_back({{"id", header_of(m.value(), layout::kHeaderId)},
                   {"seq", seq},
                   {"flow", f},
                   {"version", num(kVersion)},
                   {"stage", header_of(m.value(), kStage)},
                   {"reason", header_of(m.value(), kReason)},
                   {"deliveries", num(kDeliveries)},
                   {"at", m->time_ns / 1'000'000},
                   {"event", std::move(event)}});
  }
  return out;
}

Result<size_t> DeadLetters::replay(const std::optional<std::string>& flow, const std::vector<std::string>& ids) {
  auto bounds = bus_.stream_bounds(layout::kDlqStream);
  if (!bounds) return bounds.status();
  auto [first, last] = bounds.value();
  size_t replayed = 0;
  for (uint64_t seq = first; seq != 0 && seq <= last; ++seq) {
    auto m = bus_.get_message(layout::kDlqStream, seq);
    if (!m) continue;
    std::string id = header_of(m.value(), layout::kHeaderId);
    if (flow && header_of(m.value(), kFlow) != *flow) continue;
    if (!ids.empty() && std::find(ids.begin(), ids.end(), id) == ids.end()) continue;
    std::string subject = header_of(m.value(), kSubject);
    if (subject.empty()) continue;
    Headers h = {{layout::kHeaderId, id},
                 {layout::kHeaderMsgId, id + "#replay" + std::to_string(seq)}};
    std::promise<Status> done;
    bus_.publish(subject, m->data, h, std::chrono::seconds(5),
                 [&done](const Status& s, const PubAck&) { done.set_value(s); });
    Status s = done.get_future().get();
    if (!s) return Status(s);
    if (Status d = bus_.delete_message(layout::kDlqStream, seq); !d) return d;
    ++replayed;
  }
  return replayed;
}

}  // namespace weir

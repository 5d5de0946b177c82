// The names weir gives streams, subjects, consumers and buckets (bus.h, namespace layout).
#include <string>
#include <string_view>

#include "runtime/nats/bus.h"

namespace weir {

namespace layout {
namespace {
std::string g_cluster;  // set once at start (set_cluster), read-only after

std::string subject_prefix() { return g_cluster.empty() ? "weir" : "weirc." + g_cluster; }
std::string stream_prefix() { return g_cluster.empty() ? "weir_" : "weirc_" + g_cluster + "__"; }
}  // namespace

void set_cluster(std::string_view cluster) { g_cluster = std::string(cluster); }
const std::string& cluster() { return g_cluster; }

std::string invalid_cluster_name(std::string_view name) {
  if (name.empty() || name.size() > 32) return "must be 1 to 32 characters";
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    if (!ok) return "may use only A-Z a-z 0-9 _ - (it names streams, subjects and KV buckets)";
  }
  if (name.find("__") != std::string_view::npos)
    return "may not contain \"__\" (it separates the cluster from the flow in stream names)";
  return "";
}

std::string flow_stream(std::string_view flow) { return stream_prefix() + std::string(flow); }
std::string flow_subjects(std::string_view flow) { return subject_prefix() + "." + std::string(flow) + ".>"; }
std::string input_subject(std::string_view flow) { return subject_prefix() + "." + std::string(flow) + ".in"; }
std::string output_subject(std::string_view flow, std::string_view sink) {
  return subject_prefix() + "." + std::string(flow) + ".out." + std::string(sink);
}
std::string flow_consumer(std::string_view flow) { return std::string(flow); }
std::string sink_consumer(std::string_view flow, std::string_view sink) {
  return std::string(flow) + "-to-" + std::string(sink);
}
std::string flow_of_subject(std::string_view subject) {
  const std::string prefix = subject_prefix() + ".";
  if (subject.substr(0, prefix.size()) != prefix) return {};
  std::string_view rest = subject.substr(prefix.size());
  const size_t dot = rest.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot + 1 == rest.size()) return {};
  std::string_view flow = rest.substr(0, dot);
  if (flow == "dlq") return {};
  return std::string(flow);
}
std::string dlq_stream() { return stream_prefix() + "dlq"; }
std::string dlq_subjects() { return subject_prefix() + ".dlq.>"; }
std::string dlq_subject(std::string_view flow, std::string_view stage) {
  return subject_prefix() + ".dlq." + std::string(flow) + "." + std::string(stage);
}
std::string state_bucket() { return g_cluster.empty() ? "weir_state" : "weir_state_" + g_cluster; }
bool is_internal_subject(std::string_view subject) {
  return subject.rfind("weir.", 0) == 0 || subject.rfind("weirc.", 0) == 0 || subject == "weir" || subject == "weirc";
}
}  // namespace layout

}  // namespace weir

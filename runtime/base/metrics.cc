#include "runtime/base/metrics.h"

#include <unistd.h>

#include <cstdio>
#include <deque>

#include "runtime/base/trace_export.h"

namespace weir {

void Histogram::observe(std::chrono::nanoseconds d) {
  double s = static_cast<double>(d.count()) / 1e9;
  size_t i = 0;
  while (i < kBounds.size() && s > kBounds[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(d.count() > 0 ? d.count() : 0), std::memory_order_relaxed);
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  uint64_t cumulative = 0;
  char buf[64];
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    std::snprintf(buf, sizeof buf, "%g", kBounds[i]);
    out += name + "_bucket{" + labels + ",le=\"" + buf + "\"} " + std::to_string(cumulative) + "\n";
  }
  cumulative += buckets_[kBounds.size()].load(std::memory_order_relaxed);
  out += name + "_bucket{" + labels + ",le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
  std::snprintf(buf, sizeof buf, "%.9f", static_cast<double>(sum_ns_.load()) / 1e9);
  out += name + "_sum{" + labels + "} " + buf + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_.load()) + "\n";
}

StageMetrics& Metrics::stage(const std::string& flow, const std::string& stage) {
  MutexLock lock(mu_);
  for (auto& s : stages_) {
    if (s.flow == flow && s.stage == stage) return s;
  }
  auto& s = stages_.emplace_back();
  s.flow = flow;
  s.stage = stage;
  return s;
}

uint64_t Metrics::acked(const std::string& flow, const std::string& stage) const {
  MutexLock lock(mu_);
  uint64_t n = 0;
  for (const auto& s : stages_) {
    if (s.flow == flow && s.stage == stage) n += s.acked.load();
  }
  return n;
}

int64_t process_rss_bytes() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

namespace {

std::string labels(const StageMetrics& s) { return "flow=\"" + s.flow + "\",stage=\"" + s.stage + "\""; }

// One series per stage (or per ingress stage) of a StageMetrics field.
template <typename T>
struct Family {
  const char* name;
  const char* type;
  const char* help;
  std::atomic<T> StageMetrics::*field;
  bool ingress_only = false;
  bool sink_only = false;
};

template <typename T, size_t N>
void render_families(std::string& out, const Family<T> (&families)[N], const std::deque<StageMetrics>& stages) {
  for (const auto& f : families) {
    out += std::string("# HELP ") + f.name + " " + f.help + "\n# TYPE " + f.name + " " + f.type + "\n";
    for (const auto& s : stages) {
      if (f.ingress_only && s.stage != "ingress") continue;
      if (f.sink_only && s.stage.rfind("sink:", 0) != 0) continue;
      out += std::string(f.name) + "{" + labels(s) + "} " + std::to_string((s.*f.field).load()) + "\n";
    }
  }
}

const Family<uint64_t> kCounters[] = {
    {"weir_events_received_total", "counter", "Events that entered the stage.", &StageMetrics::received},
    {"weir_events_acked_total", "counter", "Events the stage finished (output persisted or delivered).",
     &StageMetrics::acked},
    {"weir_events_errors_total", "counter", "Failed attempts (retried or answered with an error).",
     &StageMetrics::errors},
    {"weir_events_dlq_total", "counter", "Events sent to the dead-letter stream.", &StageMetrics::dead},
    {"weir_events_dropped_total", "counter", "Events filtered out or dropped on error.", &StageMetrics::dropped},
    {"weir_ack_failures_total", "counter", "Acks and naks the NATS connection did not take (a redelivery follows).",
     &StageMetrics::ack_failures},
    {"weir_consumer_recreated_total", "counter",
     "Times the stage's durable was created again: starved by pending entries without messages (ADR 0235), or "
     "forgotten by a restarted server that kept its state in memory (ADR 0320).",
     &StageMetrics::consumer_recreated},
    {"weir_deliveries_corrupt_total", "counter",
     "Deliveries whose body did not match its Weir-Sum checksum: naked and redelivered from the stream, never "
     "handled (ADR 0286).",
     &StageMetrics::corrupt},
    {"weir_ingress_rejected_total", "counter",
     "Events refused by backpressure (backlog or pending cap; 503 at http-in).", &StageMetrics::rejected, true},
    {"weir_sink_transitions_total", "counter",
     "Times the sink's circuit changed state (closed, open, paused; ADR 0294).", &StageMetrics::sink_transitions, false,
     true},
};

const Family<int64_t> kGauges[] = {
    {"weir_events_in_flight", "gauge", "Events inside the stage now.", &StageMetrics::in_flight},
    {"weir_consumer_lag", "gauge", "Messages waiting in the stage's consumer.", &StageMetrics::lag},
    {"weir_flow_backlog_bytes", "gauge", "Bytes in the flow's stream not yet delivered, as ingress last saw them.",
     &StageMetrics::backlog_bytes, true},
    {"weir_flow_backlog_events", "gauge", "Events in the flow's stream not yet delivered, as ingress last saw them.",
     &StageMetrics::backlog_events, true},
    {"weir_flow_backlog_delay_bound", "gauge",
     "Stream messages backlog.max_delay lets the backlog hold now (drain rate x max_delay / messages per event, "
     "never below its floor); 0 = no delay bound in force.",
     &StageMetrics::backlog_delay_bound, true},
    {"weir_flow_backlog_drain_rate", "gauge",
     "Stream messages per second that left the flow's stream, smoothed over the backlog refreshes.",
     &StageMetrics::backlog_drain_rate, true},
    {"weir_flow_backlog_max_bytes", "gauge",
     "The flow's backlog bound in bytes (backlog.max_bytes or its default); 0 = none.",
     &StageMetrics::backlog_max_bytes, true},
    {"weir_flow_backlog_max_events", "gauge",
     "The flow's backlog bound in stream messages (backlog.max_events); 0 = none.", &StageMetrics::backlog_max_events,
     true},
    {"weir_sink_state", "gauge",
     "The sink's circuit: 0 closed (delivering), 1 open (receiver failing: events wait, one probe at a time), 2 "
     "paused by hand (ADR 0294).",
     &StageMetrics::sink_state, false, true},
    {"weir_sink_queued", "gauge",
     "Deliveries in the sink's own queue: waiting for a connection, or with rate: for a token (ADR 0296).",
     &StageMetrics::sink_queued, false, true},
    {"weir_sink_open_milliseconds_total", "counter",
     "Time the sink's circuit spent open or paused since start, in milliseconds.", &StageMetrics::sink_open_ms, false,
     true},
};

}  // namespace

void Metrics::set_nats_probe(std::function<bool()> probe) {
  MutexLock lock(mu_);
  nats_probe_ = std::move(probe);
}

std::string Metrics::render_prometheus() const {
  std::string out;
  out.reserve(8192);
  MutexLock lock(mu_);
  render_families(out, kCounters, stages_);
  render_families(out, kGauges, stages_);
  out +=
      "# HELP weir_ingress_pending_publishes Source events waiting for their PubAck.\n"
      "# TYPE weir_ingress_pending_publishes gauge\nweir_ingress_pending_publishes " +
      std::to_string(ingress_pending.load()) + "\n";
  out += "# HELP weir_reloads_total SIGHUP reloads by outcome.\n# TYPE weir_reloads_total counter\n";
  out += "weir_reloads_total{result=\"ok\"} " + std::to_string(reloads_ok.load()) + "\n";
  out += "weir_reloads_total{result=\"failed\"} " + std::to_string(reloads_failed.load()) + "\n";
  out +=
      "# HELP weir_nats_connected 1 while weir's NATS connections are up, 0 while one is away.\n"
      "# TYPE weir_nats_connected gauge\nweir_nats_connected " +
      std::string(nats_probe_ && nats_probe_() ? "1" : "0") + "\n";
  out +=
      "# HELP weir_stage_latency_seconds Time an event spends in the stage.\n# TYPE weir_stage_latency_seconds "
      "histogram\n";
  for (const auto& s : stages_) s.latency.render(out, "weir_stage_latency_seconds", labels(s));
  out +=
      "# HELP weir_process_resident_memory_bytes Resident set size.\n# TYPE weir_process_resident_memory_bytes gauge\n";
  out += "weir_process_resident_memory_bytes " + std::to_string(process_rss_bytes()) + "\n";
  double up = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", up);
  out += "# HELP weir_uptime_seconds Seconds since start.\n# TYPE weir_uptime_seconds gauge\nweir_uptime_seconds " +
         std::string(buf) + "\n";
  trace::render_metrics(out);  // weir_trace_* (ADR 0141)
  return out;
}

}  // namespace weir

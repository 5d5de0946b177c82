// SpanExporter: optional OTLP/HTTP export (JSON encoding) of one span per stage per
// event (ingress, flow, sink) to a collector (`trace: {otlp_endpoint: URL}` in weir.yaml;
// docs/adr/0141-otlp-span-export.md).
//
// The data path only calls record(): it takes a mutex for a push onto a bounded queue
// and never waits — a full queue drops the span and counts it
// (weir_trace_spans_dropped_total). The exporter's own thread sends a batch every
// `interval` or once `batch` spans wait, with libcurl (blocking, on that thread only). A
// batch the collector refuses or does not answer is dropped and counted too: spans are
// diagnostics, never worth holding events for.
//
// Lifecycle: construct, start() once, then set_exporter(this) so stages see it;
// set_exporter(nullptr) before destruction (the destructor does: it must outlive every
// stage that may record). The destructor sends what is queued (bounded by `timeout`).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "runtime/base/thread_annotations.h"

namespace weir::trace {

struct Span {
  char trace_id[32]{};
  char span_id[16]{};
  char parent_id[16]{};
  bool has_parent = false;
  const char* name = "";  // "ingress", "flow", "sink" (static text)
  std::string flow;       // attribute weir.flow
  std::string sink;       // attribute weir.sink (sink spans)
  int64_t start_ns = 0;   // unix time, nanoseconds
  int64_t end_ns = 0;
  bool error = false;
};

// Unix time in nanoseconds (span start/end).
int64_t now_ns();
// Takes the ids of a span whose own traceparent is `self` (valid) and whose parent's is
// `parent` (empty or invalid: a root span). False when `self` is not valid.
bool set_ids(Span& s, std::string_view self, std::string_view parent);

class SpanExporter {
 public:
  struct Options {
    std::string endpoint;  // full URL, e.g. http://collector:4318/v1/traces
    std::string service_name = "weir";
    size_t max_queue = 2048;
    size_t batch = 512;
    std::chrono::milliseconds interval{1000};
    std::chrono::milliseconds timeout{5000};
  };
  explicit SpanExporter(Options options);
  ~SpanExporter();
  void start();
  // Any thread; never blocks on the network. Drops (and counts) past max_queue.
  void record(Span span);
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  uint64_t exported() const { return exported_.load(std::memory_order_relaxed); }
  uint64_t failures() const { return failures_.load(std::memory_order_relaxed); }

 private:
  void loop();
  void send(std::vector<Span>& spans, std::chrono::milliseconds timeout);
  std::string encode(const std::vector<Span>& spans) const;

  Options options_;
  Mutex mu_;
  std::condition_variable cv_;
  std::vector<Span> queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> dropped_{0}, exported_{0}, failures_{0};
  std::thread thread_;
};

// The process's exporter, or null when tracing export is off (one relaxed load).
SpanExporter* exporter();
void set_exporter(SpanExporter* e);
// weir_trace_* lines (Prometheus text); zeros when export is off.
void render_metrics(std::string& out);

}  // namespace weir::trace

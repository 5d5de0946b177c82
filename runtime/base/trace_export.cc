#include "runtime/base/trace_export.h"

#include <pthread.h>

#include <curl/curl.h>

#include <nlohmann/json.hpp>

#include "runtime/base/log.h"
#include "runtime/base/trace.h"

namespace weir::trace {
namespace {

std::atomic<SpanExporter*> g_exporter{nullptr};

size_t discard(char*, size_t size, size_t n, void*) { return size * n; }

}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool set_ids(Span& s, std::string_view self, std::string_view parent) {
  if (!valid_traceparent(self)) return false;
  trace_id(self).copy(s.trace_id, 32);
  span_id(self).copy(s.span_id, 16);
  s.has_parent = valid_traceparent(parent) && trace_id(parent) == trace_id(self);
  if (s.has_parent) span_id(parent).copy(s.parent_id, 16);
  return true;
}

SpanExporter* exporter() { return g_exporter.load(std::memory_order_acquire); }
void set_exporter(SpanExporter* e) { g_exporter.store(e, std::memory_order_release); }

void render_metrics(std::string& out) {
  SpanExporter* e = exporter();
  const auto n = [&](uint64_t (SpanExporter::*f)() const) { return std::to_string(e ? (e->*f)() : 0); };
  out +=
      "# HELP weir_trace_spans_exported_total Spans the OTLP collector accepted.\n"
      "# TYPE weir_trace_spans_exported_total counter\n"
      "weir_trace_spans_exported_total " +
      n(&SpanExporter::exported) + "\n";
  out +=
      "# HELP weir_trace_spans_dropped_total Spans dropped: the export queue was full (trace.max_queue), "
      "or the collector refused or did not answer their batch.\n"
      "# TYPE weir_trace_spans_dropped_total counter\n"
      "weir_trace_spans_dropped_total " +
      n(&SpanExporter::dropped) + "\n";
  out +=
      "# HELP weir_trace_export_failures_total OTLP export requests that failed.\n"
      "# TYPE weir_trace_export_failures_total counter\n"
      "weir_trace_export_failures_total " +
      n(&SpanExporter::failures) + "\n";
}

SpanExporter::SpanExporter(Options options) : options_(std::move(options)) { queue_.reserve(options_.max_queue); }

SpanExporter::~SpanExporter() {
  if (exporter() == this) set_exporter(nullptr);
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SpanExporter::start() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  thread_ = std::thread([this] { loop(); });
  pthread_setname_np(thread_.native_handle(), "weir-trace");
}

void SpanExporter::record(Span span) {
  bool wake = false;
  {
    MutexLock lock(mu_);
    if (queue_.size() >= options_.max_queue) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    queue_.push_back(std::move(span));
    wake = queue_.size() == options_.batch;
  }
  if (wake) cv_.notify_one();
}

void SpanExporter::loop() {
  std::vector<Span> batch;
  batch.reserve(options_.max_queue);
  for (;;) {
    bool last = false;
    {
      UniqueLock lock(mu_);
      lock.wait_for(cv_, options_.interval,
                    [&]() REQUIRES(mu_) { return stopping_ || queue_.size() >= options_.batch; });
      last = stopping_;
      batch.swap(queue_);  // queue_ gets the (empty) vector whose capacity the last send left
    }
    // A full queue is sent in batches of `batch` spans; at stop only one, with a short
    // timeout, so a dead collector delays shutdown by at most 2 s.
    for (size_t from = 0; from < batch.size(); from += options_.batch) {
      if (last && from > 0) {
        dropped_.fetch_add(batch.size() - from, std::memory_order_relaxed);
        break;
      }
      std::vector<Span> part(std::make_move_iterator(batch.begin() + static_cast<ptrdiff_t>(from)),
                             std::make_move_iterator(batch.begin() + static_cast<ptrdiff_t>(std::min(
                                                                         batch.size(), from + options_.batch))));
      send(part, last ? std::min(options_.timeout, std::chrono::milliseconds(2000)) : options_.timeout);
    }
    batch.clear();
    if (last) return;
  }
}

std::string SpanExporter::encode(const std::vector<Span>& spans) const {
  using nlohmann::json;
  json list = json::array();
  for (const Span& s : spans) {
    json attrs = json::array({{{"key", "weir.flow"}, {"value", {{"stringValue", s.flow}}}}});
    if (!s.sink.empty()) attrs.push_back({{"key", "weir.sink"}, {"value", {{"stringValue", s.sink}}}});
    // OTLP/JSON: ids are hex strings, times decimal strings; kind 2 server (ingress),
    // 3 client (sink), 1 internal; status code 1 ok, 2 error.
    std::string_view name = s.name;
    json span = {{"traceId", std::string(s.trace_id, 32)},
                 {"spanId", std::string(s.span_id, 16)},
                 {"name", name},
                 {"kind", name == "ingress" ? 2
                          : name == "sink"  ? 3
                                            : 1},
                 {"startTimeUnixNano", std::to_string(s.start_ns)},
                 {"endTimeUnixNano", std::to_string(s.end_ns)},
                 {"attributes", std::move(attrs)},
                 {"status", {{"code", s.error ? 2 : 1}}}};
    if (s.has_parent) span["parentSpanId"] = std::string(s.parent_id, 16);
    list.push_back(std::move(span));
  }
  json doc = {
      {"resourceSpans",
       json::array({{{"resource",
                      {{"attributes", json::array({{{"key", "service.name"},
                                                    {"value", {{"stringValue", options_.service_name}}}}})}}},
                     {"scopeSpans", json::array({{{"scope", {{"name", "weir"}}}, {"spans", std::move(list)}}})}}})}};
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

void SpanExporter::send(std::vector<Span>& spans, std::chrono::milliseconds timeout) {
  if (spans.empty()) return;
  const std::string body = encode(spans);
  CURL* e = curl_easy_init();
  if (e == nullptr) {
    failures_.fetch_add(1, std::memory_order_relaxed);
    dropped_.fetch_add(spans.size(), std::memory_order_relaxed);
    return;
  }
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  curl_easy_setopt(e, CURLOPT_URL, options_.endpoint.c_str());
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &discard);
  curl_easy_setopt(e, CURLOPT_USERAGENT, "weir");
  const CURLcode rc = curl_easy_perform(e);
  long status = 0;
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(e);
  if (rc == CURLE_OK && status >= 200 && status <= 299) {
    exported_.fetch_add(spans.size(), std::memory_order_relaxed);
    return;
  }
  // The endpoint is not logged: it may carry credentials.
  const uint64_t failed = failures_.fetch_add(1, std::memory_order_relaxed);
  dropped_.fetch_add(spans.size(), std::memory_order_relaxed);
  if (failed % 100 == 0) {  // the first failure, then every 100th: a dead collector must not flood the log
    log::warn("trace export failed; its spans are dropped",
              {{"error", rc == CURLE_OK ? "HTTP " + std::to_string(status) : std::string(curl_easy_strerror(rc))},
               {"spans", std::to_string(spans.size())}});
  }
}

}  // namespace weir::trace

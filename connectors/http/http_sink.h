// HttpSink: the `to: {x: {http: ...}}` sink. Sends each delivery as one HTTP request over
// a pool of keep-alive connections: weir's own HTTP/1.1 client (http1_connection.h) for a
// plain http:// URL to a numeric address, libcurl multi for every other (ADR 0270; see
// client()). Everything below holds for both.
//
// Threads: `deliver()` and `stop()` may be called from any thread but the loop's
// (`deliver()` also from the loop's own thread). The requests of every HttpSink that
// delivers from one thread run on one HTTP client loop: a curl multi handle driven by an
// Asio io_context (curl_multi_socket_action; ADR 0160, 0260). A sink whose deliveries come
// from an IoLoop's thread — the runtime's sink loop, `weir-sinks`, where the sink stages
// read their messages — runs on that loop: requests are sent, answers read and `done`
// called on that thread, so the stage's ack leaves with the loop's next write and no other
// thread is woken. Deliveries from any other thread (a stage on cnats' delivery pool, a
// test) run on the process's own loop, a thread named "weir-http", started by the first
// such delivery and ended with the last of its sinks' stop() (ADR 0161). libcurl (and
// curl_global_init, which initialises OpenSSL) is loaded at the first delivery of any
// sink: an idle sink costs no thread and no TLS initialisation. `done` runs on the loop's
// thread, so it must be cheap and must not block (runtime/ports/sink.h).
//
// Pool: each sink hands at most `max_connections` requests to curl at once; deliveries
// beyond that wait in the sink's own FIFO, so the per-request timeout counts only time on
// the wire, never time queued (curl's TIMEOUT_MS would count its internal queue too), and a
// slow sink's queue never holds up another sink. curl's connection cache and per-host limit
// are the sum of the running sinks' pools, so each sink keeps its connections alive between
// requests. Easy handles and header lists are reused.
//
// Rate: with `rate:` (spec.rate_per_s) a delivery goes from the FIFO to the pool only with
// a token of the sink's TokenBucket (runtime/base/token_bucket.h; burst: 100 ms of the rate,
// at least 2); the rest wait in the FIFO and the loop's timer takes them when the next
// token is due. Waiting is not a failure (no retry, no dead letter) and never blocks
// deliver(); the stage's window (max_in_flight) bounds how many wait here, the rest wait in
// JetStream. Per sink and per process: N instances deliver up to N × rate (ADR 0296).
//
// Results: 2xx → ok; 5xx, 408, 429, timeouts and transport errors → retry (with
// `Retry-After` when given, read by runtime/base/retry_after.h); any other status → dead,
// reason "HTTP <code> ...". Reasons name the URL without userinfo or query and never
// contain header values.
//
// stop(): this sink's deliveries not yet sent finish at once as retry ("sink stopping");
// its requests on the wire get `stop_grace` to finish normally, then are abandoned as retry
// (the receiver may have seen them: the re-send carries the same Idempotency-Key). Other
// sinks' requests are not touched. stop() returns when the loop has let go of the sink.
// Deliveries after stop() (or before start()) finish at once as retry. `done` runs exactly
// once per deliver(). `done` must not call stop() (it runs on the thread stop() waits for).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "flows/flow.h"
#include "runtime/ports/sink.h"

namespace weir::connectors {

struct HttpSinkOptions {
  // How long stop() lets requests already on the wire finish. The runtime's sink stage
  // has already waited its drain timeout before it calls stop(), so this is short.
  std::chrono::milliseconds stop_grace{1000};
};

class HttpSink : public weir::Sink {
 public:
  HttpSink(flows::HttpSinkSpec spec, std::string flow, std::string sink_name, HttpSinkOptions options = {});
  ~HttpSink() override;  // stops if still running
  HttpSink(const HttpSink&) = delete;
  HttpSink& operator=(const HttpSink&) = delete;

  // Checks the spec (URL scheme http/https, method, header names and values,
  // max_connections >= 1, timeout > 0). The shared loop is joined at the first deliver().
  Status start() override;
  void stop() override;
  int max_in_flight() const override;
  int max_retries() const override;
  flows::RetrySpec retry_policy() const override;
  const flows::EventExpression* order_by() const override;
  int64_t queued() const override;
  void deliver(Delivery delivery, std::function<void(DeliveryResult)> done) override;
  // The HTTP client start() chose (ADR 0270): "weir" (its own HTTP/1.1 client: a plain
  // http:// URL to a numeric address, no userinfo, no proxy variable set, the environment
  // variable WEIR_HTTP_SINK_CLIENT not "curl") or "curl"; "" before start().
  const char* client() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::unique_ptr<weir::Sink> make_http_sink(const flows::HttpSinkSpec& spec, std::string flow, std::string sink_name);

}  // namespace weir::connectors

// weir-sink: a counting HTTP sink for the benchmarks and the integration tests.
//
// Every request to a non-reserved path is an event delivery: it is answered with the current
// status (204 by default), counted per path, and its JSON body's top-level `id` and `t` (µs
// since the epoch, stamped by weir-loadgen) feed duplicate detection and the end-to-end
// latency histogram. Test features (fail the first N deliveries, a fixed status, Retry-After,
// a delay, random failures, connections reset mid-answer) are set by flags and changed at run
// time through POST /control. Reserved paths: GET /stats, POST /reset, POST /control,
// GET /requests?limit=N, GET /ids, GET /timeline (see bench/README.md for the exact answers).
//
// Threading: one io_context; by default one thread runs it (--threads N runs it on N threads).
// Each connection is one coroutine, so its socket is only touched by that coroutine; the
// shared counters live in SinkState behind one mutex (uncontended with one thread). Delays
// use timers, never block the loop.
//
// stdout carries exactly one line, {"listen":"HOST:PORT"}, once the socket listens; errors go
// to stderr. Exit 0 on SIGTERM/SIGINT, 2 on a usage error, 1 when it cannot listen.

#include <utility>  // before Asio (Boost 1.74 with -std=c++20)

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bench/tools/event_scan.h"
#include "bench/tools/histogram.h"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using json = nlohmann::json;

namespace weir::bench {
namespace {

constexpr uint64_t kMaxBody = 64ull << 20;
constexpr size_t kMaxTimelineSeconds = 24 * 3600;
constexpr int64_t kClockSkewUs = 1000000;
constexpr int64_t kMaxE2eUs = 3600ll * 1000000;

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double us_to_ms(uint64_t us) { return static_cast<double>(us) / 1000.0; }

// The exact parse behind EventScanner's kFallback (escaped ids, deep nesting): a SAX pass
// that picks the top-level `id` and `t` the same way, without building a DOM.
class EventFields : public json::json_sax_t {
 public:
  std::optional<std::string> id;
  std::optional<int64_t> t;

  bool null() override { return scalar(); }
  bool boolean(bool) override { return scalar(); }
  bool number_integer(number_integer_t v) override {
    if (at(Key::kId)) id = std::to_string(v);
    if (at(Key::kT)) t = v;
    return scalar();
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (at(Key::kId)) id = std::to_string(v);
    if (at(Key::kT)) t = static_cast<int64_t>(v);
    return scalar();
  }
  bool number_float(number_float_t v, const string_t& text) override {
    if (at(Key::kId)) id = text;
    if (at(Key::kT) && v > -9.2e18 && v < 9.2e18) t = static_cast<int64_t>(v);
    return scalar();
  }
  bool string(string_t& v) override {
    if (at(Key::kId)) id = std::move(v);
    return scalar();
  }
  bool binary(binary_t&) override { return scalar(); }
  bool start_object(std::size_t) override { return open(); }
  bool start_array(std::size_t) override { return open(); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    if (depth_ == 1) key_ = k == "id" ? Key::kId : k == "t" ? Key::kT : Key::kOther;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  enum class Key { kOther, kId, kT };  // the current top-level key
  bool at(Key k) const { return depth_ == 1 && key_ == k; }
  bool scalar() {
    if (depth_ == 1) key_ = Key::kOther;
    return true;
  }
  bool open() {
    ++depth_;
    return true;
  }
  bool close() {
    if (--depth_ == 1) key_ = Key::kOther;
    return true;
  }
  int depth_ = 0;
  Key key_ = Key::kOther;
};

struct Mode {
  int status = 204;
  uint64_t fail_first = 0;  // deliveries still to fail
  int fail_status = 503;
  int delay_ms = 0;
  int retry_after = -1;  // seconds; < 0: no header
  // Fault modes for the fault-matrix tests: each delivery (after fail_first) fails with
  // fail_status with probability fail_percent/100, or has its connection reset half-way
  // through the answer (status line sent, then RST) with probability reset_percent/100.
  // Neither counts as delivered: the sender saw no 2xx.
  int fail_percent = 0;
  int reset_percent = 0;
  // > 0: fail_percent refuses one event (its body's `id`) at most this many times; after
  // that its deliveries are accepted. A receiver that fails at random but not forever, so
  // a test's wait for everything has a bound (tests/integration/sink_failures_test.cc).
  int fail_at_most = 0;
  // Deliveries whose `t` is earlier than this (µs since the epoch) were sent during the
  // load's warm-up: delivered and counted as any other, in the timeline, but not in the
  // run's latency percentiles (`e2e_ms`), as the load generator leaves them out of its own.
  // 0: every delivery counts.
  int64_t e2e_from_us = 0;

  json to_json() const {
    return {{"status", status},
            {"fail_first", fail_first},
            {"fail_status", fail_status},
            {"delay_ms", delay_ms},
            {"retry_after", retry_after},
            {"fail_percent", fail_percent},
            {"fail_at_most", fail_at_most},
            {"reset_percent", reset_percent},
            {"e2e_from_us", e2e_from_us}};
  }
};

using Request = http::request<http::string_body>;

std::string_view sv(beast::string_view s) { return {s.data(), s.size()}; }
std::string_view path_of(const Request& req) {
  std::string_view target = sv(req.target());
  return target.substr(0, target.find('?'));
}

struct Answer {
  int status = 204;
  int delay_ms = 0;
  int retry_after = -1;
  bool reset = false;  // send part of the status line, then reset the connection
};

// Histograms are allocated on first use, so idle seconds cost a few bytes.
struct TimelineBucket {
  uint64_t count = 0;
  std::unique_ptr<BasicLogLinearHistogram<uint32_t>> e2e;
};

// All counters of one sink. Thread-safe: every public call takes the mutex.
class SinkState {
 public:
  // `reserve` pre-sizes the id set: growing a set of millions of ids rehashes it in one go,
  // a pause that would show up as latency in the measurement itself.
  SinkState(Mode mode, size_t record_limit, size_t reserve) : mode_(mode), record_limit_(record_limit) {
    ids_.reserve(reserve);
    id_order_.reserve(reserve);
  }

  // Takes the request by value: it is kept as is for GET /requests (no copies on the hot path).
  Answer deliver(Request req, int64_t arrival_us) {
    // Parse outside the lock: it is the expensive part and touches no shared state.
    EventIdT fields;
    bool parsed = false;
    switch (EventScanner::scan(req.body(), &fields)) {
      case ScanResult::kOk: parsed = true; break;
      case ScanResult::kInvalid: break;
      case ScanResult::kFallback: {
        EventFields exact;
        parsed = json::sax_parse(req.body(), &exact, json::input_format_t::json, /*strict=*/true);
        fields = EventIdT{std::move(exact.id), exact.t};
        break;
      }
    }
    const std::string_view path = path_of(req);
    auto key_it = req.find("Idempotency-Key");
    const bool has_key = key_it != req.end();
    const std::string_view key = has_key ? sv(key_it->value()) : std::string_view{};
    std::lock_guard lock(mu_);
    Answer a{mode_.status, mode_.delay_ms, mode_.retry_after};
    if (mode_.fail_first > 0) {
      --mode_.fail_first;
      a.status = mode_.fail_status;
    } else if (mode_.reset_percent > 0 && percent_(rng_) < mode_.reset_percent) {
      a.reset = true;
      ++resets_;
    } else if (mode_.fail_percent > 0 && percent_(rng_) < mode_.fail_percent && may_refuse(parsed, fields.id)) {
      a.status = mode_.fail_status;
      ++random_failures_;
    }
    const bool accepted = !a.reset && a.status >= 200 && a.status < 300;
    if (!accepted) {
      ++rejected_;
      bump(rejected_by_path_, path);
    } else {
      ++received_;
      bump(by_path_, path);
      if (first_us_ == 0) first_us_ = arrival_us;
      last_us_ = std::max(last_us_, arrival_us);
      if (!parsed) ++unparsed_;
      bool first_arrival = true;
      if (parsed && fields.id) {
        uint64_t key_hash = std::hash<std::string_view>{}(key) ^ (has_key ? 1 : 0);
        auto [it, inserted] = ids_.try_emplace(*fields.id, key_hash);
        if (!inserted) {
          first_arrival = false;
          ++duplicates_;
          if (it->second == key_hash) ++resends_same_key_;
          else ++resends_other_key_;
        } else {
          id_order_.push_back(&it->first);
        }
      }
      // Latency counts the first arrival of each id only: a re-send says nothing new about
      // how fast the pipeline delivers, and would skew the tail towards retry timers.
      // With --threads > 1 arrivals may be stamped slightly out of order: clamp at 0.
      size_t sec = static_cast<size_t>(std::max<int64_t>(0, arrival_us - first_us_) / 1000000);
      TimelineBucket* bucket = nullptr;
      if (sec < kMaxTimelineSeconds) {
        if (timeline_.size() <= sec) timeline_.resize(sec + 1);
        bucket = &timeline_[sec];
        ++bucket->count;
      }
      if (parsed && fields.t && first_arrival) {
        int64_t e2e = arrival_us - *fields.t;
        // A `t` from another clock or a hand-written test body must not wreck the
        // percentiles: outside [-1 s, 1 h] it is counted, not recorded.
        if (e2e < -kClockSkewUs || e2e > kMaxE2eUs) {
          ++t_out_of_range_;
          bucket = nullptr;
        } else if (*fields.t < mode_.e2e_from_us) {
          ++e2e_warmup_;
        } else {
          e2e_.record(e2e);
        }
        if (bucket) {
          if (!bucket->e2e) bucket->e2e = std::make_unique<BasicLogLinearHistogram<uint32_t>>();
          bucket->e2e->record(e2e);
        }
      }
    }
    if (record_limit_ > 0) {
      recorded_.push_back(Recorded{std::move(req), a.status, arrival_us});
      if (recorded_.size() > record_limit_) recorded_.pop_front();
    }
    return a;
  }

  json stats() const {
    std::lock_guard lock(mu_);
    json by_path = json::object();
    for (const auto& [p, n] : by_path_) by_path[p] = n;
    json rejected_by_path = json::object();
    for (const auto& [p, n] : rejected_by_path_) rejected_by_path[p] = n;
    return {
        {"received", received_},
        {"rejected", rejected_},
        {"unique", ids_.size()},
        {"duplicates", duplicates_},
        {"unparsed", unparsed_},
        {"t_out_of_range", t_out_of_range_},
        {"resends_with_same_key", resends_same_key_},
        {"resends_with_other_key", resends_other_key_},
        {"random_failures", random_failures_},
        {"resets", resets_},
        {"by_path", by_path},
        {"rejected_by_path", rejected_by_path},
        {"e2e_ms",
         {{"count", e2e_.count()},
          {"p50", us_to_ms(e2e_.quantile(0.50))},
          {"p90", us_to_ms(e2e_.quantile(0.90))},
          {"p99", us_to_ms(e2e_.quantile(0.99))},
          {"p999", us_to_ms(e2e_.quantile(0.999))},
          {"max", us_to_ms(e2e_.max())},
          {"mean", e2e_.mean() / 1000.0},
          {"warmup", e2e_warmup_}}},
        {"first_us", first_us_},
        {"last_us", last_us_},
        {"mode", mode_.to_json()},
    };
  }

  void reset() {
    std::lock_guard lock(mu_);
    received_ = rejected_ = duplicates_ = unparsed_ = t_out_of_range_ = 0;
    resends_same_key_ = resends_other_key_ = random_failures_ = resets_ = e2e_warmup_ = 0;
    by_path_.clear();
    rejected_by_path_.clear();
    ids_.clear();
    id_order_.clear();
    refusals_.clear();
    e2e_.reset();
    timeline_.clear();
    recorded_.clear();
    first_us_ = last_us_ = 0;
  }

  // Applies any subset of {status, fail_first, fail_status, delay_ms, retry_after}; all or
  // nothing. Returns the error text, empty on success.
  std::string control(const json& j, json* mode_out) {
    if (!j.is_object()) return "body must be a JSON object";
    Mode m;
    {
      std::lock_guard lock(mu_);
      m = mode_;
    }
    for (const auto& [k, v] : j.items()) {
      if (!v.is_number_integer()) return "field '" + k + "' must be an integer";
      int64_t n = v.get<int64_t>();
      if (k == "status" || k == "fail_status") {
        if (n < 200 || n > 599) return "field '" + k + "' must be an HTTP status 200..599";
        (k == "status" ? m.status : m.fail_status) = static_cast<int>(n);
      } else if (k == "fail_first") {
        if (n < 0) return "field 'fail_first' must be >= 0";
        m.fail_first = static_cast<uint64_t>(n);
      } else if (k == "delay_ms") {
        if (n < 0 || n > 600000) return "field 'delay_ms' must be 0..600000";
        m.delay_ms = static_cast<int>(n);
      } else if (k == "fail_at_most") {
        if (n < 0 || n > 1000000) return "field 'fail_at_most' must be 0..1000000";
        m.fail_at_most = static_cast<int>(n);
      } else if (k == "fail_percent" || k == "reset_percent") {
        if (n < 0 || n > 100) return "field '" + k + "' must be 0..100";
        (k == "fail_percent" ? m.fail_percent : m.reset_percent) = static_cast<int>(n);
      } else if (k == "e2e_from_us") {
        if (n < 0) return "field 'e2e_from_us' must be >= 0";
        m.e2e_from_us = n;
      } else if (k == "retry_after") {
        if (n > 86400) return "field 'retry_after' must be <= 86400 (negative: no header)";
        m.retry_after = static_cast<int>(n < 0 ? -1 : n);
      } else {
        return "unknown field '" + k +
               "' (known: status, fail_first, fail_status, delay_ms, retry_after, fail_percent, "
               "fail_at_most, reset_percent, e2e_from_us)";
      }
    }
    std::lock_guard lock(mu_);
    mode_ = m;
    *mode_out = mode_.to_json();
    return {};
  }

  json requests(size_t limit) const {
    std::lock_guard lock(mu_);
    json out = json::array();
    size_t n = std::min(limit, recorded_.size());
    for (size_t i = recorded_.size() - n; i < recorded_.size(); ++i) {
      const Recorded& r = recorded_[i];
      json headers = json::object();
      for (const auto& f : r.req) {
        std::string name(f.name_string());
        std::string value(f.value());
        auto it = headers.find(name);
        if (it == headers.end()) headers[name] = value;
        else *it = it->get<std::string>() + ", " + value;
      }
      // Bodies are returned as text; bytes that are not UTF-8 are replaced when the answer
      // is serialized rather than failing it.
      out.push_back({{"method", std::string(r.req.method_string())},
                     {"path", std::string(path_of(r.req))},
                     {"target", std::string(r.req.target())},
                     {"status", r.status},
                     {"arrival_us", r.arrival_us},
                     {"headers", headers},
                     {"body", r.req.body()}});
    }
    return out;
  }

  json ids() const {
    std::lock_guard lock(mu_);
    json out = json::array();
    for (const std::string* id : id_order_) out.push_back(*id);
    return out;
  }

  json timeline() const {
    std::lock_guard lock(mu_);
    json out = json::array();
    for (size_t s = 0; s < timeline_.size(); ++s) {
      const auto& b = timeline_[s];
      out.push_back({{"sec", s},
                     {"count", b.count},
                     {"p50_ms", b.e2e ? us_to_ms(b.e2e->quantile(0.50)) : 0.0},
                     {"p99_ms", b.e2e ? us_to_ms(b.e2e->quantile(0.99)) : 0.0}});
    }
    return out;
  }

 private:
  using Counts = std::map<std::string, uint64_t, std::less<>>;
  static void bump(Counts& counts, std::string_view key) {
    auto it = counts.find(key);
    if (it == counts.end()) it = counts.emplace(std::string(key), 0).first;
    ++it->second;
  }

  // Under fail_at_most: whether this delivery may still be refused (and counts it when so).
  // A body without an id is not limited. Called under mu_.
  bool may_refuse(bool parsed, const std::optional<std::string>& id) {
    if (mode_.fail_at_most <= 0 || !parsed || !id) return true;
    int& n = refusals_[*id];
    if (n >= mode_.fail_at_most) return false;
    ++n;
    return true;
  }

  struct Recorded {
    Request req;
    int status;
    int64_t arrival_us;
  };

  mutable std::mutex mu_;
  Mode mode_;
  size_t record_limit_;
  uint64_t received_ = 0, rejected_ = 0, duplicates_ = 0, unparsed_ = 0, t_out_of_range_ = 0;
  uint64_t resends_same_key_ = 0, resends_other_key_ = 0, random_failures_ = 0, resets_ = 0;
  uint64_t e2e_warmup_ = 0;                   // first arrivals left out of e2e_ (Mode::e2e_from_us)
  std::mt19937 rng_{std::random_device{}()};  // fail_percent / reset_percent draws
  std::uniform_int_distribution<int> percent_{0, 99};
  Counts by_path_, rejected_by_path_;
  // id -> hash of the Idempotency-Key it first came with. Node-based, so the pointers in
  // id_order_ stay valid until reset().
  std::unordered_map<std::string, uint64_t> ids_;
  std::vector<const std::string*> id_order_;
  std::unordered_map<std::string, int> refusals_;  // id -> random refusals (Mode::fail_at_most)
  LogLinearHistogram e2e_;
  std::deque<TimelineBucket> timeline_;
  std::deque<Recorded> recorded_;
  int64_t first_us_ = 0, last_us_ = 0;
};

using Response = http::response<http::string_body>;

Response json_response(const Request& req, http::status status, const json& body) {
  Response res{status, req.version()};
  res.set(http::field::content_type, "application/json");
  // Replace invalid UTF-8 (recorded bodies may hold anything) instead of throwing.
  res.body() = body.dump(-1, ' ', false, json::error_handler_t::replace);
  res.body() += '\n';
  res.keep_alive(req.keep_alive());
  res.prepare_payload();
  return res;
}

Response error_response(const Request& req, http::status status, std::string_view message) {
  return json_response(req, status, json{{"error", message}});
}

std::optional<size_t> query_param_size(std::string_view target, std::string_view name) {
  size_t q = target.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    size_t amp = rest.find('&');
    std::string_view kv = rest.substr(0, amp);
    size_t eq = kv.find('=');
    if (kv.substr(0, eq) == name && eq != std::string_view::npos) {
      std::string_view v = kv.substr(eq + 1);
      size_t n = 0;
      if (v.empty()) return std::nullopt;
      for (char c : v) {
        if (c < '0' || c > '9') return std::nullopt;
        n = n * 10 + static_cast<size_t>(c - '0');
        if (n > (size_t{1} << 40)) break;
      }
      return n;
    }
    if (amp == std::string_view::npos) break;
    rest = rest.substr(amp + 1);
  }
  return std::nullopt;
}

// Answers a reserved path, or returns nullopt when the request is a delivery.
std::optional<Response> control_response(const Request& req, std::string_view path, SinkState& state) {
  const auto method = req.method();
  auto only = [&](http::verb v) -> std::optional<Response> {
    if (method == v) return std::nullopt;
    Response r = error_response(req, http::status::method_not_allowed, "method not allowed");
    r.set(http::field::allow, http::to_string(v));
    return r;
  };
  if (path == "/stats") {
    if (auto r = only(http::verb::get)) return r;
    return json_response(req, http::status::ok, state.stats());
  }
  if (path == "/reset") {
    if (auto r = only(http::verb::post)) return r;
    state.reset();
    return json_response(req, http::status::ok, json{{"reset", true}});
  }
  if (path == "/control") {
    if (auto r = only(http::verb::post)) return r;
    json body = json::parse(req.body(), nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded()) return error_response(req, http::status::bad_request, "body is not valid JSON");
    json mode;
    std::string err = state.control(body, &mode);
    if (!err.empty()) return error_response(req, http::status::bad_request, err);
    return json_response(req, http::status::ok, mode);
  }
  if (path == "/requests") {
    if (auto r = only(http::verb::get)) return r;
    auto limit = query_param_size(sv(req.target()), "limit");
    return json_response(req, http::status::ok, state.requests(limit.value_or(SIZE_MAX)));
  }
  if (path == "/ids") {
    if (auto r = only(http::verb::get)) return r;
    return json_response(req, http::status::ok, state.ids());
  }
  if (path == "/timeline") {
    if (auto r = only(http::verb::get)) return r;
    return json_response(req, http::status::ok, state.timeline());
  }
  return std::nullopt;
}

// The answer to a delivery, formatted by hand: it is always a status line and at most three
// short headers, and Beast's serializer cost more CPU than the rest of the answer path. A
// 204 carries no Content-Length (RFC 9110 §8.6).
void answer_text(const Answer& a, unsigned version, bool keep_alive, std::string* out) {
  out->assign(version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ");
  out->append(std::to_string(a.status)).push_back(' ');
  beast::string_view reason = http::obsolete_reason(static_cast<http::status>(a.status));
  out->append(reason.data(), reason.size()).append("\r\n");
  if (a.status != 204) out->append("Content-Length: 0\r\n");
  if ((a.status < 200 || a.status >= 300) && a.retry_after >= 0)
    out->append("Retry-After: ").append(std::to_string(a.retry_after)).append("\r\n");
  if (version == 10 && keep_alive) out->append("Connection: keep-alive\r\n");
  if (version != 10 && !keep_alive) out->append("Connection: close\r\n");
  out->append("\r\n");
}

asio::awaitable<void> session(tcp::socket socket, SinkState& state) {
  beast::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  // A plain socket, not beast::tcp_stream: the sink sets no timeouts, and the stream's
  // timer bookkeeping showed up in profiles.
  tcp::socket& stream = socket;
  beast::flat_buffer buffer;
  std::string answer;
  auto token = asio::redirect_error(asio::use_awaitable, ec);
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(kMaxBody);
    co_await http::async_read_header(stream, buffer, parser, token);
    if (!ec && !parser.is_done()) {
      // curl sends `Expect: 100-continue` with bodies over 1 KiB and waits up to a second
      // for this interim answer before sending the body anyway.
      auto expect = parser.get().find(http::field::expect);
      if (expect != parser.get().end() && beast::iequals(expect->value(), "100-continue")) {
        http::response<http::empty_body> cont{http::status::continue_, 11};
        co_await http::async_write(stream, cont, token);
      }
      if (!ec) co_await http::async_read(stream, buffer, parser, token);
    }
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
        ec == asio::error::operation_aborted)
      break;
    if (ec) {
      // Malformed request: answer once, then close (the stream position is unknown).
      Response res{ec == http::error::body_limit ? http::status::payload_too_large : http::status::bad_request, 11};
      res.set(http::field::content_type, "application/json");
      res.body() = json{{"error", ec.message()}}.dump() + "\n";
      res.keep_alive(false);
      res.prepare_payload();
      co_await http::async_write(stream, res, token);
      break;
    }
    const int64_t arrival = now_us();
    Request req = parser.release();
    if (std::optional<Response> control = control_response(req, path_of(req), state)) {
      co_await http::async_write(stream, *control, token);
      if (ec || !control->keep_alive()) break;
      continue;
    }
    const unsigned version = req.version();
    const bool keep_alive = req.keep_alive();
    Answer a = state.deliver(std::move(req), arrival);
    if (a.delay_ms > 0) {
      asio::steady_timer timer(stream.get_executor(), std::chrono::milliseconds(a.delay_ms));
      co_await timer.async_wait(token);
    }
    if (a.reset) {
      // Half an answer, then RST (linger 0): the sender sees the connection reset while
      // reading the response.
      static constexpr std::string_view kHalf = "HTTP/1.1 200 OK\r\nContent-Le";
      co_await asio::async_write(stream, asio::buffer(kHalf.data(), kHalf.size()), token);
      stream.set_option(asio::socket_base::linger(true, 0), ec);
      stream.close(ec);
      co_return;
    }
    answer_text(a, version, keep_alive, &answer);
    co_await asio::async_write(stream, asio::buffer(answer), token);
    if (ec || !keep_alive) break;
  }
  stream.shutdown(tcp::socket::shutdown_send, ec);
}

asio::awaitable<void> accept_loop(tcp::acceptor& acceptor, SinkState& state) {
  for (;;) {
    beast::error_code ec;
    tcp::socket socket = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted) co_return;
    if (ec) {
      // Out of file descriptors and the like: report, back off a little, keep serving.
      std::cerr << "weir-sink: accept: " << ec.message() << "\n";
      asio::steady_timer t(acceptor.get_executor(), std::chrono::milliseconds(50));
      co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    asio::co_spawn(acceptor.get_executor(), session(std::move(socket), state), asio::detached);
  }
}

bool split_host_port(const std::string& listen, std::string* host, uint16_t* port) {
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  *host = listen.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  std::string p = listen.substr(colon + 1);
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) return false;
  unsigned long v = std::stoul(p);
  if (v > 65535) return false;
  *port = static_cast<uint16_t>(v);
  return true;
}

// Many connections need many descriptors; the soft limit is often 1024.
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int run(int argc, char** argv) {
  CLI::App app{"weir-sink: counting HTTP sink for weir benchmarks and tests"};
  std::string listen = "127.0.0.1:0";
  Mode mode;
  int threads = 1;
  size_t record = 1000;
  size_t reserve = 0;
  app.add_option("--listen", listen, "HOST:PORT to listen on (port 0 picks a free one)");
  app.add_option("--status", mode.status, "status of normal answers")->check(CLI::Range(200, 599));
  app.add_option("--fail-first", mode.fail_first, "answer --fail-status to the first N deliveries");
  app.add_option("--fail-status", mode.fail_status, "status for --fail-first answers")->check(CLI::Range(200, 599));
  app.add_option("--retry-after", mode.retry_after, "add Retry-After: SECONDS to non-2xx answers")
      ->check(CLI::Range(0, 86400));
  app.add_option("--delay-ms", mode.delay_ms, "delay every delivery answer by N ms")->check(CLI::Range(0, 600000));
  app.add_option("--fail-percent", mode.fail_percent, "answer --fail-status to N% of deliveries, at random")
      ->check(CLI::Range(0, 100));
  app.add_option("--fail-at-most", mode.fail_at_most,
                 "with --fail-percent: refuse one event (body id) at most N times, then accept it (0: no bound)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--reset-percent", mode.reset_percent,
                 "reset the connection half-way through the answer for N% of deliveries, at random")
      ->check(CLI::Range(0, 100));
  app.add_option("--record", record, "keep the last N deliveries for GET /requests (0: none)");
  app.add_option("--threads", threads, "io threads")->check(CLI::Range(1, 64));
  app.add_option("--reserve", reserve, "pre-size the id set for N events (benchmarks)")
      ->check(CLI::Range(size_t{0}, size_t{1} << 30));
  raise_fd_limit();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  std::string host;
  uint16_t port = 0;
  if (!split_host_port(listen, &host, &port)) {
    std::cerr << "weir-sink: --listen wants HOST:PORT, got '" << listen << "'\n";
    return 2;
  }
  beast::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (ec) {
    std::cerr << "weir-sink: --listen: '" << host << "' is not an IP address\n";
    return 2;
  }

  asio::io_context ioc(threads);
  tcp::acceptor acceptor(ioc);
  tcp::endpoint endpoint(address, port);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    std::cerr << "weir-sink: cannot listen on " << listen << ": " << ec.message() << "\n";
    return 1;
  }
  tcp::endpoint bound = acceptor.local_endpoint();
  std::string bound_host = bound.address().to_string();
  if (bound.address().is_v6()) bound_host = "[" + bound_host + "]";
  std::cout << json{{"listen", bound_host + ":" + std::to_string(bound.port())}}.dump() << std::endl;

  SinkState state(mode, record, reserve);
  asio::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&](const beast::error_code&, int) { ioc.stop(); });
  asio::co_spawn(ioc, accept_loop(acceptor, state), asio::detached);

  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back([&] { ioc.run(); });
  ioc.run();
  for (auto& t : pool) t.join();
  return 0;
}

}  // namespace
}  // namespace weir::bench

int main(int argc, char** argv) {
  try {
    return weir::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "weir-sink: " << e.what() << "\n";
    return 1;
  }
}

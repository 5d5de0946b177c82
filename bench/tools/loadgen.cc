// weir-loadgen: HTTP load generator posting order events to weir (or straight to weir-sink).
//
// Each event is a ~300-byte JSON order with a unique `id` (<run-id>-<n>) and `t`, the send time
// in µs since the epoch, which weir-sink turns into end-to-end latency. Two modes:
//   closed loop (default): --concurrency keep-alive connections, each posting back to back;
//   open loop (--rate R):  events are scheduled at R/s; an event waits for a free connection
//                          (opening more up to --concurrency) and its latency and `t` count
//                          from the *intended* send time, so a stalled server cannot hide its
//                          stall by slowing the generator down (coordinated omission).
// Requests sent during --warmup are not counted in the result (their acked ids still go to
// --acked-ids, so lost = acked - delivered stays exact). A run ends by itself after
// --duration and/or --max-requests; requests in flight then finish (bounded by --timeout).
//
// Output: one JSON object on stdout; progress on stderr once a second. Exit 0 after a run
// (whatever the server answered), 2 on a usage error, 1 when the run could not start.
//
// Threading: one thread runs one io_context; every connection is a coroutine on it, so the
// shared counters need no locks.

#include <utility>  // before Asio (Boost 1.74 with -std=c++20)

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "bench/tools/histogram.h"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace weir::bench {
namespace {

int64_t system_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t us_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::microseconds>(b - a).count();
}

// "10s", "250ms", "2m", "1h", "1.5s"; a bare number is seconds. nullopt when malformed.
std::optional<double> parse_seconds(const std::string& text) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    return std::nullopt;
  }
  std::string unit = text.substr(pos);
  double scale = 0;
  if (unit.empty() || unit == "s") scale = 1;
  else if (unit == "ms") scale = 1e-3;
  else if (unit == "us") scale = 1e-6;
  else if (unit == "m") scale = 60;
  else if (unit == "h") scale = 3600;
  else return std::nullopt;
  if (!(v >= 0) || std::isinf(v)) return std::nullopt;
  return v * scale;
}

struct Url {
  std::string host;
  std::string port;
  std::string target;
};

std::optional<Url> parse_url(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0) return std::nullopt;
  std::string rest = url.substr(kScheme.size());
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  Url u;
  u.target = slash == std::string::npos ? "/" : rest.substr(slash);
  size_t colon = authority.rfind(':');
  if (!authority.empty() && authority.front() == '[') {  // [v6]:port
    size_t close = authority.find(']');
    if (close == std::string::npos) return std::nullopt;
    u.host = authority.substr(1, close - 1);
    u.port = close + 1 < authority.size() && authority[close + 1] == ':' ? authority.substr(close + 2) : "80";
  } else if (colon != std::string::npos) {
    u.host = authority.substr(0, colon);
    u.port = authority.substr(colon + 1);
  } else {
    u.host = authority;
    u.port = "80";
  }
  if (u.host.empty() || u.port.empty() || u.port.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return u;
}

// Builds the order events. Values vary with a seeded PRNG so flows see a realistic mix: 1–4
// items, totals from one euro to a few hundred, about half of them at or above 100 (the
// benchmark flow routes on that).
class OrderFactory {
 public:
  explicit OrderFactory(uint64_t seed) : rng_(seed) {}

  // Appends with std::to_chars: snprintf was the generator's largest user-space cost.
  void build(std::string* out, std::string_view id, int64_t t_us) {
    const int items = 1 + static_cast<int>(rng_() % 4);
    int64_t total_cents = 0;
    lines_.clear();
    for (int i = 0; i < items; ++i) {
      const int64_t qty = 1 + static_cast<int64_t>(rng_() % 5);
      const int64_t price_cents = 100 + static_cast<int64_t>(rng_() % 2800);  // 1.00 .. 28.99
      const int64_t sku = static_cast<int64_t>(rng_() % 100000);
      total_cents += qty * price_cents;
      lines_.append(i ? ",{\"sku\":\"sku-" : "{\"sku\":\"sku-");
      append_int(&lines_, sku);
      lines_.append("\",\"qty\":\"");
      append_int(&lines_, qty);
      lines_.append("\",\"price\":\"");
      append_cents(&lines_, price_cents);
      lines_.append("\"}");
    }
    const int64_t customer = static_cast<int64_t>(rng_() % 1000);
    out->clear();
    out->append("{\"id\":\"").append(id).append("\",\"t\":");
    append_int(out, t_us);
    out->append(",\"customer_id\":\"c");
    append_int(out, customer);
    out->append("\",\"email\":\"c");
    append_int(out, customer);
    out->append("@example.com\",\"amount\":\"");
    append_cents(out, total_cents);
    out->append("\",\"currency\":\"EUR\",\"channel\":\"web\",\"ts\":\"2026-01-01T00:00:00Z\",\"items\":[");
    out->append(lines_).append("]}");
  }

 private:
  static void append_int(std::string* out, int64_t v) {
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    out->append(buf, end);
  }
  static void append_cents(std::string* out, int64_t cents) {  // 12345 -> "123.45"
    append_int(out, cents / 100);
    out->push_back('.');
    out->push_back(static_cast<char>('0' + cents % 100 / 10));
    out->push_back(static_cast<char>('0' + cents % 10));
  }

  std::mt19937_64 rng_;
  std::string lines_;
};

struct Options {
  std::vector<std::string> urls;  // one or more, same HOST:PORT; connection k posts to urls[k % n]
  double duration_s = 10;
  bool duration_set = false;
  int concurrency = 32;
  double rate = 0;  // 0: closed loop
  double warmup_s = 0;
  uint64_t max_requests = 0;
  double timeout_s = 5;
  std::string acked_ids;
  std::string run_id;
  std::vector<std::pair<std::string, std::string>> headers;
  uint64_t seed = 1;
  bool quiet = false;
};

struct Counters {
  uint64_t sent = 0;
  uint64_t acked = 0;
  std::map<std::string, uint64_t> errors;
  LogLinearHistogram ingest_us;
};

struct Event {
  uint64_t n;
  Clock::time_point intended;
};

class Run;

// One keep-alive connection. Owned by its worker coroutine.
struct Connection {
  explicit Connection(asio::any_io_executor ex) : stream(ex) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  std::string request;
  bool open = false;
  Clock::time_point last_used;  // the last response, or the connect
};

// A keep-alive connection idle this long is reopened before it is used: servers close idle
// connections (weir after http.read_timeout, 10 s by default), and a request sent as the
// server closes one fails as "closed" though the server never saw it. HTTP clients keep
// their own idle limit below the server's for this reason; open-loop runs longer than the
// server's limit leave spare connections idle that long.
constexpr auto kIdleReopen = std::chrono::seconds(4);

class Run {
 public:
  Run(asio::io_context& ioc, Options opts, const std::vector<Url>& urls, tcp::resolver::results_type endpoints)
      : ioc_(ioc),
        opts_(std::move(opts)),
        endpoints_(std::move(endpoints)),
        factory_(opts_.seed),
        progress_timer_(ioc) {
    for (const Url& url : urls) {
      std::string head = "POST " + url.target + " HTTP/1.1\r\nHost: " + url.host +
                         (url.port == "80" ? "" : ":" + url.port) + "\r\n";
      bool has_content_type = false, has_user_agent = false;
      for (const auto& [k, v] : opts_.headers) {
        has_content_type |= beast::iequals(k, "content-type");
        has_user_agent |= beast::iequals(k, "user-agent");
        head += k + ": " + v + "\r\n";
      }
      if (!has_content_type) head += "Content-Type: application/json\r\n";
      if (!has_user_agent) head += "User-Agent: weir-loadgen\r\n";
      request_heads_.push_back(head + "Content-Length: ");
    }
  }

  bool open_loop() const { return opts_.rate > 0; }

  void start() {
    start_ = Clock::now();
    start_sys_us_ = system_now_us();
    warmup_end_ = start_ + to_duration(opts_.warmup_s);
    end_ = opts_.duration_set || opts_.max_requests == 0 ? warmup_end_ + to_duration(opts_.duration_s)
                                                         : Clock::time_point::max();
    if (!opts_.acked_ids.empty()) {
      acked_file_ = std::make_unique<std::ofstream>(opts_.acked_ids, std::ios::trunc);
    }
    last_progress_ = start_;
    asio::co_spawn(ioc_, progress(), asio::detached);
    if (open_loop()) {
      asio::co_spawn(ioc_, dispatcher(), asio::detached);
      // Enough connections for ~2 ms of service time; more open on demand.
      int initial = static_cast<int>(std::ceil(opts_.rate * 0.002));
      initial = std::clamp(initial, 1, opts_.concurrency);
      for (int i = 0; i < initial; ++i) spawn_worker();
    } else {
      for (int i = 0; i < opts_.concurrency; ++i) spawn_worker();
    }
  }

  // Flushes the acked-ids file; false when it could not be written completely.
  bool close_acked_file() {
    if (!acked_file_) return true;
    acked_file_->close();
    return !acked_file_->fail();
  }

  json result() const {
    // The window runs until the last answer: in an open loop that fell behind, the backlog
    // drains after --duration, and acked / duration would overstate what the server did.
    double seconds = std::max(0.0, std::chrono::duration<double>(finish_ - warmup_end_).count());
    auto pct = [&](double q) { return static_cast<double>(measured_.ingest_us.quantile(q)) / 1e3; };
    json errors = json::object();
    for (const auto& [k, v] : measured_.errors) errors[k] = v;
    json warm_errors = json::object();
    for (const auto& [k, v] : warmup_.errors) warm_errors[k] = v;
    return {
        {"mode", open_loop() ? "open" : "closed"},
        {"url", opts_.urls.front()},
        {"urls", opts_.urls.size()},
        {"concurrency", opts_.concurrency},
        {"rate", open_loop() ? json(opts_.rate) : json(nullptr)},
        {"seconds", std::round(seconds * 1000) / 1000},
        {"sent", measured_.sent},
        {"acked", measured_.acked},
        {"errors", errors},
        {"ingest_per_s", seconds > 0 ? std::round(measured_.acked / seconds) : 0.0},
        {"ingest_ms",
         {{"p50", pct(0.50)},
          {"p90", pct(0.90)},
          {"p99", pct(0.99)},
          {"p999", pct(0.999)},
          {"max", static_cast<double>(measured_.ingest_us.max()) / 1e3}}},
        {"warmup",
         {{"seconds", opts_.warmup_s}, {"sent", warmup_.sent}, {"acked", warmup_.acked}, {"errors", warm_errors}}},
        {"total", {{"sent", warmup_.sent + measured_.sent}, {"acked", warmup_.acked + measured_.acked}}},
        {"run_id", opts_.run_id},
        {"connections_opened", connections_opened_},
        {"body_bytes_avg", body_count_ ? static_cast<double>(body_bytes_) / body_count_ : 0.0},
    };
  }

 private:
  static Clock::duration to_duration(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  bool may_issue(uint64_t n) const {
    return (opts_.max_requests == 0 || n < opts_.max_requests) && Clock::now() < end_;
  }

  void spawn_worker() {
    const std::string& head = request_heads_[spawned_++ % request_heads_.size()];
    ++workers_;
    asio::co_spawn(ioc_, worker(head), asio::detached);
  }

  void worker_done() {
    if (--workers_ == 0 && (!open_loop() || dispatch_done_)) {
      finish_ = Clock::now();
      progress_timer_.cancel();
    }
  }

  // Open loop: release events at their intended times into pending_, waking idle workers or
  // opening connections. Events due together are released in one burst, so a 50 µs period
  // does not cost one timer wait per event.
  asio::awaitable<void> dispatcher() {
    const double period_us = 1e6 / opts_.rate;
    asio::steady_timer timer(ioc_);
    uint64_t i = 0;
    for (;;) {
      Clock::time_point intended = start_ +
                                   std::chrono::microseconds(static_cast<int64_t>(std::llround(i * period_us)));
      if (intended >= end_ || (opts_.max_requests && i >= opts_.max_requests)) break;
      if (intended > Clock::now()) {
        timer.expires_at(intended);
        beast::error_code ec;
        co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      pending_.push_back(Event{i, intended});
      ++i;
      if (!idle_.empty()) {
        asio::steady_timer* t = idle_.back();
        idle_.pop_back();
        t->cancel();
      } else if (workers_ < opts_.concurrency) {
        spawn_worker();
      }
    }
    dispatch_done_ = true;
    for (asio::steady_timer* t : idle_) t->cancel();
    idle_.clear();
    if (workers_ == 0) {
      finish_ = Clock::now();
      progress_timer_.cancel();
    }
  }

  // `head`: its URL's request line and headers (request_heads_, which outlive the run).
  asio::awaitable<void> worker(const std::string& head) {
    Connection conn(ioc_.get_executor());
    asio::steady_timer idle_timer(ioc_);
    std::string body;
    for (;;) {
      Event ev;
      if (open_loop()) {
        if (pending_.empty()) {
          if (dispatch_done_) break;
          idle_timer.expires_at(Clock::time_point::max());
          idle_.push_back(&idle_timer);
          beast::error_code ec;
          co_await idle_timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
          continue;
        }
        ev = pending_.front();
        pending_.pop_front();
      } else {
        if (!may_issue(next_n_)) break;
        if (!conn.open && !co_await connect(conn, /*counted=*/nullptr)) {
          co_await backoff();
          continue;
        }
        if (!may_issue(next_n_)) break;
        ev = Event{next_n_++, Clock::now()};
      }
      co_await send(conn, head, ev, body);
    }
    beast::error_code ec;
    conn.stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    worker_done();
  }

  asio::awaitable<void> backoff() {
    // The server refuses connections: retry soon, without spinning a core.
    asio::steady_timer t(ioc_, std::chrono::milliseconds(10));
    beast::error_code ec;
    co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }

  // Connects; on failure counts the error (against `counted` when an event was waiting).
  asio::awaitable<bool> connect(Connection& conn, Counters* counted) {
    beast::error_code ec;
    conn.stream.expires_after(to_duration(opts_.timeout_s));
    co_await conn.stream.async_connect(endpoints_, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      Counters& c = counted ? *counted : (Clock::now() < warmup_end_ ? warmup_ : measured_);
      ++c.errors[ec == beast::error::timeout ? "connect_timeout" : "connect: " + ec.message()];
      conn.stream.close();
      co_return false;
    }
    conn.stream.socket().set_option(tcp::no_delay(true), ec);
    conn.buffer.clear();
    conn.open = true;
    conn.last_used = Clock::now();
    ++connections_opened_;
    co_return true;
  }

  asio::awaitable<void> send(Connection& conn, const std::string& head, const Event& ev, std::string& body) {
    const bool measured = ev.intended >= warmup_end_;
    Counters& c = measured ? measured_ : warmup_;
    ++c.sent;
    if (conn.open && Clock::now() - conn.last_used > kIdleReopen) {
      conn.stream.close();
      conn.open = false;
    }
    if (!conn.open && !co_await connect(conn, &c)) {
      co_await backoff();
      co_return;
    }
    std::string id = opts_.run_id + "-" + std::to_string(ev.n);
    // Open loop stamps the intended time: the event "happened" then, however late it leaves.
    int64_t t_us = open_loop() ? start_sys_us_ + us_between(start_, ev.intended) : system_now_us();
    factory_.build(&body, id, t_us);
    body_bytes_ += body.size();
    ++body_count_;

    // The request is formatted by hand into one buffer: Beast's serializer cost more CPU
    // than everything else in the generator, and the request shape never changes.
    conn.request.assign(head);
    conn.request.append(std::to_string(body.size())).append("\r\n\r\n").append(body);

    beast::error_code ec;
    auto token = asio::redirect_error(asio::use_awaitable, ec);
    conn.stream.expires_after(to_duration(opts_.timeout_s));
    co_await asio::async_write(conn.stream, asio::buffer(conn.request), token);
    http::response_parser<http::string_body> parser;
    parser.body_limit(1 << 20);
    if (!ec) co_await http::async_read(conn.stream, conn.buffer, parser, token);
    const Clock::time_point done = Clock::now();
    if (ec) {
      std::string reason = ec == beast::error::timeout           ? "timeout"
                           : ec == http::error::end_of_stream    ? "closed"
                           : ec == asio::error::eof              ? "closed"
                           : ec == asio::error::connection_reset ? "reset"
                                                                 : ec.message();
      ++c.errors[reason];
      conn.stream.close();
      conn.open = false;
      co_return;
    }
    conn.last_used = done;
    const auto& res = parser.get();
    unsigned status = res.result_int();
    if (!res.keep_alive()) {
      conn.stream.close();
      conn.open = false;
    }
    if (status >= 200 && status < 300) {
      ++c.acked;
      if (measured) c.ingest_us.record(us_between(ev.intended, done));
      if (acked_file_) *acked_file_ << id << '\n';
    } else {
      ++c.errors[std::to_string(status)];
    }
  }

  asio::awaitable<void> progress() {
    uint64_t last_acked = 0;
    for (;;) {
      progress_timer_.expires_after(std::chrono::seconds(1));
      beast::error_code ec;
      co_await progress_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      if (ec || finish_ != Clock::time_point{}) co_return;
      if (opts_.quiet) continue;
      Clock::time_point now = Clock::now();
      uint64_t acked = warmup_.acked + measured_.acked;
      uint64_t errors = 0;
      for (const auto* c : {&warmup_, &measured_})
        for (const auto& [k, v] : c->errors) errors += v;
      double dt = std::chrono::duration<double>(now - last_progress_).count();
      std::fprintf(stderr,
                   "weir-loadgen: %5.1fs %s sent=%" PRIu64 " acked=%" PRIu64 " errors=%" PRIu64
                   " rate=%.0f/s conns=%d queued=%zu\n",
                   std::chrono::duration<double>(now - start_).count(), now < warmup_end_ ? "warmup" : "run",
                   warmup_.sent + measured_.sent, acked, errors, dt > 0 ? (acked - last_acked) / dt : 0.0, workers_,
                   pending_.size());
      last_acked = acked;
      last_progress_ = now;
    }
  }

  asio::io_context& ioc_;
  Options opts_;
  tcp::resolver::results_type endpoints_;
  OrderFactory factory_;
  asio::steady_timer progress_timer_;
  std::unique_ptr<std::ofstream> acked_file_;
  std::vector<std::string> request_heads_;  // per URL: request line and headers up to "Content-Length: "
  size_t spawned_ = 0;                      // workers spawned so far: the next one's URL

  Clock::time_point start_, warmup_end_, end_, last_progress_;
  Clock::time_point finish_{};
  int64_t start_sys_us_ = 0;
  uint64_t next_n_ = 0;
  int workers_ = 0;
  bool dispatch_done_ = false;
  std::deque<Event> pending_;
  std::vector<asio::steady_timer*> idle_;
  Counters warmup_, measured_;
  uint64_t connections_opened_ = 0;
  uint64_t body_bytes_ = 0, body_count_ = 0;
};

std::string default_run_id() {
  // Unique enough across runs on one machine: seconds since the epoch and a random suffix.
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof buf, "r%" PRIx64 "%04x", static_cast<uint64_t>(system_now_us() / 1000000), rd() & 0xffff);
  return buf;
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
  CLI::App app{"weir-loadgen: posts order events over HTTP and reports ingest rate and latency"};
  Options opts;
  std::string duration, warmup = "0s", timeout = "5s";
  std::vector<std::string> headers;
  app.add_option("--url", opts.urls,
                 "http://HOST:PORT/path to POST to; repeated: the connections take the URLs in turn "
                 "(one HOST:PORT for all)")
      ->required();
  app.add_option("--duration", duration, "measured duration after warm-up (10s, 500ms, 2m)");
  app.add_option("--concurrency", opts.concurrency, "connections (max connections in open loop)")
      ->check(CLI::Range(1, 10000));
  app.add_option("--rate", opts.rate, "open loop: events per second (0: closed loop)")->check(CLI::Range(0.0, 10e6));
  app.add_option("--warmup", warmup, "warm-up before measuring (not counted)");
  app.add_option("--max-requests", opts.max_requests, "stop after N requests (warm-up included)");
  app.add_option("--timeout", timeout, "per-request timeout");
  app.add_option("--acked-ids", opts.acked_ids, "write every acked id (warm-up too) to FILE");
  app.add_option("--run-id", opts.run_id, "id prefix (default: generated)");
  app.add_option("--header", headers, "extra header \"Name: value\" (repeatable)");
  app.add_option("--seed", opts.seed, "PRNG seed for event contents");
  app.add_flag("--quiet", opts.quiet, "no progress on stderr");
  raise_fd_limit();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  auto usage = [](const std::string& m) {
    std::cerr << "weir-loadgen: " << m << "\n";
    return 2;
  };
  if (!duration.empty()) {
    auto d = parse_seconds(duration);
    if (!d || *d <= 0) return usage("--duration: expected a positive duration like 10s, got '" + duration + "'");
    opts.duration_s = *d;
    opts.duration_set = true;
  }
  auto w = parse_seconds(warmup);
  if (!w) return usage("--warmup: expected a duration like 2s, got '" + warmup + "'");
  opts.warmup_s = *w;
  auto to = parse_seconds(timeout);
  if (!to || *to <= 0) return usage("--timeout: expected a positive duration like 5s, got '" + timeout + "'");
  opts.timeout_s = *to;
  for (const std::string& h : headers) {
    size_t colon = h.find(':');
    if (colon == std::string::npos || colon == 0) return usage("--header: expected \"Name: value\", got '" + h + "'");
    std::string name = h.substr(0, colon);
    std::string value = h.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    if (name.find_first_of(" \t\r\n") != std::string::npos || value.find_first_of("\r\n") != std::string::npos)
      return usage("--header: invalid header '" + h + "'");
    if (beast::iequals(name, "content-length") || beast::iequals(name, "transfer-encoding") ||
        beast::iequals(name, "host"))
      return usage("--header: '" + name + "' is set by weir-loadgen itself");
    opts.headers.emplace_back(name, value);
  }
  std::vector<Url> urls;
  for (const std::string& u : opts.urls) {
    auto url = parse_url(u);
    if (!url) return usage("--url: expected http://HOST[:PORT]/path, got '" + u + "'");
    if (!urls.empty() && (url->host != urls.front().host || url->port != urls.front().port))
      return usage("--url: every URL must have the first one's HOST:PORT, got '" + u + "'");
    urls.push_back(*url);
  }
  const Url* url = &urls.front();
  if (opts.run_id.empty()) opts.run_id = default_run_id();

  asio::io_context ioc(1);
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  auto endpoints = resolver.resolve(url->host, url->port, ec);
  if (ec) {
    std::cerr << "weir-loadgen: cannot resolve " << url->host << ": " << ec.message() << "\n";
    return 1;
  }
  Run run(ioc, opts, urls, endpoints);
  run.start();
  ioc.run();
  if (!run.close_acked_file()) {
    std::cerr << "weir-loadgen: could not write " << opts.acked_ids << "\n";
    return 1;
  }
  std::cout << run.result().dump() << std::endl;
  return 0;
}

}  // namespace
}  // namespace weir::bench

int main(int argc, char** argv) {
  try {
    return weir::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "weir-loadgen: " << e.what() << "\n";
    return 1;
  }
}

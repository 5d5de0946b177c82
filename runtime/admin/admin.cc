#include "runtime/admin/admin.h"

#include <pthread.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <sstream>

#include "flows/text.h"
#include "runtime/admin/dashboard.h"
#include "runtime/admin/replay_request.h"
#include "runtime/base/log.h"

namespace weir {
namespace {
constexpr std::string_view kFlowsPrefix = "/flows/";
constexpr std::string_view kTablesPrefix = "/tables/";

// %XX and '+' decoded (ids may hold any character an Idempotency-Key may).
std::string url_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::optional<std::string> query_opt(std::string_view target, std::string_view name) {
  auto q = target.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    auto amp = rest.find('&');
    std::string_view kv = rest.substr(0, amp);
    auto eq = kv.find('=');
    if (kv.substr(0, eq) == name) return url_decode(eq == std::string_view::npos ? "" : kv.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    rest = rest.substr(amp + 1);
  }
  return std::nullopt;
}

std::string query_param(std::string_view target, std::string_view name) { return query_opt(target, name).value_or(""); }

// A whole decimal number in [lo, hi], or nullopt.
std::optional<uint64_t> whole_number(const std::string& s, uint64_t lo, uint64_t hi) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  uint64_t v = std::stoull(s);
  if (v < lo || v > hi) return std::nullopt;
  return v;
}

// Guard rails against a browser on the operator's machine (docs/adr/0100): a page from
// another origin (CSRF) gets 403 when it sends an Origin other than the admin's own
// (the origin the request addressed: http://<Host>); without a token the Host must name
// loopback, so a DNS-rebound name is refused too; a write with a body must say it is
// JSON (PUT /flows/{name} may also send YAML, PUT /tables/{name} CSV), which no HTML form
// can; a write without a body may have any type. nullopt: go on.
std::optional<HttpResponse> browser_guard(const HttpRequest& req, bool has_token) {
  auto lower = [](std::string_view v) {
    std::string s(v);
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  std::string host = lower(req.header("Host"));
  if (!has_token && !host.empty() && !is_loopback_listen(host)) {  // an address, not "127.0.0.1.evil.example"
    return HttpResponse::error(
        403, "Host " + host.substr(0, 100) + " is not a loopback name; without an admin token only loopback is served");
  }
  std::string_view origin = req.header("Origin");
  if (!origin.empty() && lower(origin) != "http://" + host) {
    return HttpResponse::error(403, "cross-origin request refused (Origin is not this admin API's own)");
  }
  std::string_view method = req.method();
  if (method == "PUT" || method == "POST") {
    std::string type = lower(req.header("Content-Type"));
    type = type.substr(0, type.find(';'));
    while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.pop_back();
    bool yaml_ok = method == "PUT" && req.path().substr(0, kFlowsPrefix.size()) == kFlowsPrefix;
    // A table import (PUT /tables/{name}, not a row) may be CSV (docs/admin-api.md, Lookup
    // tables). Safe for the same reason as YAML: a page can send a cross-origin request
    // without a CORS preflight only with GET, HEAD or POST and a CORS-safelisted
    // Content-Type (text/plain, application/x-www-form-urlencoded, multipart/form-data);
    // a PUT, and text/csv, both need the preflight, which this API never grants.
    std::string_view path = req.path();
    bool csv_ok = method == "PUT" && path.substr(0, kTablesPrefix.size()) == kTablesPrefix &&
                  path.size() > kTablesPrefix.size() && path.find('/', kTablesPrefix.size()) == std::string_view::npos;
    bool ok = type == "application/json" ||
              (yaml_ok && (type == "application/yaml" || type == "text/yaml" || type == "application/x-yaml")) ||
              (csv_ok && type == "text/csv") ||
              req.body().empty();  // nothing to interpret (CSRF: the Origin check above)
    if (!ok) {
      return HttpResponse::error(415, yaml_ok  ? "Content-Type must be application/json or a YAML type "
                                                 "(application/yaml, text/yaml, application/x-yaml)"
                                      : csv_ok ? "Content-Type must be application/json or text/csv"
                                               : "Content-Type must be application/json");
    }
  }
  return std::nullopt;
}

HttpResponse unauthorized() {
  HttpResponse r = HttpResponse::error(401, "admin token required (Authorization: Bearer ...)");
  r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

HttpResponse json_reply(int status, const nlohmann::json& j) {
  return HttpResponse::json(status, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}
HttpResponse reply(const AdminAnswer& a) { return json_reply(a.code, a.body); }
// Latency percentiles from cumulative histogram buckets (le, count): the bucket's upper
// bound in ms, as histogram_quantile without interpolation; null past the last bound.
nlohmann::json latency_ms(std::vector<std::pair<double, double>>& buckets) {
  std::sort(buckets.begin(), buckets.end());
  double count = buckets.empty() ? 0 : buckets.back().second;
  nlohmann::json lat = {{"count", count}};
  for (auto [q, field] : {std::pair{0.5, "p50"}, std::pair{0.9, "p90"}, std::pair{0.99, "p99"}}) {
    if (count <= 0) {
      lat[field] = nullptr;
      continue;
    }
    double rank = q * count, bound = INFINITY;
    for (const auto& [le, c] : buckets) {
      if (c >= rank) {
        bound = le;
        break;
      }
    }
    lat[field] = std::isinf(bound) ? nlohmann::json(nullptr) : nlohmann::json(bound * 1000.0);
  }
  return lat;
}

// GET /status/metrics: the Prometheus text of /metrics as JSON, per flow and stage, with
// latency percentiles from the histogram buckets (the bucket's upper bound, as
// histogram_quantile without interpolation). Read from the rendered text so the JSON
// can never say something /metrics does not.
nlohmann::json metrics_json(const std::string& text) {
  struct Stage {
    nlohmann::json j = nlohmann::json::object();
    std::vector<std::pair<double, double>> buckets;  // le, cumulative count
  };
  std::map<std::pair<std::string, std::string>, Stage> stages;
  nlohmann::json out = nlohmann::json::object();
  nlohmann::json dlq = nlohmann::json::object();
  nlohmann::json tables = nlohmann::json::object();
  auto label = [](std::string_view labels, std::string_view name) -> std::string {
    std::string key = std::string(name) + "=\"";
    auto at = labels.find(key);
    if (at == std::string_view::npos) return {};
    auto from = at + key.size();
    return std::string(labels.substr(from, labels.find('"', from) - from));
  };
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    auto space = line.rfind(' ');
    if (space == std::string::npos) continue;
    std::string series = line.substr(0, space);
    double value = std::strtod(line.c_str() + space + 1, nullptr);
    auto brace = series.find('{');
    std::string name = series.substr(0, brace);
    std::string labels = brace == std::string::npos ? "" : series.substr(brace);
    if (brace == std::string::npos) {
      if (name == "weir_uptime_seconds") out["uptime_s"] = value;
      else if (name == "weir_process_resident_memory_bytes") out["rss_bytes"] = value;
      else if (name == "weir_dlq_written_total") dlq["written"] = value;
      else if (name == "weir_dlq_write_failures_total") dlq["write_failures"] = value;
      else if (name == "weir_dlq_holding") dlq["holding"] = value != 0;
      continue;
    }
    if (name.rfind("weir_table_", 0) == 0) {  // KV lookup tables: {"tables": {name: {...}}}
      std::string field = name.substr(std::string_view("weir_table_").size());
      if (field == "updated_timestamp_seconds") field = "updated_s";
      tables[label(labels, "table")][field] = value;
      continue;
    }
    std::string flow = label(labels, "flow"), stage = label(labels, "stage");
    if (flow.empty()) continue;
    Stage& st = stages[{flow, stage}];
    static const std::pair<const char*, const char*> kFields[] = {{"weir_events_received_total", "received"},
                                                                  {"weir_events_acked_total", "acked"},
                                                                  {"weir_events_errors_total", "errors"},
                                                                  {"weir_events_dlq_total", "dead"},
                                                                  {"weir_events_dropped_total", "dropped"},
                                                                  {"weir_events_in_flight", "in_flight"},
                                                                  {"weir_consumer_lag", "lag"}};
    for (const auto& [metric, field] : kFields) {
      if (name == metric) st.j[field] = value;
    }
    if (name == "weir_stage_latency_seconds_bucket") {
      std::string le = label(labels, "le");
      st.buckets.emplace_back(le == "+Inf" ? INFINITY : std::strtod(le.c_str(), nullptr), value);
    } else if (name == "weir_stage_latency_seconds_count") {
      st.j["latency_count"] = value;
    }
  }
  nlohmann::json list = nlohmann::json::array();
  for (auto& [key, st] : stages) {
    st.j["flow"] = key.first;
    st.j["stage"] = key.second;
    st.j["latency_ms"] = latency_ms(st.buckets);
    st.j.erase("latency_count");
    list.push_back(std::move(st.j));
  }
  out["stages"] = std::move(list);
  out["dlq"] = std::move(dlq);
  if (!tables.empty()) out["tables"] = std::move(tables);
  return out;
}

// A page of GET /dlq with its cursor headers: X-More, and when there is more the Link to
// the next page and its X-Next-After / X-Next-After-Seq.
HttpResponse dead_letter_page(const DeadLetterPage& page, const DeadLetterQuery& q) {
  HttpResponse out = json_reply(200, page.items);
  out.headers.emplace_back("X-More", page.more ? "true" : "false");
  if (page.more) {
    std::string next = "/dlq?after_seq=" + std::to_string(page.last_seq) + "&limit=" + std::to_string(q.limit);
    if (q.flow) next += "&flow=" + flows::url_encode(*q.flow);
    if (q.id) next += "&id=" + flows::url_encode(*q.id);
    out.headers.emplace_back("Link", "<" + next + ">; rel=\"next\"");
    out.headers.emplace_back("X-Next-After", page.last_id);
    out.headers.emplace_back("X-Next-After-Seq", std::to_string(page.last_seq));
  }
  return out;
}
}  // namespace

Admin::Admin(AdminBackend& backend, Metrics& metrics, DeadLetters* dlq, std::string token)
    : backend_(backend), service_(backend), metrics_(metrics), dlq_(dlq), token_(std::move(token)) {
  worker_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "weir-admin");
    UniqueLock lock(mu_);
    for (;;) {
      lock.wait(cv_, [&]() REQUIRES(mu_) { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();  // never throws: on_worker wraps it
      lock.lock();
    }
  });
}

Admin::~Admin() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void Admin::on_worker(const Responder& respond, std::function<void(const Responder&)> job) {
  auto answered = std::make_shared<std::atomic<bool>>(false);
  Responder once = [respond, answered](HttpResponse r) {
    if (!answered->exchange(true)) respond(std::move(r));
  };
  // Any exception (bad_alloc, a backend's throw) would end the worker thread, and with it
  // weir (std::terminate): it becomes a 500 instead. Its text may quote a request or a
  // credential, so neither the answer nor the log carries it; the log names its type.
  auto run = [once, job = std::move(job)] {
    const char* what = nullptr;
    try {
      job(once);
      return;
    } catch (const std::bad_alloc&) {
      what = "out of memory (std::bad_alloc)";
    } catch (const std::exception&) {
      what = "an exception";
    } catch (...) {
      what = "an exception of unknown type";
    }
    log::error("admin call failed", {{"error", what}});
    try {
      once(HttpResponse::error(500, "internal error (see weir's log)"));
    } catch (...) {  // out of memory again: the connection's deadline closes it
    }
  };
  bool queued = false;
  {
    MutexLock lock(mu_);
    if (jobs_.size() < kMaxQueuedJobs) {
      jobs_.push_back(std::move(run));
      queued = true;
    }
  }
  if (!queued) {
    HttpResponse busy = HttpResponse::error(503, "the admin API is busy; retry later");
    busy.headers.emplace_back("Retry-After", "1");
    once(std::move(busy));
    return;
  }
  cv_.notify_one();
}

Handler Admin::handler() {
  return [this](HttpRequest& req, const Responder& respond) { handle(req, respond); };
}

// The dashboard's page, script and style sheet (runtime/admin/dashboard/, embedded). They hold
// no data, so they are served without the token — a browser cannot send a bearer token
// when it navigates — and every call the page makes for data needs it like any other
// (ADR 0093). The CSP keeps the page to this origin: nothing is fetched from elsewhere.
bool Admin::serve_dashboard(std::string_view path, const Responder& respond) {
  std::string_view want = path == "/" ? "/index.html" : path;
  for (const auto& asset : dashboard_assets()) {
    if (asset.path != want) continue;
    HttpResponse r;
    r.content_type = std::string(asset.content_type);
    r.body = std::string(asset.body);
    r.headers.emplace_back("Content-Security-Policy",
                           "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                           "img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'");
    r.headers.emplace_back("X-Content-Type-Options", "nosniff");
    r.headers.emplace_back("Cache-Control", "no-cache");
    r.headers.emplace_back("Referrer-Policy", "no-referrer");
    respond(std::move(r));
    return true;
  }
  return false;
}

void Admin::handle(HttpRequest& req, const Responder& respond) {
  std::string_view path = req.path();
  std::string_view method = req.method();
  if (auto refused = browser_guard(req, !token_.empty())) {
    respond(std::move(*refused));
    return;
  }
  if (path == "/healthz") {
    respond(json_reply(200, {{"status", "ok"}}));
    return;
  }
  if (path == "/readyz") {
    std::string why;
    DeadLetters* dlq = dlq_.load();
    if (!backend_.ready(&why) || (dlq && dlq->holding(&why))) {
      respond(json_reply(503, {{"status", "not ready"}, {"reason", why}}));
      return;
    }
    // A broker sink that is down keeps the instance ready: ingress still stores every event
    // and the sink delivers them once its broker is back (docs/adr/0315-broker-sink-health.md).
    auto degraded = backend_.degraded();
    if (degraded.empty()) respond(json_reply(200, {{"status", "ready"}}));
    else respond(json_reply(200, {{"status", "degraded"}, {"degraded", degraded}}));
    return;
  }
  if (method == "GET" && serve_dashboard(path, respond)) return;
  if (!authorized(req, respond)) return;
  if (handle_metrics(req, respond) || handle_flows(req, respond) || handle_tables(req, respond) ||
      handle_dlq(req, respond)) {
    return;
  }
  respond(HttpResponse::error(404, "no admin call " + std::string(method) + " " + std::string(path)));
}

// With a token, every call past /healthz, /readyz and the dashboard's files needs it;
// false: answered 401.
bool Admin::authorized(const HttpRequest& req, const Responder& respond) const {
  if (token_ok(req)) return true;
  respond(unauthorized());
  return false;
}

bool Admin::token_ok(const HttpRequest& req) const {
  if (token_.empty()) return true;
  std::string_view auth = req.header("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  return auth.size() > kBearer.size() && auth.substr(0, kBearer.size()) == kBearer &&
         flows::constant_time_equals(auth.substr(kBearer.size()), token_);
}

// What handle() serves without the token: /healthz, /readyz and the dashboard's files.
bool Admin::needs_token(const HttpRequest& req) const {
  std::string_view path = req.path();
  if (token_.empty() || path == "/healthz" || path == "/readyz") return false;
  if (req.method() != "GET") return true;
  std::string_view want = path == "/" ? "/index.html" : path;
  for (const auto& asset : dashboard_assets()) {
    if (asset.path == want) return false;
  }
  return true;
}

// A wrong or missing token is answered from the header alone: a 4 MiB body is not read
// for a caller who may not send one (the connection closes after the 401).
std::function<std::optional<HttpResponse>(const HttpRequest&)> Admin::header_check() const {
  return [this](const HttpRequest& req) -> std::optional<HttpResponse> {
    if (!needs_token(req) || token_ok(req)) return std::nullopt;
    return unauthorized();
  };
}

// GET /metrics (Prometheus text) and GET /status/metrics (the same as JSON). False when
// the call is not one of them.
bool Admin::handle_metrics(const HttpRequest& req, const Responder& respond) {
  std::string_view path = req.path();
  if (req.method() != "GET" || (path != "/metrics" && path != "/status/metrics")) return false;
  std::string text = metrics_.render_prometheus();
  if (DeadLetters* dlq = dlq_.load()) dlq->render_metrics(text);
  if (KvTables* tables = tables_.load()) tables->render_metrics(text);
  if (path == "/status/metrics") {
    respond(json_reply(200, metrics_json(text)));
    return true;
  }
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = std::move(text);
  respond(std::move(r));
  return true;
}

// GET /status, /flows, /flows/{name}; PUT /flows/{name}; POST /flows/{name}/promote and
// /rollback — answered by the AdminService. In a cluster these read the version registry
// (KV round trips): not on the io thread. False when the call is not one of them.
bool Admin::handle_flows(HttpRequest& req, const Responder& respond) {
  std::string_view path = req.path();
  std::string_view method = req.method();
  if (path == "/status" && method == "GET") {
    on_worker(respond, [this](const Responder& respond) { respond(reply(service_.status())); });
    return true;
  }
  if (path == "/flows" && method == "GET") {
    on_worker(respond, [this](const Responder& respond) { respond(reply(service_.flows())); });
    return true;
  }
  if (path == "/sinks" && method == "GET") {
    on_worker(respond, [this](const Responder& respond) { respond(reply(service_.sinks())); });
    return true;
  }
  if (path.substr(0, 7) == "/sinks/") {
    // /sinks/{flow}/{sink}/pause|resume (docs/admin-api.md)
    std::string rest(path.substr(7));
    const size_t a = rest.find('/');
    const size_t b = a == std::string::npos ? a : rest.find('/', a + 1);
    const std::string action = b == std::string::npos ? "" : rest.substr(b + 1);
    if (a == std::string::npos || b == std::string::npos || a == 0 || b == a + 1 ||
        (action != "pause" && action != "resume")) {
      respond(HttpResponse::error(404, "no such call: use GET /sinks or POST /sinks/{flow}/{sink}/pause|resume"));
      return true;
    }
    if (method != "POST") {
      respond(HttpResponse::error(405, "pause and resume are POST calls"));
      return true;
    }
    std::string flow = rest.substr(0, a), sink = rest.substr(a + 1, b - a - 1);
    on_worker(respond, [this, flow, sink, pause = action == "pause"](const Responder& respond) {
      respond(reply(service_.control_sink(flow, sink, pause)));
    });
    return true;
  }
  if (path.substr(0, kFlowsPrefix.size()) != kFlowsPrefix) return false;
  std::string rest(path.substr(kFlowsPrefix.size()));
  std::string name = rest.substr(0, rest.find('/'));
  std::string action = rest.find('/') == std::string::npos ? "" : rest.substr(rest.find('/') + 1);
  if (action.empty() && method == "GET") {
    on_worker(respond, [this, name](const Responder& respond) { respond(reply(service_.flow(name))); });
    return true;
  }
  if (action.empty() && method == "PUT") {
    std::string body = req.body();
    std::string target = query_param(req.target(), "target");
    on_worker(respond, [this, name, body = std::move(body), target](const Responder& respond) {
      respond(reply(service_.deploy(name, body, target)));
    });
    return true;
  }
  if (action == "promote" && method == "POST") {
    auto j = nlohmann::json::parse(req.body(), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("version") || !j["version"].is_number_integer() ||
        (j.contains("expected_active") && !j["expected_active"].is_number_integer())) {
      respond(HttpResponse::error(400, "body must be {\"version\": N} or {\"version\": N, \"expected_active\": M}"));
      return true;
    }
    int64_t v = j["version"].get<int64_t>();
    int64_t expected = j.value("expected_active", int64_t{0});
    on_worker(respond, [this, name, v, expected](const Responder& respond) {
      respond(reply(service_.promote(name, v, expected)));
    });
    return true;
  }
  if (action == "rollback" && method == "POST") {
    on_worker(respond, [this, name](const Responder& respond) { respond(reply(service_.rollback(name))); });
    return true;
  }
  return false;
}

// GET /dlq and POST /dlq/replay (docs/admin-api.md). False when the call is not one of them.
bool Admin::handle_dlq(HttpRequest& req, const Responder& respond) {
  std::string_view path = req.path();
  std::string_view method = req.method();
  const bool list = path == "/dlq" && method == "GET";
  const bool replay = path == "/dlq/replay" && method == "POST";
  if (!list && !replay) return false;
  DeadLetters* dlq = dlq_.load();
  if (!dlq) {
    respond(HttpResponse::error(503, "not connected to NATS yet"));
    return true;
  }
  if (list) {
    list_dead_letters(*dlq, req, respond);
  } else {
    replay_dead_letters(*dlq, req, respond);
  }
  return true;
}

void Admin::list_dead_letters(DeadLetters& dlq, const HttpRequest& req, const Responder& respond) {
  // Paging: ?flow=F&after=ID&limit=N; after_seq=N is the exact cursor the
  // Link header hands out (docs/admin-api.md, ADR 0091).
  DeadLetterQuery q;
  std::string target(req.target());
  if (auto f = query_opt(target, "flow"); f && !f->empty()) q.flow = *f;
  if (auto id = query_opt(target, "id"); id && !id->empty()) q.id = *id;
  if (auto a = query_opt(target, "after"); a && !a->empty()) q.after_id = *a;
  if (auto l = query_opt(target, "limit")) {
    auto v = whole_number(*l, 1, DeadLetters::kMaxPage);
    if (!v) {
      respond(
          HttpResponse::error(400, "limit must be a whole number from 1 to " + std::to_string(DeadLetters::kMaxPage)));
      return;
    }
    q.limit = *v;
  }
  if (auto a = query_opt(target, "after_seq")) {
    auto v = whole_number(*a, 0, UINT64_MAX / 2);
    if (!v) {
      respond(HttpResponse::error(400, "after_seq must be a whole number (a dead letter's seq)"));
      return;
    }
    q.after_seq = *v;
  }
  on_worker(respond, [dlq = &dlq, q](const Responder& respond) {
    auto r = dlq->list(q);
    if (!r) {
      int code = r.status().code() == Status::Code::kNotFound ? 404 : 503;
      respond(HttpResponse::error(code, r.status().message()));
      return;
    }
    respond(dead_letter_page(*r, q));
  });
}

void Admin::replay_dead_letters(DeadLetters& dlq, const HttpRequest& req, const Responder& respond) {
  ReplayRequest request;
  if (auto bad = parse_replay_request(req.body(), &request)) {
    respond(HttpResponse::error(400, "malformed replay filter: " + *bad));
    return;
  }
  on_worker(respond, [dlq = &dlq, request](const Responder& respond) {
    auto r = dlq->replay(request.filter, request.dry_run);
    if (r) respond(json_reply(200, replay_answer(r.value(), request.dry_run)));
    else respond(HttpResponse::error(503, r.status().message()));
  });
}

// /tables, /tables/{name}, /tables/{name}/{key} (docs/admin-api.md, ADR 0120). Every
// call makes NATS round trips: on the worker thread. False when the path is not ours.
bool Admin::handle_tables(HttpRequest& req, const Responder& respond) {
  constexpr std::string_view kPrefix = "/tables";
  std::string_view path = req.path();
  if (path.substr(0, kPrefix.size()) != kPrefix || (path.size() > kPrefix.size() && path[kPrefix.size()] != '/')) {
    return false;
  }
  const std::string method(req.method());
  KvTables* tables = tables_.load();
  if (!tables) {
    respond(HttpResponse::error(503, "not connected to NATS yet"));
    return true;
  }
  std::string rest = path.size() > kPrefix.size() + 1 ? std::string(path.substr(kPrefix.size() + 1)) : "";
  const auto slash = rest.find('/');
  const std::string name = url_decode(rest.substr(0, slash));
  const bool has_key = slash != std::string::npos;
  const std::string key = has_key ? url_decode(rest.substr(slash + 1)) : "";
  auto reply = [](const Responder& respond, ControlResult r) {
    const bool ok = r.ok();
    AdminAnswer a = answer(std::move(r));  // the one Outcome -> HTTP mapping
    if (!ok) respond(HttpResponse::error(a.code, a.body.value("error", std::string("error"))));
    else respond(json_reply(a.code, a.body));
  };
  if (name.empty()) {
    if (method != "GET") {
      respond(HttpResponse::error(405, "GET /tables lists the tables; rows are under /tables/{name}"));
      return true;
    }
    on_worker(respond, [tables, reply](const Responder& respond) { reply(respond, tables->list()); });
    return true;
  }
  if (has_key) {
    if (key.empty()) {
      respond(HttpResponse::error(400, "empty row key"));
      return true;
    }
    if (method == "GET") {
      on_worker(respond,
                [tables, name, key, reply](const Responder& respond) { reply(respond, tables->get(name, key)); });
    } else if (method == "PUT") {
      on_worker(respond, [tables, name, key, body = req.body(), reply](const Responder& respond) {
        reply(respond, tables->put(name, key, body));
      });
    } else if (method == "DELETE") {
      on_worker(respond,
                [tables, name, key, reply](const Responder& respond) { reply(respond, tables->erase(name, key)); });
    } else {
      respond(HttpResponse::error(405, "a table row takes GET, PUT or DELETE"));
    }
    return true;
  }
  if (method == "GET") {
    on_worker(respond, [tables, name, reply](const Responder& respond) { reply(respond, tables->export_rows(name)); });
    return true;
  }
  if (method == "PUT") {
    // The format: ?format=csv|json, else the Content-Type (text/csv is CSV), else JSON.
    std::string format = query_param(req.target(), "format");
    if (format.empty()) {
      std::string ct(req.header("Content-Type").substr(0, 8));
      for (auto& c : ct) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      format = ct == "text/csv" ? "csv" : "json";
    }
    std::string key_column = query_param(req.target(), "key");
    on_worker(respond, [tables, name, body = req.body(), format, key_column, reply](const Responder& respond) {
      reply(respond, tables->import(name, body, format, key_column));
    });
    return true;
  }
  respond(HttpResponse::error(405, "a table takes GET (export) or PUT (import)"));
  return true;
}

}  // namespace weir

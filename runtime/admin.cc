#include "runtime/admin.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <pthread.h>

#include <cctype>
#include <optional>

#include "runtime/log.h"

namespace weir {
namespace {
constexpr std::string_view kFlowsPrefix = "/flows/";

std::string query_param(std::string_view target, std::string_view name) {
  auto q = target.find('?');
  if (q == std::string_view::npos) return {};
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    auto amp = rest.find('&');
    std::string_view kv = rest.substr(0, amp);
    auto eq = kv.find('=');
    if (kv.substr(0, eq) == name) return std::string(eq == std::string_view::npos ? "" : kv.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    rest = rest.substr(amp + 1);
  }
  return {};
}

// Compares digests so that the time taken says nothing about the token.
bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char da[SHA256_DIGEST_LENGTH], db[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(a.data()), a.size(), da);
  SHA256(reinterpret_cast<const unsigned char*>(b.data()), b.size(), db);
  return CRYPTO_memcmp(da, db, sizeof da) == 0;
}

// Guard rails against a browser on the operator's machine (docs/adr/0100): a page from
// another origin (CSRF) gets 403 when it sends an Origin other than the admin's own
// (the origin the request addressed: http://<Host>); without a token the Host must name
// loopback, so a DNS-rebound name is refused too; a write with a body must say it is
// JSON (PUT /flows/{name} may also send YAML), which no HTML form can; a write without a
// body may have any type. nullopt: go on.
std::optional<HttpResponse> browser_guard(const HttpRequest& req, bool has_token) {
  auto lower = [](std::string_view v) {
    std::string s(v);
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  std::string host = lower(req.header("Host"));
  if (!has_token && !host.empty() && !is_loopback_listen(host)) {  // an address, not "127.0.0.1.evil.example"
    return HttpResponse::error(403, "Host " + host.substr(0, 100) +
                                        " is not a loopback name; without an admin token only loopback is served");
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
    bool ok = type == "application/json" ||
              (yaml_ok && (type == "application/yaml" || type == "text/yaml" || type == "application/x-yaml")) ||
              req.body().empty();  // nothing to interpret (CSRF: the Origin check above)
    if (!ok) {
      return HttpResponse::error(415, yaml_ok ? "Content-Type must be application/json or a YAML type "
                                                "(application/yaml, text/yaml, application/x-yaml)"
                                              : "Content-Type must be application/json");
    }
  }
  return std::nullopt;
}

HttpResponse json_reply(int status, const nlohmann::json& j) {
  return HttpResponse::json(status, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}
}  // namespace

Admin::Admin(AdminBackend& backend, Metrics& metrics, DeadLetters* dlq, std::string token)
    : backend_(backend), metrics_(metrics), dlq_(dlq), token_(std::move(token)) {
  worker_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "weir-admin");
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  });
}

Admin::~Admin() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void Admin::on_worker(std::function<void()> job) {
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

Handler Admin::handler() {
  return [this](HttpRequest& req, Responder respond) { handle(req, std::move(respond)); };
}

void Admin::handle(HttpRequest& req, Responder respond) {
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
    if (backend_.ready(&why)) respond(json_reply(200, {{"status", "ready"}}));
    else respond(json_reply(503, {{"status", "not ready"}, {"reason", why}}));
    return;
  }
  if (!token_.empty()) {
    std::string_view auth = req.header("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    if (auth.size() <= kBearer.size() || auth.substr(0, kBearer.size()) != kBearer ||
        !constant_time_equal(auth.substr(kBearer.size()), token_)) {
      HttpResponse r = HttpResponse::error(401, "admin token required (Authorization: Bearer ...)");
      r.headers.emplace_back("WWW-Authenticate", "Bearer");
      respond(std::move(r));
      return;
    }
  }
  if (path == "/metrics" && method == "GET") {
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4";
    r.body = metrics_.render_prometheus();
    respond(std::move(r));
    return;
  }
  // In a cluster these read the version registry (KV round trips): not on the io thread.
  if (path == "/status" && method == "GET") {
    on_worker([this, respond] { respond(json_reply(200, backend_.status())); });
    return;
  }
  if (path == "/flows" && method == "GET") {
    on_worker([this, respond] { respond(json_reply(200, backend_.flows())); });
    return;
  }
  if (path.substr(0, kFlowsPrefix.size()) == kFlowsPrefix) {
    std::string rest(path.substr(kFlowsPrefix.size()));
    std::string name = rest.substr(0, rest.find('/'));
    std::string action = rest.find('/') == std::string::npos ? "" : rest.substr(rest.find('/') + 1);
    if (action.empty() && method == "GET") {
      on_worker([this, name, respond] {
        auto f = backend_.flow(name);
        if (f) respond(json_reply(200, *f));
        else respond(HttpResponse::error(404, "no flow named " + name));
      });
      return;
    }
    if (action.empty() && method == "PUT") {
      std::string body = req.body();
      std::string target = query_param(req.target(), "target");
      on_worker([this, name, body = std::move(body), target, respond] {
        auto [code, j] = backend_.deploy(name, body, target);
        respond(json_reply(code, j));
      });
      return;
    }
    if (action == "promote" && method == "POST") {
      auto j = nlohmann::json::parse(req.body(), nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("version") || !j["version"].is_number_integer() ||
          (j.contains("expected_active") && !j["expected_active"].is_number_integer())) {
        respond(HttpResponse::error(400, "body must be {\"version\": N} or {\"version\": N, \"expected_active\": M}"));
        return;
      }
      int64_t v = j["version"].get<int64_t>();
      int64_t expected = j.value("expected_active", int64_t{0});
      on_worker([this, name, v, expected, respond] {
        auto [code, body] = backend_.promote(name, v, expected);
        respond(json_reply(code, body));
      });
      return;
    }
    if (action == "rollback" && method == "POST") {
      on_worker([this, name, respond] {
        auto [code, body] = backend_.rollback(name);
        respond(json_reply(code, body));
      });
      return;
    }
  }
  if (path == "/dlq" && method == "GET") {
    DeadLetters* dlq = dlq_.load();
    if (!dlq) {
      respond(HttpResponse::error(503, "not connected to NATS yet"));
      return;
    }
    std::string flow = query_param(req.target(), "flow");
    size_t limit = 1000;
    if (auto l = query_param(req.target(), "limit"); !l.empty()) limit = std::strtoull(l.c_str(), nullptr, 10);
    on_worker([dlq, flow, limit, respond] {
      auto r = dlq->list(flow.empty() ? std::nullopt : std::optional<std::string>(flow), limit);
      if (r) respond(json_reply(200, r.value()));
      else respond(HttpResponse::error(503, r.status().message()));
    });
    return;
  }
  if (path == "/dlq/replay" && method == "POST") {
    DeadLetters* dlq = dlq_.load();
    if (!dlq) {
      respond(HttpResponse::error(503, "not connected to NATS yet"));
      return;
    }
    std::optional<std::string> flow;
    std::vector<std::string> ids;
    if (!req.body().empty()) {
      auto j = nlohmann::json::parse(req.body(), nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        respond(HttpResponse::error(400, "body must be {}, {\"flow\": F} or {\"ids\": [...]}"));
        return;
      }
      if (j.contains("flow") && j["flow"].is_string()) flow = j["flow"].get<std::string>();
      if (j.contains("ids") && j["ids"].is_array()) {
        for (const auto& id : j["ids"]) {
          if (id.is_string()) ids.push_back(id.get<std::string>());
        }
      }
    }
    on_worker([dlq, flow, ids, respond] {
      auto r = dlq->replay(flow, ids);
      if (r) respond(json_reply(200, {{"replayed", r.value()}}));
      else respond(HttpResponse::error(503, r.status().message()));
    });
    return;
  }
  respond(HttpResponse::error(404, "no admin call " + std::string(method) + " " + std::string(path)));
}

}  // namespace weir

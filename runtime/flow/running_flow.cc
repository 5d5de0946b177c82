#include "runtime/flow/running_flow.h"

#include <pthread.h>
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>
#include <sstream>
#include <variant>

#include <curl/curl.h>

#include "runtime/flow/backpressure.h"
#include "runtime/base/log.h"
#include "runtime/nats/loop_publisher.h"
#include "runtime/flow/state_store.h"
#include "runtime/base/thread_annotations.h"
#include "runtime/base/wall_clock.h"

namespace weir {
namespace fs = std::filesystem;

namespace {
const char* source_kind(const flows::SourceSpec& s) {
  static const char* kNames[] = {"http", "mqtt", "nats", "timer", "poll", "exec", "flow"};
  return kNames[s.index()];
}

// The host a connector URL names, in lower case without brackets ("" when it has none).
std::string url_host(const std::string& url) {
  CURLU* u = curl_url();
  if (u == nullptr) return "";
  std::string host;
  char* h = nullptr;
  if (curl_url_set(u, CURLUPART_URL, url.c_str(), CURLU_NON_SUPPORT_SCHEME) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_HOST, &h, 0) == CURLUE_OK && h != nullptr) {
    host = h;
    curl_free(h);
  }
  curl_url_cleanup(u);
  if (host.size() > 1 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return std::tolower(c); });
  return host;
}

bool host_allowed(const std::string& host, const std::vector<std::string>& allowed) {
  for (const auto& a : allowed) {
    if (a == host) return true;
    if (a.rfind("*.", 0) == 0 && host.size() > a.size() - 1 &&
        host.compare(host.size() - (a.size() - 1), a.size() - 1, a, 1) == 0) {
      return true;
    }
  }
  return false;
}

// What a flow sent over the network may not do beyond its steps unless the operator
// allowed it (docs/adr/0274): run a command, name a file on the server, reach a host off
// admin.allow_hosts. Its from:/to: are its own (not kept from a running version).
Status network_wiring_allowed(const flows::Flow& flow, const RuntimeConfig::Admin& admin) {
  std::vector<std::string> errors;
  std::vector<std::pair<std::string, std::string>> urls;  // where, url
  const std::string file = flow.name() + ".yaml: ";
  if (std::holds_alternative<flows::ExecSourceSpec>(flow.source()) && !admin.allow_exec) {
    errors.push_back(file +
                     "from.exec: a flow sent over the network may not run a command (the config's "
                     "admin.allow_exec: true allows it; docs/admin-api.md)");
  }
  if (const auto* m = std::get_if<flows::MqttSourceSpec>(&flow.source())) {
    if (!m->ca_file.empty() || !m->cert_file.empty() || !m->key_file.empty()) {
      errors.push_back(file +
                       "from.mqtt: a flow sent over the network may not name files on the server (ca_file, "
                       "cert_file, key_file); put the flow file on the server");
    }
    urls.emplace_back("from.mqtt.broker", m->broker);
  }
  if (const auto* p = std::get_if<flows::PollSourceSpec>(&flow.source())) {
    urls.emplace_back("from.poll.url", p->url);
    if (p->oauth2) urls.emplace_back("from.poll.oauth2.token_url", p->oauth2->token_url);
  }
  for (const auto& s : flow.sinks()) {
    if (const auto* h = std::get_if<flows::HttpSinkSpec>(&s.kind)) {
      urls.emplace_back("to." + s.name + (h->url_expr ? ".http.url.base" : ".http.url"), h->url);
      // docs/adr/0317-per-event-urls.md: every origin a computed URL may name.
      for (const auto& origin : h->url_allow) urls.emplace_back("to." + s.name + ".http.url.allow", origin);
      // docs/adr/0302-http-sink-tls-and-oauth2.md: files on the server, as for from.mqtt.
      if (h->tls) {
        errors.push_back(file + "to." + s.name +
                         ".http.tls: a flow sent over the network may not name files on the server (ca_file, "
                         "cert_file, key_file); put the flow file on the server");
      }
      if (h->oauth2) urls.emplace_back("to." + s.name + ".http.oauth2.token_url", h->oauth2->token_url);
    }
    if (const auto* m = std::get_if<flows::MqttSinkSpec>(&s.kind))
      urls.emplace_back("to." + s.name + ".mqtt.broker", m->broker);
  }
  if (!admin.allow_hosts.empty()) {
    for (const auto& [where, url] : urls) {
      const std::string host = url_host(url);
      if (!host_allowed(host, admin.allow_hosts)) {
        errors.push_back(file + where + ": host \"" + host +
                         "\" is not in the config's admin.allow_hosts, so a flow sent over the network may not "
                         "reach it");
      }
    }
  }
  if (errors.empty()) return Status::ok();
  std::string all;
  for (const auto& e : errors) all += (all.empty() ? "" : "\n") + e;
  return Status::invalid(all);
}

}  // namespace

Status write_file_atomically(const std::string& path, const std::string& text, const char* verb) {
  const std::string tmp = path + ".tmp-deploy";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) return Status::internal("cannot write " + tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return Status::internal(std::string("cannot ") + verb + " " + path);
  }
  return Status::ok();
}

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found("cannot read " + path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

Status same_wiring(const std::string& old_text, const std::string& new_text) {
  std::string error;
  auto b = flows::read_wiring(new_text, &error);
  auto a = b ? flows::read_wiring(old_text, &error) : std::nullopt;
  if (!a || !b) return Status::invalid("cannot compare with the running version: " + error);
  for (const auto& [key, old_part, new_part] :
       {std::tuple{"flow", a->flow, b->flow}, std::tuple{"from", a->from, b->from}, std::tuple{"to", a->to, b->to}}) {
    if (old_part != new_part) {
      return Status::invalid(std::string(key) + ": a new version must keep `" + key +
                             "` as the running one has it (a live switch replaces the steps only; "
                             "restart weir to change the source or the sinks)");
    }
  }
  return Status::ok();
}

Result<std::shared_ptr<const flows::Flow>> compile_version(const std::string& text, const std::string& path,
                                                           int64_t version, TextOrigin origin,
                                                           const RuntimeConfig::Admin& admin) {
  flows::LoadOptions lo;
  lo.allow_table_files = origin == TextOrigin::kLocal;
  lo.substitute_env = origin == TextOrigin::kLocal;
  lo.wiring_kept = origin == TextOrigin::kKeptWiring;
  lo.env_allowed = [&admin](const std::string& name) {
    return std::find(admin.allow_env.begin(), admin.allow_env.end(), name) != admin.allow_env.end();
  };
  auto r = flows::load_flow_text(text, path, lo);
  if (!r.flow) {
    std::string errors;
    for (const auto& d : r.diagnostics) errors += (errors.empty() ? "" : "\n") + d.str();
    return Status::invalid(errors);
  }
  if (origin == TextOrigin::kNetwork) {
    if (Status s = network_wiring_allowed(*r.flow, admin); !s) return s;
  }
  // Fresh and not shared yet: the one moment the version may be set.
  const_cast<flows::Flow&>(*r.flow).set_version(version);
  return r.flow;
}

namespace {
fs::path version_file(const RuntimeConfig& config, const std::string& flow) {
  return fs::path(config.data_dir) / "flow-versions" / flow;
}
}  // namespace

int64_t kept_version(const RuntimeConfig& config, const std::string& flow, const std::string& hash) {
  std::ifstream in(version_file(config, flow));
  int64_t version = 0;
  std::string kept_hash;
  if (!(in >> version >> kept_hash) || version < 1) return 1;
  if (kept_hash == hash) return version;
  // Changed by hand while weir was stopped: a new version, as a reload would make it.
  if (Status s = keep_version(config, flow, version + 1, hash); !s) {
    log::warn("flow version not kept", {{"flow", flow}, {"error", s.message()}});
  }
  return version + 1;
}

Status keep_version(const RuntimeConfig& config, const std::string& flow, int64_t version, const std::string& hash) {
  const fs::path path = version_file(config, flow);
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return Status::internal("cannot create " + path.parent_path().string() + ": " + ec.message());
  const std::string text = std::to_string(version) + " " + (hash.empty() ? "-" : hash) + "\n";
  return write_file_atomically(path.string(), text, "keep the version in");
}

TextOrigin network_origin(const std::string& running_text, const std::string& text) {
  return !running_text.empty() && same_wiring(running_text, text) ? TextOrigin::kKeptWiring : TextOrigin::kNetwork;
}

// The registry's handle on the flow (FlowControl; ADR 0042): compiled versions wait here
// until resume() swaps them into the stage.
class RunningFlow::Versions final : public FlowControl {
 public:
  explicit Versions(RunningFlow& flow) : flow_(flow) {}

  void add(int64_t version, std::shared_ptr<const flows::Flow> f, const std::string& text) {
    MutexLock lock(mu_);
    ready_[version] = std::move(f);
    texts_[version] = text;
  }
  std::string text(int64_t version) {
    MutexLock lock(mu_);
    return texts_[version];
  }
  // The content hash of a loaded version ("" when it is not loaded).
  std::string hash(int64_t version) {
    MutexLock lock(mu_);
    auto it = ready_.find(version);
    return it == ready_.end() ? "" : it->second->content_hash();
  }

  bool pause(std::chrono::milliseconds timeout) override { return flow_.stage_->pause(timeout); }

  Status load(int64_t version, const std::string& text) override {
    std::string running_text;
    {
      MutexLock lock(mu_);
      if (ready_.count(version)) return Status::ok();
      running_text = texts_[flow_.version()];
    }
    if (!running_text.empty()) {
      if (Status s = same_wiring(running_text, text); !s) return s;
    }
    auto file = read_text_file(flow_.path());
    const TextOrigin origin = file && file.value() == text ? TextOrigin::kLocal
                              : running_text.empty()       ? TextOrigin::kNetwork
                                                           : TextOrigin::kKeptWiring;
    auto f = compile_version(text, flow_.path(), version, origin, flow_.deps_.config->admin);
    if (!f) return f.status();
    add(version, f.value(), text);
    return Status::ok();
  }

  void resume(int64_t version) override {
    std::shared_ptr<const flows::Flow> f;
    {
      MutexLock lock(mu_);
      auto it = ready_.find(version);
      if (it != ready_.end()) f = it->second;
    }
    if (!f) return;  // the registry loads before it resumes
    flow_.switched(std::move(f), version);
  }

 private:
  RunningFlow& flow_;
  Mutex mu_;
  std::map<int64_t, std::shared_ptr<const flows::Flow>> ready_ GUARDED_BY(mu_);
  std::map<int64_t, std::string> texts_ GUARDED_BY(mu_);
};

RunningFlow::RunningFlow(const FlowDeps& deps, std::shared_ptr<const flows::Flow> flow, const std::string& text)
    : deps_(deps), flow_(std::move(flow)), versions_(std::make_unique<Versions>(*this)) {
  version_ = flow_->version();
  switched_at_ms_ = wall_ms();
  path_ = flow_->file().empty() ? (fs::path(deps_.config->flows) / (flow_->name() + ".yaml")).string() : flow_->file();
  versions_->add(flow_->version(), flow_, text);
}

RunningFlow::~RunningFlow() = default;

void RunningFlow::switched(std::shared_ptr<const flows::Flow> flow, int64_t version) {
  stage_->resume(std::move(flow));
  version_ = version;
  switched_at_ms_ = wall_ms();
}

std::string RunningFlow::running_text() const { return versions_->text(version_.load()); }

StageOptions RunningFlow::stage_options() const {
  StageOptions so;
  so.drain_timeout = deps_.config->drain_timeout;
  so.max_deliver = deps_.config->max_deliver;
  so.max_depth = deps_.config->http.max_depth;
  return so;
}

Status RunningFlow::start(bool paused) {
  if (Status s = deps_.bus->ensure_flow_stream(name()); !s) return s;
  // The source first (it shortens spawn -> first 202): what it takes is safe in the stream
  // from here on, and the stage reads it once it runs, so a flow path answers before the
  // sinks, the stage and their consumers are up. A chained flow has no source: its stage
  // reads the other flow's sink queue.
  const bool has_source = !std::holds_alternative<flows::FlowSourceSpec>(flow_->source());
  if (has_source) {
    if (Status s = start_source(); !s) return s;
    log::startup("source of flow " + name() + " started");
  }
  Status s = start_pipeline(paused);
  if (!s && has_source) stop_source();  // no route left behind pointing at a flow that is not there
  return s;
}

Status RunningFlow::start_pipeline(bool paused) {
  const StageOptions so = stage_options();
  if (Status s = start_sinks(so); !s) return s;
  if (Status s = start_stage(so, paused); !s) return s;
  if (deps_.registry) {
    // From here on the registry decides which version runs (watch + pause barrier).
    if (Status s = deps_.registry->follow_flow(name(), versions_.get()); !s) return s;
    followed_ = true;
  }
  return Status::ok();
}

Status RunningFlow::start_sinks(const StageOptions& options) {
  for (const auto& spec : flow_->sinks()) {
    // A `flow` sink has no stage: the chained flow's stage reads weir.<flow>.out.<sink>.
    if (std::holds_alternative<flows::FlowSinkSpec>(spec.kind)) continue;
    auto sink = deps_.connectors->make_sink(*flow_, spec, *deps_.config);
    if (!sink) return sink.status();
    StageOptions sink_options = options;
    // A delivery the stage holds is kept alive with in-progress acks, however long its
    // sink takes (docs/adr/0293-in-progress-acks.md): AckWait is how long a peer waits for
    // the deliveries of an instance that died, not a bound on the sink's timeout.
    sink_options.sink_ack_wait = kSinkAckWait;
    auto stage = std::make_unique<SinkStage>(*deps_.bus, *deps_.dlq, *deps_.metrics, name(), flow_->version(),
                                             spec.name, std::move(sink.value()), sink_options);
    if (Status s = stage->start(); !s) return s;
    sinks_.push_back(std::move(stage));
  }
  return Status::ok();
}

Status RunningFlow::start_stage(const StageOptions& options, bool paused) {
  if (const auto* chained = std::get_if<flows::FlowSourceSpec>(&flow_->source())) {
    // `from: {flow: other.sink}`: read the other flow's sink queue straight off the bus.
    if (Status s = deps_.bus->ensure_flow_stream(chained->flow); !s) return s;
    stage_ = std::make_unique<FlowStage>(*deps_.bus, *deps_.dlq, *deps_.metrics, flow_, options,
                                         layout::flow_stream(chained->flow),
                                         layout::output_subject(chained->flow, chained->sink));
    // Its outputs fill its own stream, which no ingress guards: it waits at the backlog
    // bounds instead of being refused by a full stream (ADR 0080).
    if (deps_.backlog != nullptr) {
      auto own = deps_.backlog->watch(layout::flow_stream(name()), nullptr);
      stage_->set_output_full([own](std::string* why) { return own->full(why); });
    }
  } else {
    stage_ = std::make_unique<FlowStage>(*deps_.bus, *deps_.dlq, *deps_.metrics, flow_, options);
  }
  if (paused) stage_->pause(std::chrono::milliseconds(0));
  if (ClusterMembership* m = deps_.membership) stage_->set_gate([m] { return m->may_handle(); });
  return stage_->start();
}

Status RunningFlow::start_source() {
  auto source = deps_.connectors->make_source(*flow_, *deps_.config);
  if (!source) return source.status();
  if (source.value()->singleton() && deps_.singletons) {
    // One instance of the cluster runs it: a fresh inner source per lease term.
    auto flow = flow_;
    FlowDeps deps = deps_;
    source_ = deps_.singletons->singleton("source." + name(), [deps, flow]() -> std::unique_ptr<Source> {
      auto s = deps.connectors->make_source(*flow, *deps.config);
      return s ? std::move(s.value()) : nullptr;
    });
  } else {
    source_ = std::move(source.value());
  }
  ingest_ = std::make_unique<FlowIngest>(*deps_.bus, *deps_.dlq, *deps_.metrics, name());
  ingest_->set_loop_publisher(deps_.ingress_pub);
  ingest_->set_backlog(deps_.backlog->watch(layout::flow_stream(name()), &deps_.metrics->stage(name(), "ingress")));
  source_ctx_.flow = name();
  source_ctx_.ingest = ingest_.get();
  source_ctx_.http = deps_.router;
  source_ctx_.state = deps_.state;  // a singleton's inner sources get it too
  source_ctx_.max_depth = deps_.config->http.max_depth;
  return source_->start(source_ctx_);
}

bool RunningFlow::healthy(std::string* why) const {
  if (!stage_ || !stage_->healthy()) {
    *why = "flow " + name() + " is not running";
    return false;
  }
  for (const auto& s : sinks_) {
    if (!s->healthy()) {
      *why = "a sink of flow " + name() + " is not running";
      return false;
    }
  }
  return true;
}

nlohmann::json sink_view_json(const std::string& flow, const std::string& sink, const SinkHealthView& v) {
  nlohmann::json j = {{"flow", flow},
                      {"sink", sink},
                      {"state", sink_state_name(v.state)},
                      {"probing", v.probing},
                      {"consecutive_failures", v.consecutive_failures},
                      {"transitions", v.transitions},
                      {"open_seconds", static_cast<double>(v.not_closed.count()) / 1000.0}};
  j["since"] = v.since_ms > 0 ? nlohmann::json(v.since_ms) : nlohmann::json(nullptr);
  j["next_probe"] = v.next_probe_ms > 0 ? nlohmann::json(v.next_probe_ms) : nlohmann::json(nullptr);
  j["last_error"] = v.last_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(v.last_error);
  // The health word and the results it comes from (docs/adr/0313-sink-health-from-recent-results.md).
  j["health"] = sink_health_word(v);
  j["recent"] = {{"seconds", kRecentResults.count()},
                 {"delivered", v.recent_delivered},
                 {"failed", v.recent_failed},
                 {"failure_share", recent_failure_share(v)}};
  return j;
}

void RunningFlow::degraded(std::vector<std::string>& out) const {
  for (const auto& s : sinks_) {
    const auto link = s->broker_link();
    if (!link || link->connected || link->since_ms == 0) continue;  // 0: the first connect is under way
    std::string line = "sink " + s->name() + " of flow " + name() + ": broker " + link->broker + " is not connected";
    if (!link->last_error.empty()) line += " (" + link->last_error + ")";
    out.push_back(std::move(line));
  }
}

// A broker sink's "connection" (docs/adr/0315-broker-sink-health.md); HTTP sinks have none.
static nlohmann::json broker_link_json(const BrokerLink& l) {
  nlohmann::json j = {{"broker", l.broker}, {"connected", l.connected}};
  j["since"] = l.since_ms > 0 ? nlohmann::json(l.since_ms) : nlohmann::json(nullptr);
  j["last_error"] = l.last_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(l.last_error);
  return j;
}

void RunningFlow::describe_sinks(nlohmann::json& out) const {
  const auto now = std::chrono::steady_clock::now();
  for (const auto& s : sinks_) {
    nlohmann::json j = sink_view_json(name(), s->name(), s->health()->view(now));
    // This process's counts since it started, as /metrics has them for stage="sink:<name>".
    const StageMetrics& m = deps_.metrics->stage(name(), "sink:" + s->name());
    j["delivered"] = m.acked.load();
    j["errors"] = m.errors.load();
    j["dead"] = m.dead.load();
    j["lag"] = m.lag.load();
    if (const auto link = s->broker_link()) j["connection"] = broker_link_json(*link);
    out.push_back(std::move(j));
  }
}

ControlResult RunningFlow::control_sink(const std::string& sink, bool pause) {
  for (const auto& s : sinks_) {
    if (s->name() != sink) continue;
    const bool changed = pause ? s->pause() : s->resume();
    auto j = sink_view_json(name(), sink, s->health()->view(std::chrono::steady_clock::now()));
    j["changed"] = changed;
    return ControlResult::done(j);
  }
  return ControlResult::failed(Outcome::kNotFound, "flow " + name() + " has no sink " + sink + " on this instance");
}

nlohmann::json RunningFlow::describe() const {
  nlohmann::json sinks = nlohmann::json::array();
  for (const auto& s : flow_->sinks()) sinks.push_back(s.name);
  auto running_flow = stage_ ? stage_->flow() : flow_;
  const int64_t version = version_.load();
  nlohmann::json j = {{"name", name()},
                      {"active_version", version},
                      {"latest_version", version},
                      {"running_version", stage_ && stage_->paused() ? 0 : version},
                      {"running_since_ms", switched_at_ms_.load()},
                      {"hash", running_flow->content_hash()},
                      {"file", flow_->file()},
                      {"source", source_kind(flow_->source())},
                      {"sinks", sinks},
                      {"running", stage_ && stage_->healthy()}};
  if (const auto* h = std::get_if<flows::HttpSourceSpec>(&flow_->source())) j["path"] = h->path_shown;
  const StageMetrics& m = deps_.metrics->stage(name(), "flow");
  j["received"] = m.received.load();
  j["acked"] = m.acked.load();
  j["errors"] = m.errors.load();
  j["dead"] = m.dead.load();
  j["lag"] = m.lag.load();
  if (deps_.registry) {
    // The registry's view: what is active for the cluster, what was deployed last.
    nlohmann::json r = deps_.registry->describe(name());
    for (auto it = r.begin(); it != r.end(); ++it) j[it.key()] = it.value();
  }
  return j;
}

ControlResult RunningFlow::replace_file(const std::string& body, std::chrono::milliseconds pause_timeout) {
  const int64_t version = version_.load() + 1;
  // Compiled before the file is touched: a version that cannot run leaves it as it was.
  if (Status s = versions_->load(version, body); !s) return ControlResult::failed(Outcome::kInvalid, s.message());
  // Kept before the file changes: a number answered is one a restart runs as.
  if (Status s = keep_version(*deps_.config, name(), version, versions_->hash(version)); !s)
    return ControlResult::from(s);
  if (Status s = write_file_atomically(path_, body, "replace"); !s) return ControlResult::from(s);
  if (!stage_->pause(pause_timeout)) {
    versions_->resume(version_.load());
    return ControlResult::failed(Outcome::kUnavailable,
                                 "the running batch did not finish in time; the file is written, restart to run it");
  }
  versions_->resume(version);
  log::info("flow replaced", {{"flow", name()}, {"file", path_}, {"version", std::to_string(version)}});
  return ControlResult::created({{"flow", name()}, {"version", version}, {"file", path_}});
}

Status RunningFlow::switch_to_file(const std::string& text, std::chrono::milliseconds pause_timeout) {
  const int64_t version = version_.load() + 1;
  if (Status s = versions_->load(version, text); !s) return s;
  if (Status s = keep_version(*deps_.config, name(), version, versions_->hash(version)); !s) return s;
  if (!stage_->pause(pause_timeout)) {
    versions_->resume(version_.load());
    return Status::unavailable("the running batch did not finish in time; the old version runs on");
  }
  versions_->resume(version);
  return Status::ok();
}

void RunningFlow::stop_source() {
  if (source_) source_->stop();
}

void RunningFlow::request_stop() {
  if (stage_) stage_->request_stop();
  for (auto& s : sinks_) s->request_stop();
}

void RunningFlow::stop_within(std::vector<std::thread>& stoppers, std::chrono::milliseconds sink_budget) {
  if (stage_)
    stoppers.emplace_back([stage = stage_.get()] {
      pthread_setname_np(pthread_self(), "weir-stop");
      stage->stop();
    });
  for (auto& s : sinks_)
    stoppers.emplace_back([sink = s.get(), sink_budget] {
      pthread_setname_np(pthread_self(), "weir-stop");
      sink->stop_within(sink_budget);
    });
}

void RunningFlow::stop() {
  stop_source();
  if (stage_) stage_->stop();
  for (auto& s : sinks_) s->stop();
}

}  // namespace weir

#include "runtime/runtime.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <shared_mutex>
#include <fstream>
#include <sstream>
#include <thread>

#include <yaml-cpp/yaml.h>

#include "runtime/admin.h"
#include "runtime/backpressure.h"
#include "runtime/bus.h"
#include "runtime/dlq.h"
#include "runtime/embedded_nats.h"
#include "runtime/http_router.h"
#include "runtime/http_server.h"
#include "runtime/ingest.h"
#include "runtime/loop_publisher.h"
#include "runtime/log.h"
#include "runtime/kv_tables.h"
#include "runtime/metrics.h"
#include "runtime/stage.h"
#include "runtime/trace_export.h"
#include "runtime/state_store.h"

namespace weir {
namespace fs = std::filesystem;

namespace {
// Spec §2: 2 for a usage or configuration error (a malformed address, a bad flow), 1 for
// a runtime failure (a port someone else holds, an unreachable service).
int exit_code_for(const Status& s) { return s.code() == Status::Code::kInvalid ? 2 : 1; }

std::chrono::milliseconds sink_timeout(const flows::SinkSpec& s) {
  if (const auto* h = std::get_if<flows::HttpSinkSpec>(&s.kind)) return h->timeout;
  return std::chrono::milliseconds(5000);
}

const char* source_kind(const flows::SourceSpec& s) {
  static const char* kNames[] = {"http", "mqtt", "nats", "timer", "poll", "exec", "flow"};
  return kNames[s.index()];
}

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found("cannot read " + path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A live version switch swaps the compiled steps only: the source and the sinks (their
// stages, connections, consumers) stay. So a new version must keep `from:` and `to:` as
// they are, byte for byte once parsed (docs/adr/0042-version-registry.md).
// A YAML node as text that ignores how it was written: flow or block style, quoted or
// plain scalars, key order (`path: "/in/x"` and `path: /in/x` are the same wiring).
std::string canonical(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar: return "s" + std::to_string(n.Scalar().size()) + ":" + n.Scalar();
    case YAML::NodeType::Sequence: {
      std::string out = "[";
      for (const auto& e : n) out += canonical(e) + ",";
      return out + "]";
    }
    case YAML::NodeType::Map: {
      std::map<std::string, std::string> sorted;
      for (const auto& kv : n) sorted[canonical(kv.first)] = canonical(kv.second);
      std::string out = "{";
      for (const auto& [k, v] : sorted) out += k + "=" + v + ",";
      return out + "}";
    }
    default: return "~";
  }
}

Status same_wiring(const std::string& old_text, const std::string& new_text) {
  try {
    YAML::Node a = YAML::Load(old_text), b = YAML::Load(new_text);
    for (const char* key : {"flow", "from", "to"}) {
      if (canonical(a[key]) != canonical(b[key])) {
        return Status::invalid(std::string(key) + ": a new version must keep `" + key +
                               "` as the running one has it (a live switch replaces the steps only; "
                               "restart weir to change the source or the sinks)");
      }
    }
  } catch (const YAML::Exception& e) {
    return Status::invalid(std::string("cannot compare with the running version: ") + e.what());
  }
  return Status::ok();
}

// The compiled flow of one version; `path` places its tables' files. `local`: the text
// is the flow file on this server (its tables may name files, `${NAME}` reads the
// environment); otherwise it came over the network — a deploy or a registry version
// other than the file — and gets inline tables only and `${NAME}` only in from:/to:
// (docs/adr/0101-network-deploys.md).
Result<std::shared_ptr<const flows::Flow>> compile(const std::string& text, const std::string& path, int64_t version,
                                                    bool local) {
  flows::LoadOptions lo;
  lo.allow_table_files = local;
  lo.substitute_env = local;
  auto r = flows::load_flow_text(text, path, lo);
  if (!r.flow) {
    std::string errors;
    for (const auto& d : r.diagnostics) errors += (errors.empty() ? "" : "\n") + d.str();
    return Status::invalid(errors);
  }
  // Fresh and not shared yet: the one moment the version may be set.
  const_cast<flows::Flow&>(*r.flow).set_version(version);
  return r.flow;
}
}  // namespace

struct Runtime::Impl final : AdminBackend {
  RuntimeConfig config;
  ConnectorFactory& connectors;
  Metrics metrics;
  // Declared early so it is destroyed late: stages record into it until they stop.
  std::unique_ptr<trace::SpanExporter> tracer;   // OTLP export (ADR 0141); null when off
  IoLoop io;
  HttpRouter router;
  std::unique_ptr<HttpServer> admin_server, ingress_server;
  std::unique_ptr<Admin> admin;
  std::unique_ptr<EmbeddedNats> nats;
  std::unique_ptr<Bus> bus;
  std::unique_ptr<LoopPublisher> ingress_pub;   // http-in's own connection on the io thread (ADR 0130)
  std::unique_ptr<DeadLetters> dlq;
  std::unique_ptr<BacklogMonitor> backlog;   // ingress backpressure (ADR 0080)
  std::unique_ptr<StateStore> state;   // sources' durable state, e.g. poll cursors (weir_state KV)
  std::unique_ptr<KvTables> kv_tables;   // `tables: {t: {kv: NAME}}` (ADR 0120)

  struct FlowRuntime;
  // The registry's handle on one running flow (FlowControl; ADR 0042): compiled versions
  // wait here until resume() swaps them into the stage.
  struct VersionControl final : FlowControl {
    FlowRuntime* fr = nullptr;
    std::mutex mu;
    std::map<int64_t, std::shared_ptr<const flows::Flow>> ready;   // GUARDED_BY(mu)
    std::map<int64_t, std::string> texts;                           // GUARDED_BY(mu)

    bool pause(std::chrono::milliseconds timeout) override { return fr->stage->pause(timeout); }
    Status load(int64_t version, const std::string& text) override {
      std::string running_text;
      {
        std::lock_guard lock(mu);
        if (ready.count(version)) return Status::ok();
        running_text = texts[fr->version.load()];
      }
      if (!running_text.empty()) {
        if (Status s = same_wiring(running_text, text); !s) return s;
      }
      auto file = read_file(fr->path);
      auto f = compile(text, fr->path, version, file && file.value() == text);
      if (!f) return f.status();
      std::lock_guard lock(mu);
      ready[version] = f.value();
      texts[version] = text;
      return Status::ok();
    }
    void resume(int64_t version) override {
      std::shared_ptr<const flows::Flow> f;
      {
        std::lock_guard lock(mu);
        auto it = ready.find(version);
        if (it != ready.end()) f = it->second;
      }
      if (!f) return;   // the registry loads before it resumes
      fr->stage->resume(f);
      fr->version = version;
      fr->switched_at_ms = wall_ms();
    }
  };

  struct FlowRuntime {
    std::shared_ptr<const flows::Flow> flow;
    std::atomic<int64_t> version{1};        // the version the stage runs
    std::atomic<int64_t> switched_at_ms{0};
    std::string path;                       // its file in the flows dir (tables are read next to it)
    VersionControl control;
    std::unique_ptr<FlowIngest> ingest;
    SourceContext source_ctx;
    std::unique_ptr<Source> source;
    std::unique_ptr<FlowStage> stage;
    std::vector<std::unique_ptr<SinkStage>> sinks;
  };
  std::vector<std::unique_ptr<FlowRuntime>> running;   // GUARDED_BY(running_mu) once serving
  // A deploy of a new flow adds to `running` while the io thread (/readyz) and the admin
  // worker read it: writers hold running_mu exclusively, readers shared. lifecycle_mu
  // orders such a start against drain() (no flow starts once draining).
  mutable std::shared_mutex running_mu;
  std::mutex lifecycle_mu;
  std::vector<std::unique_ptr<FlowRuntime>> parked;   // failed to start after the registry followed them
  std::atomic<bool> serving{false};   // set once http-in listens; cleared on drain
  std::atomic<bool> draining{false};
  // SIGTERM/SIGINT, taken by the signal thread from the start, so a signal during start-up
  // (NATS still coming up, flows starting) stops weir cleanly too (exit 0).
  std::mutex signal_mu;
  std::condition_variable signal_cv;
  std::atomic<int> signal_taken{0};

  bool stop_requested() const { return signal_taken.load() != 0; }

  ClusterHooks* cluster = nullptr;   // set only when clustered

  // The bound listen addresses (port 0 resolved), for GET /status.
  mutable std::mutex listen_mu;
  std::string listen_http, listen_admin;   // GUARDED_BY(listen_mu)
  nlohmann::json listen_addresses() const {
    std::lock_guard lock(listen_mu);
    return {{"http", listen_http}, {"admin", listen_admin}};
  }

  Impl(RuntimeConfig c, ConnectorFactory& f, ClusterHooks* h) : config(std::move(c)), connectors(f) {
    if (!config.cluster.name.empty()) cluster = h;
  }

  bool clustered() const { return cluster != nullptr; }

  FlowRuntime* find_running(const std::string& name) const {
    std::shared_lock lock(running_mu);
    for (const auto& f : running) {
      if (f->flow->name() == name) return f.get();
    }
    return nullptr;
  }

  // ---- AdminBackend ----
  bool ready(std::string* why) const override {
    if (!serving.load()) {
      *why = draining.load() ? "shutting down" : "starting";
      return false;
    }
    if (!bus || !bus->connected() || (ingress_pub && !ingress_pub->connected())) {
      *why = "NATS is not connected";
      return false;
    }
    std::shared_lock lock(running_mu);
    for (const auto& f : running) {
      if (!f->stage || !f->stage->healthy()) {
        *why = "flow " + f->flow->name() + " is not running";
        return false;
      }
      for (const auto& s : f->sinks) {
        if (!s->healthy()) {
          *why = "a sink of flow " + f->flow->name() + " is not running";
          return false;
        }
      }
    }
    return true;
  }

  nlohmann::json flow_json(const FlowRuntime& f) const {
    nlohmann::json sinks = nlohmann::json::array();
    for (const auto& s : f.flow->sinks()) sinks.push_back(s.name);
    auto running_flow = f.stage ? f.stage->flow() : f.flow;
    nlohmann::json j = {{"name", f.flow->name()},
                        {"active_version", f.version.load()},
                        {"latest_version", f.version.load()},
                        {"running_version", f.stage && f.stage->paused() ? 0 : f.version.load()},
                        {"running_since_ms", f.switched_at_ms.load()},
                        {"hash", running_flow->content_hash()},
                        {"file", f.flow->file()},
                        {"source", source_kind(f.flow->source())},
                        {"sinks", sinks},
                        {"running", f.stage && f.stage->healthy()}};
    if (const auto* h = std::get_if<flows::HttpSourceSpec>(&f.flow->source())) j["path"] = h->path;
    if (auto* m = metrics_of(f.flow->name())) {
      j["received"] = m->received.load();
      j["acked"] = m->acked.load();
      j["errors"] = m->errors.load();
      j["dead"] = m->dead.load();
      j["lag"] = m->lag.load();
    }
    if (clustered()) {
      // The registry's view: what is active for the cluster, what was deployed last.
      nlohmann::json r = cluster->describe(f.flow->name());
      for (auto it = r.begin(); it != r.end(); ++it) j[it.key()] = it.value();
    }
    return j;
  }
  StageMetrics* metrics_of(const std::string& flow) const {
    return &const_cast<Metrics&>(metrics).stage(flow, "flow");
  }
  nlohmann::json flows_json() const {
    nlohmann::json out = nlohmann::json::array();
    std::shared_lock lock(running_mu);
    for (const auto& f : running) out.push_back(flow_json(*f));
    return out;
  }
  nlohmann::json flows() const override { return flows_json(); }
  std::optional<nlohmann::json> flow(const std::string& name) const override {
    std::shared_lock lock(running_mu);
    for (const auto& f : running) {
      if (f->flow->name() == name) return flow_json(*f);
    }
    return std::nullopt;
  }
  // Deploy (spec §5; ADR 0042, 0043). Clustered: the KV registry stores the next version
  // and no local file is written — a call asking to write one (`?target=file`) is 409.
  // Standalone: the flow file in the flows dir is replaced and the running flow switches
  // to it with the same pause as a promote.
  std::pair<int, nlohmann::json> deploy(const std::string& name, const std::string& body,
                                        const std::string& target) override {
    if (target != "" && target != "file" && target != "registry") {
      return {400, {{"error", "target must be file or registry"}}};
    }
    if (clustered() && target == "file") {
      return {409, {{"error", "this instance is in cluster " + config.cluster.name +
                                  ": the KV registry is the source of truth, so no local flow file is "
                                  "written (the file is left as it is); deploy without target=file"}}};
    }
    if (!clustered() && target == "registry") {
      return {409, {{"error", "the version registry needs cluster mode (--cluster NAME)"}}};
    }
    FlowRuntime* fr = find_running(name);
    if (fr) {
      std::string running_text;
      {
        std::lock_guard lock(fr->control.mu);
        running_text = fr->control.texts[fr->version.load()];
      }
      // Before compiling: from:/to: (the only place `${NAME}` is substituted in a network
      // deploy) must be the running version's, so no error can quote a substituted value.
      if (Status s = same_wiring(running_text, body); !s) {
        return {422, {{"error", "cannot switch to this version live"}, {"errors", {name + ".yaml: " + s.message()}}}};
      }
    }
    // Sent over the network: no table files, no environment outside from:/to:.
    auto compiled = compile(body, name + ".yaml", 0, false);
    if (!compiled) {
      nlohmann::json errors = nlohmann::json::array();
      std::istringstream lines(compiled.status().message());
      for (std::string line; std::getline(lines, line);) errors.push_back(line);
      nlohmann::json answer = {{"error", "the flow file is not valid"}, {"errors", errors}};
      if (compiled.status().message().find("table files are not allowed") != std::string::npos) {
        answer["hint"] = "a flow sent over the admin API may not name files on the server (it would let an API "
                         "caller read any file weir can read): give the table's rows inline (rows:) or use a kv: "
                         "table; a flow with table files starts from the flows dir";
      }
      return {422, answer};
    }
    const auto& flow = *compiled.value();
    if (flow.name() != name) {
      return {422, {{"error", "the file's flow is named " + flow.name() + ", not " + name},
                    {"errors", {name + ".yaml: flow: " + flow.name() + " does not match /flows/" + name}}}};
    }
    if (!fr && !clustered()) return start_new_flow(name, body);   // ADR 0121
    if (!fr) {
      // Cluster: stored as the flow's next version; a promote makes it active and every
      // instance starts it (they watch the registry, ADR 0121).
      if (auto bad = wiring_conflict(flow)) return *bad;
      auto a = cluster->deploy(name, body, flow.content_hash());
      if (a.code < 300) {
        a.body["hint"] = "flow " + name + " runs on no instance yet: promote this version to start it on every instance";
      }
      return {a.code, a.body};
    }
    // A `kv:` table the new version names first is read before it runs here.
    if (Status s = kv_tables->wait_loaded(std::chrono::seconds(10)); !s) return {503, {{"error", s.message()}}};
    if (clustered()) {
      auto a = cluster->deploy(name, body, flow.content_hash());
      return {a.code, a.body};
    }
    return deploy_to_file(*fr, body);
  }

  // Why a flow that does not run yet could not start next to the running ones: its http
  // path is taken (409), or its chained source is not a running flow's free `flow` sink.
  std::optional<std::pair<int, nlohmann::json>> wiring_conflict(const flows::Flow& flow) const {
    using Answer = std::pair<int, nlohmann::json>;
    std::shared_lock lock(running_mu);
    for (const auto& f : running) {
      const auto* mine = std::get_if<flows::HttpSourceSpec>(&flow.source());
      const auto* theirs = std::get_if<flows::HttpSourceSpec>(&f->flow->source());
      if (mine && theirs && mine->path == theirs->path) {
        return Answer{409, {{"error", "from.http.path: " + mine->path + " is used by flow " + f->flow->name()}}};
      }
    }
    if (const auto* c = std::get_if<flows::FlowSourceSpec>(&flow.source())) {
      const FlowRuntime* from = nullptr;
      for (const auto& f : running) {
        if (f->flow->name() == c->flow) from = f.get();
        const auto* other = std::get_if<flows::FlowSourceSpec>(&f->flow->source());
        if (other && other->flow == c->flow && other->sink == c->sink) {
          return Answer{409, {{"error", "from.flow: " + c->flow + "." + c->sink + " is read by flow " +
                                            f->flow->name() + " already (a flow sink feeds one flow)"}}};
        }
      }
      bool has_sink = false;
      if (from) {
        for (const auto& spec : from->flow->sinks()) {
          has_sink = has_sink || (spec.name == c->sink && std::holds_alternative<flows::FlowSinkSpec>(spec.kind));
        }
      }
      if (!has_sink) {
        return Answer{422, {{"error", "from.flow: " + c->flow + "." + c->sink + " is not a running flow's `flow: {}` sink"}}};
      }
    }
    return std::nullopt;
  }

  // Cluster (ADR 0121): a flow active in the registry that this instance does not run —
  // activated by a promote after start, or active before this instance started without a
  // file in its flows dir — is started here from the registry's text (no file is written:
  // the registry is the source of truth, ADR 0043). Runs on the registry's watch thread.
  void start_registry_flow(const std::string& name) {
    if (find_running(name)) return;
    // Never block a drain: it stops this watch (and waits for this call) while holding
    // lifecycle_mu.
    std::unique_lock life(lifecycle_mu, std::defer_lock);
    while (!life.try_lock()) {
      if (draining.load()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (draining.load() || find_running(name)) return;
    auto active = cluster->attach_flow(name, "", "");
    if (!active) {
      log::warn("cannot read a flow from the registry", {{"flow", name}, {"error", active.status().message()}});
      return;
    }
    const std::string path = (fs::path(config.flows) / (name + ".yaml")).string();
    auto compiled = compile(active->text, path, active->version, false);
    if (!compiled) {
      log::error("a flow active in the registry cannot run here",
                 {{"flow", name}, {"version", std::to_string(active->version)}, {"error", compiled.status().message()}});
      return;
    }
    if (auto bad = wiring_conflict(*compiled.value())) {
      log::error("a flow active in the registry cannot run here",
                 {{"flow", name}, {"error", bad->second.value("error", std::string())}});
      return;
    }
    if (Status s = kv_tables->wait_loaded(std::chrono::seconds(10)); !s) {
      log::warn("flow starts before its tables are read", {{"flow", name}, {"error", s.message()}});
    }
    if (Status s = start_flow(compiled.value(), active->text, active->pausing); !s) {
      log::error("cannot start a flow from the registry", {{"flow", name}, {"error", s.message()}});
      return;
    }
    log::info("flow started from the registry", {{"flow", name}, {"version", std::to_string(active->version)}});
  }

  // Standalone deploy of a flow that does not run yet (ADR 0121): the file is written into
  // the flows dir (so a restart runs it too) and the flow is started like one loaded at
  // start. Checked first, so a refused flow leaves no file and starts nothing: the http
  // path and the flow name are not taken (running, or by another file in the flows dir),
  // a chained source reads a running flow's `flow` sink no other flow reads.
  std::pair<int, nlohmann::json> start_new_flow(const std::string& name, const std::string& body) {
    std::lock_guard life(lifecycle_mu);
    if (draining.load() || !serving.load()) {
      return {503, {{"error", "weir is starting or shutting down; deploy again once it is ready"}}};
    }
    if (find_running(name)) {
      return {409, {{"error", "flow " + name + " was started by another deploy meanwhile; deploy again to replace it"}}};
    }
    const std::string path = (fs::path(config.flows) / (name + ".yaml")).string();
    auto compiled = compile(body, path, 1, false);
    if (!compiled) return {422, {{"error", compiled.status().message()}}};
    auto flow = compiled.value();
    auto conflict = [](std::string message) { return std::pair<int, nlohmann::json>{409, {{"error", std::move(message)}}}; };
    if (auto bad = wiring_conflict(*flow)) return *bad;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(config.flows, ec)) {
      const auto ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".yaml" && ext != ".yml" && ext != ".json") || e.path() == fs::path(path)) {
        continue;
      }
      auto other = flows::load_flow_file(e.path().string());
      if (other.flow && other.flow->name() == name) {
        return conflict("the flows dir holds flow " + name + " in " + e.path().string() +
                        " (it does not run: fix or remove that file first)");
      }
    }
    // Its KV tables (watched since the compile named them) are read before it starts.
    if (Status s = kv_tables->wait_loaded(std::chrono::seconds(10)); !s) return {503, {{"error", s.message()}}};
    const std::string tmp = path + ".tmp-deploy";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << body;
      if (!out.flush()) return {500, {{"error", "cannot write " + tmp}}};
    }
    fs::rename(tmp, path, ec);
    if (ec) {
      fs::remove(tmp, ec);
      return {500, {{"error", "cannot write " + path}}};
    }
    if (Status s = start_flow(flow, body); !s) {
      fs::remove(path, ec);   // a restart must not start what did not start now
      log::warn("new flow not started", {{"flow", name}, {"error", s.message()}});
      return {s.code() == Status::Code::kConflict ? 409 : s.code() == Status::Code::kInvalid ? 422 : 503,
              {{"error", "flow " + name + " did not start: " + s.message() + " (its file was not kept)"}}};
    }
    log::info("flow started", {{"flow", name}, {"file", path}});
    return {201, {{"flow", name}, {"version", 1}, {"file", path}, {"started", true}}};
  }

  std::pair<int, nlohmann::json> deploy_to_file(FlowRuntime& fr, const std::string& body) {
    const std::string path = fr.path;
    const std::string tmp = path + ".tmp-deploy";
    const int64_t version = fr.version.load() + 1;
    // Compiled before the file is touched: a version that cannot run leaves it as it was.
    if (Status s = fr.control.load(version, body); !s) return {422, {{"error", s.message()}}};
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << body;
      if (!out.flush()) return {500, {{"error", "cannot write " + tmp}}};
    }
    std::error_code ec;
    fs::rename(tmp, path, ec);   // atomic: a reader sees the old file or the new one
    if (ec) {
      fs::remove(tmp, ec);
      return {500, {{"error", "cannot replace " + path}}};
    }
    if (!fr.stage->pause(config.drain_timeout)) {
      fr.control.resume(fr.version.load());
      return {503, {{"error", "the running batch did not finish in time; the file is written, restart to run it"}}};
    }
    fr.control.resume(version);
    log::info("flow replaced", {{"flow", fr.flow->name()}, {"file", path}, {"version", std::to_string(version)}});
    return {201, {{"flow", fr.flow->name()}, {"version", version}, {"file", path}}};
  }

  std::pair<int, nlohmann::json> promote(const std::string& name, int64_t version, int64_t expected_active) override {
    if (!clustered()) {
      return {501, {{"error", "standalone weir keeps no versions to switch between: the file in the flows dir is "
                              "the one version of a flow and PUT /flows/" + name + " (weir deploy) replaces it. "
                              "Versions, promote and rollback need the cluster registry (run with --cluster NAME)"}}};
    }
    // A flow no instance runs yet is promoted too: its first active version starts it
    // everywhere (ADR 0121); the registry answers 404 for a flow it does not know.
    auto a = cluster->promote(name, version, expected_active);
    return {a.code, a.body};
  }
  std::pair<int, nlohmann::json> rollback(const std::string& name) override {
    if (!clustered()) {
      return {501, {{"error", "standalone weir keeps no versions to switch between: the file in the flows dir is "
                              "the one version of a flow and PUT /flows/" + name + " (weir deploy) replaces it. "
                              "Versions, promote and rollback need the cluster registry (run with --cluster NAME)"}}};
    }
    if (!find_running(name)) return {404, {{"error", "no flow named " + name + " runs here"}}};
    auto a = cluster->rollback(name);
    return {a.code, a.body};
  }
  nlohmann::json status() const override {
    nlohmann::json j = {{"flows", flows_json()},
                        {"nats", bus ? log::redact_url(bus->url()) : ""},
                        {"connected", bus && bus->connected()},
                        {"rss_bytes", process_rss_bytes()},
                        {"cluster", config.cluster.name},
                        {"listen", listen_addresses()}};
    if (clustered()) j["members"] = cluster->status();
    return j;
  }

  // ---- lifecycle ----
  Result<std::vector<std::shared_ptr<const flows::Flow>>> load_flows() {
    std::vector<std::shared_ptr<const flows::Flow>> out;
    std::error_code ec;
    if (!fs::is_directory(config.flows, ec)) {
      return Status::invalid("flows: " + config.flows + " is not a directory");
    }
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(config.flows, ec)) {
      auto ext = e.path().extension().string();
      if (e.is_regular_file() && (ext == ".yaml" || ext == ".yml" || ext == ".json")) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    std::string errors;
    std::map<std::string, std::string> names, paths;
    for (const auto& p : files) {
      auto r = flows::load_flow_file(p.string());
      for (const auto& d : r.diagnostics) errors += d.str() + "\n";
      if (!r.flow) continue;
      if (auto [it, fresh] = names.emplace(r.flow->name(), p.string()); !fresh) {
        errors += p.string() + ": flow: the name " + r.flow->name() + " is used by " + it->second + " too\n";
        continue;
      }
      if (const auto* h = std::get_if<flows::HttpSourceSpec>(&r.flow->source())) {
        if (auto [it, fresh] = paths.emplace(h->path, p.string()); !fresh) {
          errors += p.string() + ": from.http.path: " + h->path + " is used by " + it->second + " too\n";
          continue;
        }
      }
      out.push_back(r.flow);
    }
    // Chains: the referenced flow (when loaded here) must have that sink as a `flow` sink,
    // and only one flow may read it (its queue is a work queue).
    std::map<std::string, std::string> readers;
    for (const auto& f : out) {
      const auto* c = std::get_if<flows::FlowSourceSpec>(&f->source());
      if (!c) continue;
      std::string ref = c->flow + "." + c->sink;
      if (auto [it, fresh] = readers.emplace(ref, f->file()); !fresh) {
        errors += f->file() + ": from.flow: " + ref + " is read by " + it->second + " already\n";
      }
      for (const auto& g : out) {
        if (g->name() != c->flow) continue;
        bool found = false;
        for (const auto& s : g->sinks()) {
          if (s.name == c->sink) {
            found = true;
            if (!std::holds_alternative<flows::FlowSinkSpec>(s.kind)) {
              errors += f->file() + ": from.flow: " + ref + " is not a flow sink (write `" + c->sink +
                        ": { flow: {} }` in " + g->file() + ")\n";
            }
          }
        }
        if (!found) errors += f->file() + ": from.flow: flow " + c->flow + " has no sink " + c->sink + "\n";
      }
    }
    if (!errors.empty()) {
      errors.pop_back();
      return Status::invalid(errors);
    }
    return out;
  }

  Status connect_bus(const std::vector<std::shared_ptr<const flows::Flow>>& flows) {
    std::string url = config.nats.url;
    if (url.empty()) {
      auto n = EmbeddedNats::start(config.data_dir);
      if (!n) return n.status();
      nats = std::move(n.value());
      url = nats->url();
      config.nats.url = url;   // the nats source and sink open their own connection to it
    }
    BusOptions bo;
    bo.url = url;
    bo.creds_file = config.nats.creds;
    bo.stream_replicas = config.nats.replicas;
    bo.stream_max_bytes = config.nats.stream_max_bytes;
    bo.delivery_threads = config.nats.delivery_threads;
    bo.name = "weir";
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      auto b = Bus::connect(bo);
      if (b) {
        bus = std::move(b.value());
        log::startup("NATS connected");
        std::vector<std::string> streams;   // their info is on its way while the rest connects (ADR 0215)
        for (const auto& f : flows) streams.push_back(layout::flow_stream(f->name()));
        bus->prefetch_setup(streams);
        break;
      }
      if (std::chrono::steady_clock::now() > deadline || stop_requested()) return b.status();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    {
      auto lp = LoopPublisher::connect(io, bus->options());
      if (!lp) return lp.status();
      ingress_pub = std::move(lp.value());
    }
    dlq = std::make_unique<DeadLetters>(*bus);
    if (clustered()) {
      // Before ADR 0112 clustered instances used the standalone names. Events left in such
      // a stream would never be read again: say so rather than start beside them.
      for (const auto& f : flows) {
        const std::string old = "weir_" + f->name();
        if (auto st = bus->stream_state(old); st && st->messages > 0) {
          return Status::invalid("stream " + old + " (the layout before cluster namespaces, ADR 0112) holds " +
                                 std::to_string(st->messages) + " events of flow " + f->name() +
                                 ": drain it with the previous weir, or delete it (nats stream rm " + old +
                                 "), then start again; cluster " + config.cluster.name + " now uses " +
                                 layout::flow_stream(f->name()));
        }
      }
    }
    {
      // Flow streams share what the server can reserve; dead letters are unlimited unless
      // dlq.max_bytes says otherwise (ADR 0090, 0110).
      std::vector<std::string> streams;
      for (const auto& f : flows) streams.push_back(layout::flow_stream(f->name()));
      if (Status s = bus->plan_stream_sizes(streams); !s) return s;
    }
    BackpressureOptions bp;
    // The backlog bound follows the stream size in force (it may have been shared out).
    bp.max_bytes = config.backlog.bytes_bound(bus->stream_max_bytes());
    if (bp.max_bytes + config.http.max_body > bus->stream_max_bytes()) {
      bp.max_bytes = std::max<int64_t>(bus->stream_max_bytes() / 4 * 3, 1);
      log::warn("backlog.max_bytes lowered to fit the flow streams", {{"max_bytes", std::to_string(bp.max_bytes)}});
    }
    bp.max_messages = config.backlog.max_events;
    bp.max_pending = config.backlog.max_pending;
    bp.max_delay = config.backlog.max_delay;
    backlog = std::make_unique<BacklogMonitor>(*bus, metrics, bp);
    if (Status s = bus->ensure_dlq_stream(config.dlq.max_age, config.dlq.max_bytes); !s) return s;
    {  // The KV bucket behind SourceState (poll cursors, ETags); NatsKv retries while a fresh
       // server or cluster does not answer yet or a peer is creating it (ADR 0110).
      StateStoreOptions so;
      so.bucket = layout::state_bucket();
      so.replicas = config.nats.replicas;
      auto st = StateStore::open(bus->connection(), so);
      if (!st) return st.status();
      state = std::move(st.value());
    }
    {  // KV lookup tables: every table a flow names is read before the flows start.
      KvTablesOptions to;
      to.replicas = config.nats.replicas;
      to.max_entries = static_cast<size_t>(config.tables.max_entries);
      to.max_value_bytes = static_cast<size_t>(config.tables.max_value_bytes);
      kv_tables = std::make_unique<KvTables>(bus->connection(), to);
      if (Status s = kv_tables->start(std::chrono::seconds(30)); !s) return s;
    }
    if (clustered()) return cluster->start(*bus, config);
    return Status::ok();
  }

  // `text` is the version's flow file; `paused`: a promote is at its barrier (ADR 0042).
  Status start_flow(std::shared_ptr<const flows::Flow> flow, const std::string& text = "", bool paused = false) {
    auto fr = std::make_unique<FlowRuntime>();
    fr->flow = flow;
    fr->version = flow->version();
    fr->switched_at_ms = wall_ms();
    fr->path = flow->file().empty() ? (fs::path(config.flows) / (flow->name() + ".yaml")).string() : flow->file();
    fr->control.fr = fr.get();
    fr->control.ready[flow->version()] = flow;
    fr->control.texts[flow->version()] = text;
    if (Status s = bus->ensure_flow_stream(flow->name()); !s) return s;
    StageOptions so;
    so.drain_timeout = config.drain_timeout;
    so.max_deliver = config.max_deliver;
    so.max_depth = config.http.max_depth;
    for (const auto& spec : flow->sinks()) {
      // A `flow` sink has no stage: the chained flow's stage reads weir.<flow>.out.<sink>.
      if (std::holds_alternative<flows::FlowSinkSpec>(spec.kind)) continue;
      auto sink = connectors.make_sink(*flow, spec, config);
      if (!sink) return sink.status();
      StageOptions sink_options = so;
      // A fetched delivery may wait in the stage for the ones ahead of it (up to one
      // sink timeout), then take its own timeout; 3 s of margin on top (ADR 0044).
      sink_options.sink_ack_wait = std::chrono::milliseconds(3000) + 2 * sink_timeout(spec);
      auto stage = std::make_unique<SinkStage>(*bus, *dlq, metrics, flow->name(), flow->version(), spec.name,
                                               std::move(sink.value()), sink_options);
      if (Status s = stage->start(); !s) return s;
      fr->sinks.push_back(std::move(stage));
    }
    if (const auto* chained = std::get_if<flows::FlowSourceSpec>(&flow->source())) {
      // `from: {flow: other.sink}`: read the other flow's sink queue straight off the bus.
      if (Status s = bus->ensure_flow_stream(chained->flow); !s) return s;
      fr->stage = std::make_unique<FlowStage>(*bus, *dlq, metrics, flow, so, layout::flow_stream(chained->flow),
                                              layout::output_subject(chained->flow, chained->sink));
      if (paused) fr->stage->pause(std::chrono::milliseconds(0));
      if (clustered()) fr->stage->set_gate([this] { return cluster->may_handle(); });
      if (Status s = fr->stage->start(); !s) return s;
      if (clustered()) {
        if (Status s = cluster->follow_flow(flow->name(), &fr->control); !s) return s;
      }
      std::unique_lock lock(running_mu);
      running.push_back(std::move(fr));
      return Status::ok();
    }
    fr->stage = std::make_unique<FlowStage>(*bus, *dlq, metrics, flow, so);
    if (paused) fr->stage->pause(std::chrono::milliseconds(0));
    if (clustered()) fr->stage->set_gate([this] { return cluster->may_handle(); });
    if (Status s = fr->stage->start(); !s) return s;
    if (clustered()) {
      // From here on the registry decides which version runs (watch + pause barrier).
      if (Status s = cluster->follow_flow(flow->name(), &fr->control); !s) return s;
    }
    // Followed by the registry from here: on a failure `fr` is parked, not destroyed (the
    // registry keeps its FlowControl until stop()).
    auto park = [&](Status s) {
      if (clustered()) parked.push_back(std::move(fr));
      return s;
    };
    auto source = connectors.make_source(*flow, config);
    if (!source) return park(source.status());
    if (source.value()->singleton() && clustered()) {
      // One instance of the cluster runs it: a fresh inner source per lease term.
      fr->source = cluster->singleton("source." + flow->name(), [this, flow]() -> std::unique_ptr<Source> {
        auto s = connectors.make_source(*flow, config);
        return s ? std::move(s.value()) : nullptr;
      });
    } else {
      fr->source = std::move(source.value());
    }
    fr->ingest = std::make_unique<FlowIngest>(*bus, *dlq, metrics, flow->name());
    fr->ingest->set_loop_publisher(ingress_pub.get());
    fr->ingest->set_backlog(backlog->watch(layout::flow_stream(flow->name()), &metrics.stage(flow->name(), "ingress")));
    fr->source_ctx.flow = flow->name();
    fr->source_ctx.ingest = fr->ingest.get();
    fr->source_ctx.http = &router;
    fr->source_ctx.state = state.get();   // a singleton's inner sources get it too
    fr->source_ctx.max_depth = config.http.max_depth;
    if (Status s = fr->source->start(fr->source_ctx); !s) return park(s);
    std::unique_lock lock(running_mu);
    running.push_back(std::move(fr));
    return Status::ok();
  }

  void drain() {
    auto started = std::chrono::steady_clock::now();
    draining = true;                      // first: a registry start waiting for the lock gives up
    std::lock_guard life(lifecycle_mu);   // a flow being started live finishes first; none after
    serving = false;
    router.set_draining();
    if (ingress_server) ingress_server->stop_accepting();
    for (auto& f : running) {
      if (f->source) f->source->stop();
    }
    // Let answers to requests already taken go out (their PubAcks are on the way).
    auto deadline = started + config.drain_timeout;
    auto pending = [&] { return (bus ? bus->pending_publishes() : 0) + (ingress_pub ? ingress_pub->pending() : 0); };
    while (pending() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    // Those still waiting get their 503 now, while the servers still write answers (C5).
    if (bus && bus->pending_publishes() > 0) bus->fail_pending("weir is shutting down");
    if (ingress_pub && ingress_pub->pending() > 0) ingress_pub->fail_pending("weir is shutting down");
    // Stages stop together: each finishes the batch in hand; sinks finish what is in flight.
    for (auto& f : running) {
      if (f->stage) f->stage->request_stop();
      for (auto& s : f->sinks) s->request_stop();
    }
    // Each stage stops on its own thread, so the slowest bounds the drain, not the sum; sinks
    // wait for their deliveries until drain_timeout less kSinkGrace (an HTTP sink's grace for
    // the requests on the wire, then they are abandoned as retries and redelivered later).
    constexpr auto kSinkGrace = std::chrono::milliseconds(1000);
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    left = std::max(std::chrono::milliseconds(0), left - kSinkGrace);
    std::vector<std::thread> stoppers;
    for (auto& f : running) {
      if (f->stage) stoppers.emplace_back([stage = f->stage.get()] { stage->stop(); });
      for (auto& s : f->sinks) stoppers.emplace_back([sink = s.get(), left] { sink->stop_within(left); });
    }
    for (auto& t : stoppers) t.join();
    // After the stages: until then this instance still handles events and a promoter
    // must keep waiting for it (ADR 0042).
    if (clustered()) cluster->stop();
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
    log::info("drained", {{"ms", std::to_string(ms.count())}});
  }

  int run() {
    log::Level level = log::Level::kInfo;
    log::Format format = log::Format::kText;
    log::parse_level(config.log.level, &level);
    log::parse_format(config.log.format, &format);
    log::configure(level, format);
    log::startup("config read");
    // Every stream, subject and bucket name carries the cluster (ADR 0112): fixed before
    // anything makes a name.
    if (!config.cluster.name.empty()) {
      if (std::string why = layout::invalid_cluster_name(config.cluster.name); !why.empty()) {
        std::fprintf(stderr, "%s: cluster.name: \"%s\" %s\n", config.config_file.empty() ? "weir" : config.config_file.c_str(),
                     config.cluster.name.c_str(), why.c_str());
        return 2;
      }
    }
    layout::set_cluster(config.cluster.name);
    if (!config.trace.otlp_endpoint.empty()) {
      tracer = std::make_unique<trace::SpanExporter>(trace::SpanExporter::Options{
          .endpoint = config.trace.otlp_endpoint,
          .service_name = config.trace.service_name,
          .max_queue = static_cast<size_t>(config.trace.max_queue)});
      tracer->start();
      trace::set_exporter(tracer.get());
    }

    auto loaded = load_flows();
    if (!loaded) {
      std::fprintf(stderr, "%s\n", loaded.status().message().c_str());
      return 2;
    }
    if (loaded->empty()) log::warn("no flows found", {{"dir", config.flows}});
    log::startup("flows compiled");

    // The signal thread: waits for SIGTERM/SIGINT (blocked in every thread by main). At the
    // end of run() a SIGTERM sent to it alone ends its wait when no signal came.
    std::atomic<bool> run_over{false};
    std::thread signal_thread([this, &run_over] {
      pthread_setname_np(pthread_self(), "weir-signals");
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGTERM);
      sigaddset(&set, SIGINT);
      pthread_sigmask(SIG_BLOCK, &set, nullptr);   // main blocks them too; sigwait needs it here
      int sig = 0;
      sigwait(&set, &sig);
      if (run_over.load()) return;
      {
        std::lock_guard lock(signal_mu);
        signal_taken = sig;
      }
      signal_cv.notify_all();
    });
    struct SignalThreadGuard {
      std::thread& t;
      std::atomic<bool>& over;
      Impl& impl;
      ~SignalThreadGuard() {
        over = true;
        if (!impl.stop_requested()) pthread_kill(t.native_handle(), SIGTERM);
        t.join();
      }
    } signal_guard{signal_thread, run_over, *this};
    auto stopped_during_start = [this]() {
      if (!stop_requested()) return false;
      log::info("signal received during start-up, stopping",
                {{"signal", signal_taken.load() == SIGTERM ? "SIGTERM" : "SIGINT"}});
      if (bus) drain();   // without NATS nothing has started yet
      return true;
    };

    std::string token;
    if (!config.admin.token_env.empty()) {
      const char* t = std::getenv(config.admin.token_env.c_str());
      if (!t || !*t) {
        std::fprintf(stderr, "%s: admin.token_env: environment variable %s is not set\n",
                     config.config_file.empty() ? "weir" : config.config_file.c_str(), config.admin.token_env.c_str());
        return 2;
      }
      token = t;
    }
    if (token.empty() && !is_loopback_listen(config.admin.listen)) {
      std::fprintf(stderr,
                   "%s: admin.listen %s is not a loopback address and no admin token is set: anyone who can "
                   "reach it could deploy flows and read dead letters. Set admin.token_env (Bearer token) or "
                   "listen on 127.0.0.1\n",
                   config.config_file.empty() ? "weir" : config.config_file.c_str(), config.admin.listen.c_str());
      return 2;
    }

    io.start();
    // Admin first: /healthz answers while NATS and the flows come up (the cold-start mark).
    admin = std::make_unique<Admin>(*this, metrics, nullptr, token);
    HttpServerOptions ao;
    ao.name = "admin";
    ao.listen = config.admin.listen;
    ao.max_body = 4 << 20;
    ao.max_connections = static_cast<size_t>(config.admin.max_connections);
    auto as = HttpServer::create(io, ao, admin->handler());
    if (!as) {
      log::error("cannot start the admin API", {{"error", as.status().message()}});
      return exit_code_for(as.status());
    }
    admin_server = std::move(as.value());
    // http-in is bound before NATS and the flows come up: its address is known at once
    // (port 0 picks a free one) and it answers 503 "starting" until the flows run.
    HttpServerOptions io_opts;
    io_opts.name = "ingress";
    io_opts.listen = config.http.listen;
    io_opts.max_body = config.http.max_body;
    io_opts.max_header = config.http.max_header;
    io_opts.read_timeout = config.http.read_timeout;
    io_opts.max_connections = static_cast<size_t>(config.http.max_connections);
    auto is = HttpServer::create(io, io_opts, [this](HttpRequest& req, Responder r) { router.handle(req, std::move(r)); });
    if (!is) {
      log::error("cannot start http-in", {{"error", is.status().message()}});
      return exit_code_for(is.status());
    }
    ingress_server = std::move(is.value());
    // Spec §2: the bound addresses, once, machine-readable.
    {
      std::lock_guard lock(listen_mu);
      listen_http = ingress_server->address();
      listen_admin = admin_server->address();
    }
    log::info("listening", {{"http", listen_http}, {"admin", listen_admin}});
    log::startup("listeners bound");

    if (Status s = connect_bus(loaded.value()); !s) {
      if (stopped_during_start()) return 0;
      // Connect errors say "connect to URL"; set-up errors name the stream and the key to change.
      log::error("NATS start-up failed", {{"error", s.message()}});
      return exit_code_for(s);
    }
    admin->set_dead_letters(dlq.get());
    admin->set_tables(kv_tables.get());
    log::startup("streams and buckets ready");
    if (stopped_during_start()) return 0;

    for (auto& f : loaded.value()) {
      std::string text;
      bool paused = false;
      if (clustered()) {
        // The registry's active version runs, not necessarily the file (ADR 0042).
        auto file_text = read_file(f->file());
        if (!file_text) {
          log::error("cannot start flow", {{"flow", f->name()}, {"error", file_text.status().message()}});
          drain();
          return 1;
        }
        auto active = cluster->attach_flow(f->name(), file_text.value(), f->content_hash());
        if (!active) {
          log::error("cannot read the flow registry", {{"flow", f->name()}, {"error", active.status().message()}});
          drain();
          return exit_code_for(active.status());
        }
        auto compiled = compile(active->text, f->file(), active->version, active->text == file_text.value());
        if (!compiled) {
          log::error("the active version does not compile here",
                     {{"flow", f->name()}, {"version", std::to_string(active->version)},
                      {"error", compiled.status().message()}});
          drain();
          return 2;
        }
        f = compiled.value();
        text = active->text;
        paused = active->pausing;
      } else {
        auto file_text = read_file(f->file());
        if (file_text) text = file_text.value();
      }
      if (Status s = start_flow(f, text, paused); !s) {
        log::error("cannot start flow", {{"flow", f->name()}, {"error", s.message()}});
        drain();
        return exit_code_for(s);
      }
      if (stopped_during_start()) return 0;
    }

    log::startup("flows started (consumers ready)");
    std::string routes;
    for (const auto& f : running) {   // before serving: no deploy adds to `running` yet
      if (const auto* h = std::get_if<flows::HttpSourceSpec>(&f->flow->source())) {
        routes += (routes.empty() ? "" : " ") + h->path + "=" + f->flow->name();
      }
    }
    const size_t started_flows = running.size();
    serving = true;
    router.set_serving();
    if (clustered()) {
      // Flows active in the registry but not in this flows dir start now; flows promoted for
      // the first time later start as they are (ADR 0121).
      if (Status s = cluster->watch_flows([this](const std::string& name) { start_registry_flow(name); }); !s) {
        log::warn("cannot watch the registry for new flows", {{"error", s.message()}});
      }
    }

    log::info("weir ready", {{"ingress", ingress_server->address()}, {"admin", admin_server->address()},
                             {"nats", log::redact_url(bus->url())}, {"flows", std::to_string(started_flows)}, {"routes", routes}});
    if (format == log::Format::kText) {
      // For a person at a terminal: where to POST. (With JSON logs the line above says it.)
      std::printf("weir ready — ingress http://%s  admin http://%s  nats %s\n", ingress_server->address().c_str(),
                  admin_server->address().c_str(), log::redact_url(bus->url()).c_str());
      std::shared_lock lock(running_mu);
      for (const auto& f : running) {
        if (const auto* h = std::get_if<flows::HttpSourceSpec>(&f->flow->source())) {
          std::printf("  POST http://%s%s  → flow %s\n", ingress_server->address().c_str(), h->path.c_str(),
                      f->flow->name().c_str());
        }
      }
    }
    std::fflush(stdout);

    int sig = 0;
    {
      std::unique_lock lock(signal_mu);
      signal_cv.wait(lock, [&] { return signal_taken.load() != 0; });
      sig = signal_taken.load();
    }
    log::info("signal received, draining", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
    drain();
    return 0;
  }

  ~Impl() {
    // Publish callbacks capture sources, ingest and stages: fail what is pending while
    // they exist, and every later publish at once (hot-path review C5).
    if (bus) bus->shutdown();
    if (ingress_pub) ingress_pub->shutdown();
    ingress_server.reset();
    for (auto& f : running) {
      if (f->source) f->source->stop();
      if (f->stage) f->stage->stop();
      for (auto& s : f->sinks) s->stop();
    }
    if (clustered()) cluster->stop();   // its watches call into `running`
    admin_server.reset();
    ingress_pub.reset();   // its connection runs on the io thread
    io.stop();
    admin.reset();
    running.clear();
    state.reset();   // before the connection it borrows
    backlog.reset();
    kv_tables.reset();
    bus.reset();
    if (nats) nats->stop();
  }
};

Runtime::Runtime(RuntimeConfig config, ConnectorFactory& connectors, ClusterHooks* cluster)
    : impl_(std::make_unique<Impl>(std::move(config), connectors, cluster)) {}
Runtime::~Runtime() = default;
int Runtime::run() { return impl_->run(); }

}  // namespace weir

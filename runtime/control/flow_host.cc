#include "runtime/control/flow_host.h"

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <thread>
#include <variant>

#include "runtime/flow/kv_tables.h"
#include "runtime/base/log.h"
#include "runtime/nats/loop_publisher.h"
#include "runtime/base/metrics.h"
#include "runtime/base/redact.h"

namespace weir {
namespace fs = std::filesystem;

namespace {
constexpr auto kTablesWait = std::chrono::seconds(10);

bool is_flow_file(const fs::directory_entry& e) {
  const auto ext = e.path().extension().string();
  return e.is_regular_file() && (ext == ".yaml" || ext == ".yml" || ext == ".json");
}

// A deployed flow that does not compile: each diagnostic a line, and a hint for table
// files (a flow sent over the API may not name files on the server).
ControlResult not_valid(const Status& s) {
  nlohmann::json errors = nlohmann::json::array();
  std::istringstream lines(s.message());
  for (std::string line; std::getline(lines, line);) errors.push_back(line);
  nlohmann::json body = {{"error", "the flow file is not valid"}, {"errors", errors}};
  if (s.message().find("table files are not allowed") != std::string::npos) {
    body["hint"] =
        "a flow sent over the admin API may not name files on the server (it would let an API "
        "caller read any file weir can read): give the table's rows inline (rows:) or use a kv: "
        "table; a flow with table files starts from the flows dir";
  }
  return {Outcome::kInvalid, body};
}

ControlResult no_versions(const std::string& name) {
  return ControlResult::failed(
      Outcome::kNotSupported,
      "standalone weir keeps no versions to switch between: the file in the flows dir is "
      "the one version of a flow and PUT /flows/" +
          name +
          " (weir deploy) replaces it. "
          "Versions, promote and rollback need the cluster registry (run with --cluster NAME)");
}
}  // namespace

FlowHost::FlowHost(const RuntimeConfig& config, ClusterHooks* cluster) : config_(config), cluster_(cluster) {}
FlowHost::~FlowHost() = default;

void FlowHost::connect(const FlowDeps& deps, KvTables* tables) {
  deps_ = deps;
  if (cluster_) {
    deps_.membership = cluster_;
    deps_.singletons = cluster_;
    deps_.registry = cluster_;
  }
  tables_ = tables;
  bus_ = deps.bus;
}

void FlowHost::set_listen(std::string http, std::string admin) {
  MutexLock lock(listen_mu_);
  listen_http_ = std::move(http);
  listen_admin_ = std::move(admin);
}

Result<FlowList> FlowHost::load() const {
  std::error_code ec;
  if (!fs::is_directory(config_.flows, ec)) {
    return Status::invalid("flows: " + config_.flows + " is not a directory");
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(config_.flows, ec)) {
    if (is_flow_file(e)) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::string errors;
  FlowList loaded;
  for (const auto& p : files) {
    auto r = flows::load_flow_file(p.string());
    for (const auto& d : r.diagnostics) errors += d.str() + "\n";
    if (r.flow) loaded.push_back(r.flow);
  }
  FlowList kept;
  Status set = check_flow_set(loaded, &kept);
  if (!set) errors += set.message() + "\n";
  if (!errors.empty()) {
    errors.pop_back();
    return Status::invalid(errors);
  }
  return kept;
}

// Standalone: the flow as the version number kept for its file (docs/admin-api.md "Flows"),
// compiled again when that is not 1.
std::shared_ptr<const flows::Flow> FlowHost::kept_version_of(const std::shared_ptr<const flows::Flow>& flow,
                                                             const Result<std::string>& file_text) const {
  const int64_t version = kept_version(config_, flow->name(), flow->content_hash());
  if (version == flow->version() || !file_text) return flow;
  auto compiled = compile_version(file_text.value(), flow->file(), version, TextOrigin::kLocal, config_.admin);
  return compiled ? compiled.value() : flow;
}

Status FlowHost::start_local(const std::shared_ptr<const flows::Flow>& flow) {
  auto file_text = read_text_file(flow->file());
  MutexLock life(lifecycle_mu_);  // uncontended: nothing else starts flows before serve()
  if (!clustered()) {
    Status s = start(kept_version_of(flow, file_text), file_text ? file_text.value() : "", false);
    if (!s) log::error("cannot start flow", {{"flow", flow->name()}, {"error", s.message()}});
    return s;
  }
  // The registry's active version runs, not necessarily the file (ADR 0042).
  if (!file_text) {
    log::error("cannot start flow", {{"flow", flow->name()}, {"error", file_text.status().message()}});
    return Status::internal(file_text.status().message());
  }
  auto active = cluster_->attach_flow(flow->name(), file_text.value(), flow->content_hash());
  if (!active) {
    log::error("cannot read the flow registry", {{"flow", flow->name()}, {"error", active.status().message()}});
    return active.status();
  }
  // The file's own text is local; another registry version is checked as one sent over the
  // network (a registry writer is not the operator), keeping the file's from:/to: or not.
  const TextOrigin origin = active->text == file_text.value() ? TextOrigin::kLocal
                                                              : network_origin(file_text.value(), active->text);
  auto compiled = compile_version(active->text, flow->file(), active->version, origin, config_.admin);
  if (!compiled) {
    log::error(
        "the active version does not compile here",
        {{"flow", flow->name()}, {"version", std::to_string(active->version)}, {"error", compiled.status().message()}});
    return Status::invalid(compiled.status().message());
  }
  Status s = start(compiled.value(), active->text, active->pausing);
  if (!s) log::error("cannot start flow", {{"flow", flow->name()}, {"error", s.message()}});
  return s;
}

// `text` is the version's flow file; `paused`: a promote is at its barrier (ADR 0042).
Status FlowHost::start(const std::shared_ptr<const flows::Flow>& flow, const std::string& text, bool paused) {
  auto fr = std::make_unique<RunningFlow>(deps_, flow, text);
  if (Status s = fr->start(paused); !s) {
    // Followed by the registry: parked, not destroyed (it keeps the FlowControl until stop()).
    if (fr->followed()) parked_.push_back(std::move(fr));
    return s;
  }
  WriterLock lock(running_mu_);
  running_.push_back(std::move(fr));
  return Status::ok();
}

std::vector<std::pair<std::string, std::string>> FlowHost::http_routes() const {
  std::vector<std::pair<std::string, std::string>> routes;
  ReaderLock lock(running_mu_);
  for (const auto& f : running_) {
    if (const auto* h = std::get_if<flows::HttpSourceSpec>(&f->flow().source()))
      routes.emplace_back(h->path_shown, f->name());
  }
  return routes;
}

size_t FlowHost::size() const {
  ReaderLock lock(running_mu_);
  return running_.size();
}

void FlowHost::serve() {
  serving_ = true;
  if (!clustered()) return;
  // Flows active in the registry but not in this flows dir start now; flows promoted for
  // the first time later start as they are (ADR 0121).
  if (Status s = cluster_->watch_flows([this](const std::string& name) { start_registry_flow(name); }); !s) {
    log::warn("cannot watch the registry for new flows", {{"error", s.message()}});
  }
}

void FlowHost::begin_drain() {
  draining_ = true;      // first: a registry start waiting for the lock gives up
  lifecycle_mu_.lock();  // a flow being started live finishes first; none after
  serving_ = false;
}

void FlowHost::end_drain() { lifecycle_mu_.unlock(); }

// The drain and stop_all read running_ shared: a flow the registry starts meanwhile (its
// watch runs until the cluster stops) waits for them rather than growing the vector under
// their feet.
void FlowHost::stop_sources() {
  ReaderLock lock(running_mu_);
  for (auto& f : running_) f->stop_source();
}

void FlowHost::stop_stages(std::chrono::steady_clock::time_point deadline) {
  ReaderLock lock(running_mu_);
  // Stages stop together: each finishes the batch in hand; sinks finish what is in flight.
  for (auto& f : running_) f->request_stop();
  // Each stage stops on its own thread, so the slowest bounds the drain, not the sum; sinks
  // wait for their deliveries until drain_timeout less kSinkGrace (an HTTP sink's grace for
  // the requests on the wire, then they are abandoned as retries and redelivered later).
  constexpr auto kSinkGrace = std::chrono::milliseconds(1000);
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  left = std::max(std::chrono::milliseconds(0), left - kSinkGrace);
  std::vector<std::thread> stoppers;
  for (auto& f : running_) f->stop_within(stoppers, left);
  for (auto& t : stoppers) t.join();
}

void FlowHost::stop_all() {
  ReaderLock lock(running_mu_);
  for (auto& f : running_) f->stop();
}

void FlowHost::clear() {
  WriterLock lock(running_mu_);
  running_.clear();
}

RunningFlow* FlowHost::find(const std::string& name) const {
  ReaderLock lock(running_mu_);
  for (const auto& f : running_) {
    if (f->name() == name) return f.get();
  }
  return nullptr;
}

FlowList FlowHost::running_flows() const {
  FlowList out;
  ReaderLock lock(running_mu_);
  for (const auto& f : running_) out.push_back(f->started_flow());
  return out;
}

// ---- AdminBackend ----

bool FlowHost::ready(std::string* why) const {
  if (!serving_.load()) {
    *why = draining_.load() ? "shutting down" : "starting";
    return false;
  }
  Bus* bus = bus_.load();
  if (!bus || !bus->connected() || (deps_.ingress_pub && !deps_.ingress_pub->connected())) {
    *why = "NATS is not connected";
    return false;
  }
  ReaderLock lock(running_mu_);
  for (const auto& f : running_) {
    if (!f->healthy(why)) return false;
  }
  return true;
}

std::vector<std::string> FlowHost::degraded() const {
  std::vector<std::string> out;
  ReaderLock lock(running_mu_);
  for (const auto& f : running_) f->degraded(out);
  return out;
}

nlohmann::json FlowHost::flows() const {
  nlohmann::json out = nlohmann::json::array();
  ReaderLock lock(running_mu_);
  for (const auto& f : running_) out.push_back(f->describe());
  return out;
}

std::optional<nlohmann::json> FlowHost::flow(const std::string& name) const {
  ReaderLock lock(running_mu_);
  for (const auto& f : running_) {
    if (f->name() == name) return f->describe();
  }
  return std::nullopt;
}

nlohmann::json FlowHost::sinks() const {
  nlohmann::json out = nlohmann::json::array();
  ReaderLock lock(running_mu_);
  for (const auto& f : running_) f->describe_sinks(out);
  return out;
}

ControlResult FlowHost::control_sink(const std::string& flow, const std::string& sink, bool pause) {
  ReaderLock lock(running_mu_);
  for (const auto& f : running_) {
    if (f->name() == flow) return f->control_sink(sink, pause);
  }
  return ControlResult::failed(Outcome::kNotFound, "no flow " + flow + " runs on this instance");
}

nlohmann::json FlowHost::status() const {
  Bus* bus = bus_.load();
  nlohmann::json listen;
  {
    MutexLock lock(listen_mu_);
    listen = {{"http", listen_http_}, {"admin", listen_admin_}};
  }
  nlohmann::json j = {{"flows", flows()},
                      {"sinks", sinks()},
                      {"nats", bus ? redact_urls(bus->url()) : ""},
                      {"connected", bus && bus->connected()},
                      {"rss_bytes", process_rss_bytes()},
                      {"cluster", config_.cluster.name},
                      {"listen", listen}};
  if (clustered()) j["members"] = cluster_->status();
  return j;
}

// `target` of a deploy (ADR 0043): clustered, the KV registry is the source of truth and
// no local file is written; standalone there is no registry.
ControlResult FlowHost::check_target(const std::string& target) const {
  if (target != "" && target != "file" && target != "registry") {
    return ControlResult::failed(Outcome::kBadRequest, "target must be file or registry");
  }
  if (clustered() && target == "file") {
    return ControlResult::failed(Outcome::kConflict,
                                 "this instance is in cluster " + config_.cluster.name +
                                     ": the KV registry is the source of truth, so no local flow file is "
                                     "written (the file is left as it is); deploy without target=file");
  }
  if (!clustered() && target == "registry") {
    return ControlResult::failed(Outcome::kConflict, "the version registry needs cluster mode (--cluster NAME)");
  }
  return ControlResult::done({});
}

// Deploy (docs/admin-api.md; ADR 0042, 0043). Clustered: the KV registry stores the next version.
// Standalone: the flow file in the flows dir is replaced and the running flow switches to
// it with the same pause as a promote.
ControlResult FlowHost::deploy(const std::string& name, const std::string& body, const std::string& target) {
  if (ControlResult r = check_target(target); !r.ok()) return r;
  RunningFlow* fr = find(name);
  if (fr) {
    // Before compiling: from:/to: (the only place `${NAME}` is substituted in a network
    // deploy) must be the running version's, so no error can quote a substituted value.
    if (Status s = same_wiring(fr->running_text(), body); !s) {
      return {Outcome::kInvalid,
              {{"error", "cannot switch to this version live"}, {"errors", {name + ".yaml: " + s.message()}}}};
    }
  }
  // Sent over the network: inline tables only; `${NAME}` only in the kept from:/to: or for
  // admin.allow_env names; a new flow's from:/to: under the operator's admin.allow_* rules.
  auto compiled = compile_version(body, name + ".yaml", 0, fr ? TextOrigin::kKeptWiring : TextOrigin::kNetwork,
                                  config_.admin);
  if (!compiled) return not_valid(compiled.status());
  const auto& flow = *compiled.value();
  if (flow.name() != name) {
    return {Outcome::kInvalid,
            {{"error", "the file's flow is named " + flow.name() + ", not " + name},
             {"errors", {name + ".yaml: flow: " + flow.name() + " does not match /flows/" + name}}}};
  }
  if (!fr) return deploy_new(name, body, flow);
  // A `kv:` table the new version names first is read before it runs here.
  if (Status s = tables_->wait_loaded(kTablesWait); !s)
    return ControlResult::failed(Outcome::kUnavailable, s.message());
  if (clustered()) return cluster_->deploy(name, body, flow.content_hash());
  return fr->replace_file(body, config_.drain_timeout);
}

// A deploy of a flow that does not run here yet (ADR 0121). Standalone it starts at once;
// clustered it is stored as the flow's next version: a promote makes it active and every
// instance starts it (they watch the registry).
ControlResult FlowHost::deploy_new(const std::string& name, const std::string& body, const flows::Flow& flow) {
  if (!clustered()) return start_new_flow(name, body);
  if (Status s = check_new_flow(flow, running_flows()); !s) return ControlResult::from(s);
  ControlResult a = cluster_->deploy(name, body, flow.content_hash());
  if (a.ok())
    a.body["hint"] = "flow " + name + " runs on no instance yet: promote this version to start it on every instance";
  return a;
}

// Standalone deploy of a flow that does not run yet (ADR 0121): the file is written into
// the flows dir (so a restart runs it too) and the flow is started like one loaded at
// start. Checked first, so a refused flow leaves no file and starts nothing: the http
// path and the flow name are not taken (running, or by another file in the flows dir),
// a chained source reads a running flow's `flow` sink no other flow reads.
ControlResult FlowHost::start_new_flow(const std::string& name, const std::string& body) {
  MutexLock life(lifecycle_mu_);
  if (draining_.load() || !serving_.load()) {
    return ControlResult::failed(Outcome::kUnavailable,
                                 "weir is starting or shutting down; deploy again once it is ready");
  }
  if (find(name)) {
    return ControlResult::failed(
        Outcome::kConflict, "flow " + name + " was started by another deploy meanwhile; deploy again to replace it");
  }
  const std::string path = (fs::path(config_.flows) / (name + ".yaml")).string();
  auto compiled = compile_version(body, path, 1, TextOrigin::kNetwork, config_.admin);
  if (!compiled) return ControlResult::failed(Outcome::kInvalid, compiled.status().message());
  auto flow = compiled.value();
  if (Status s = check_new_flow(*flow, running_flows()); !s) return ControlResult::from(s);
  if (ControlResult r = check_flows_dir(name, path); !r.ok()) return r;
  // Its KV tables (watched since the compile named them) are read before it starts.
  if (Status s = tables_->wait_loaded(kTablesWait); !s)
    return ControlResult::failed(Outcome::kUnavailable, s.message());
  // A flow of that name that ran here before kept its number: this one starts at 1 again.
  if (Status s = keep_version(config_, name, 1, flow->content_hash()); !s) return ControlResult::from(s);
  if (Status s = write_file_atomically(path, body, "write"); !s) return ControlResult::from(s);
  if (Status s = start(flow, body, false); !s) {
    std::error_code ec;
    fs::remove(path, ec);  // a restart must not start what did not start now
    log::warn("new flow not started", {{"flow", name}, {"error", s.message()}});
    const Outcome o = s.code() == Status::Code::kConflict  ? Outcome::kConflict
                      : s.code() == Status::Code::kInvalid ? Outcome::kInvalid
                                                           : Outcome::kUnavailable;
    return ControlResult::failed(o, "flow " + name + " did not start: " + s.message() + " (its file was not kept)");
  }
  log::info("flow started", {{"flow", name}, {"file", path}});
  return ControlResult::created({{"flow", name}, {"version", 1}, {"file", path}, {"started", true}});
}

// No other file in the flows dir holds flow `name` (it would not run: a restart would
// refuse the two).
ControlResult FlowHost::check_flows_dir(const std::string& name, const std::string& path) const {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(config_.flows, ec)) {
    if (!is_flow_file(e) || e.path() == fs::path(path)) continue;
    auto other = flows::load_flow_file(e.path().string());
    if (other.flow && other.flow->name() == name) {
      return ControlResult::failed(Outcome::kConflict, "the flows dir holds flow " + name + " in " + e.path().string() +
                                                           " (it does not run: fix or remove that file first)");
    }
  }
  return ControlResult::done({});
}

struct FlowHost::ReloadPlan {
  struct Change {
    RunningFlow* flow;
    std::string text;
  };
  std::vector<Change> changed;
  FlowList added;
  std::vector<std::string> removed;
};

Status FlowHost::reload(std::string* summary) {
  if (clustered()) {
    return Status::conflict("this instance is in cluster " + config_.cluster.name +
                            ": the registry decides which flows run, not the flows dir (weir deploy, weir promote)");
  }
  MutexLock life(lifecycle_mu_);  // no deploy starts a flow and no drain begins meanwhile
  if (draining_.load() || !serving_.load()) return Status::unavailable("weir is starting or shutting down");
  auto loaded = load();  // every file compiled, the set checked together
  if (!loaded) return loaded.status();
  ReloadPlan plan;
  if (Status s = plan_reload(loaded.value(), &plan); !s) return s;
  if (!plan.added.empty() || !plan.changed.empty()) {
    if (Status s = tables_->wait_loaded(kTablesWait); !s) return Status::unavailable(s.message());
  }
  Status applied = apply_reload(plan);
  *summary = "added " + std::to_string(plan.added.size()) + ", changed " + std::to_string(plan.changed.size()) +
             ", removed " + std::to_string(plan.removed.size());
  return applied;
}

Status FlowHost::plan_reload(const FlowList& loaded, ReloadPlan* plan) const {
  std::string errors;
  FlowList staying;  // running flows that stay, as started
  {
    ReaderLock lock(running_mu_);
    for (const auto& fr : running_) {
      auto it = std::find_if(loaded.begin(), loaded.end(), [&](const auto& f) { return f->name() == fr->name(); });
      if (it == loaded.end()) {
        plan->removed.push_back(fr->name());
        continue;
      }
      staying.push_back(fr->started_flow());
      auto text = read_text_file((*it)->file());
      if (!text) {
        errors += text.status().message() + "\n";
        continue;
      }
      if (text.value() == fr->running_text()) continue;
      // As a deploy: a running flow switches its steps only (ADR 0042).
      if (Status s = same_wiring(fr->running_text(), text.value()); !s) {
        errors += (*it)->file() + ": cannot switch to this version live: " + s.message() + "\n";
        continue;
      }
      plan->changed.push_back({fr.get(), std::move(text.value())});
    }
  }
  // New flows, those without a chained source first (a chain's upstream must run first).
  for (int chained = 0; chained < 2; ++chained) {
    for (const auto& f : loaded) {
      if (find(f->name()) || std::holds_alternative<flows::FlowSourceSpec>(f->source()) != (chained == 1)) continue;
      FlowList before = staying;
      before.insert(before.end(), plan->added.begin(), plan->added.end());
      if (Status s = check_new_flow(*f, before); !s) {
        errors += f->file() + ": " + s.message() + "\n";
        continue;
      }
      plan->added.push_back(f);
    }
  }
  // A flow that stays must not read a removed flow's sink.
  for (const auto& f : staying) {
    const auto* c = std::get_if<flows::FlowSourceSpec>(&f->source());
    if (c && std::find(plan->removed.begin(), plan->removed.end(), c->flow) != plan->removed.end()) {
      errors += f->file() + ": from.flow: reads flow " + c->flow + ", whose file is gone (remove both, or neither)\n";
    }
  }
  if (errors.empty()) return Status::ok();
  errors.pop_back();
  return Status::invalid(errors);
}

// Removals first (their paths and chained sinks free), then switches, then starts.
Status FlowHost::apply_reload(const ReloadPlan& plan) {
  std::string failed;
  for (const auto& name : plan.removed) {
    std::unique_ptr<RunningFlow> gone;
    {
      WriterLock lock(running_mu_);
      auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& f) { return f->name() == name; });
      gone = std::move(*it);
      running_.erase(it);
    }
    // As the drain does for every flow: its source stops taking events, the stage and sinks
    // finish what they hold; what is left stays in its stream for a later start.
    gone->stop_source();
    gone->request_stop();
    std::vector<std::thread> stoppers;
    gone->stop_within(stoppers, config_.drain_timeout);
    for (auto& t : stoppers) t.join();
    log::info("flow removed", {{"flow", name}, {"by", "reload"}});
  }
  for (const auto& c : plan.changed) {
    if (Status s = c.flow->switch_to_file(c.text, config_.drain_timeout); !s) {
      log::error("flow not switched", {{"flow", c.flow->name()}, {"by", "reload"}, {"error", s.message()}});
      failed += c.flow->name() + ": " + s.message() + "; ";
      continue;
    }
    log::info("flow replaced", {{"flow", c.flow->name()},
                                {"file", c.flow->path()},
                                {"version", std::to_string(c.flow->version())},
                                {"by", "reload"}});
  }
  for (const auto& f : plan.added) {
    auto text = read_text_file(f->file());
    // As at start: a flow file that ran here before goes on from its kept number.
    if (Status s = text ? start(kept_version_of(f, text), text.value(), false) : text.status(); !s) {
      log::error("cannot start flow", {{"flow", f->name()}, {"by", "reload"}, {"error", s.message()}});
      failed += f->name() + ": " + s.message() + "; ";
      continue;
    }
    log::info("flow started", {{"flow", f->name()}, {"file", f->file()}, {"by", "reload"}});
  }
  if (!failed.empty()) return Status::unavailable(failed.substr(0, failed.size() - 2));
  return Status::ok();
}

ControlResult FlowHost::promote(const std::string& name, int64_t version, int64_t expected_active) {
  if (!clustered()) return no_versions(name);
  // A flow no instance runs yet is promoted too: its first active version starts it
  // everywhere (ADR 0121); the registry answers kNotFound for a flow it does not know.
  return cluster_->promote(name, version, expected_active);
}

ControlResult FlowHost::rollback(const std::string& name) {
  if (!clustered()) return no_versions(name);
  if (!find(name)) return ControlResult::failed(Outcome::kNotFound, "no flow named " + name + " runs here");
  return cluster_->rollback(name);
}

// Cluster (ADR 0121): a flow active in the registry that this instance does not run —
// activated by a promote after start, or active before this instance started without a
// file in its flows dir — is started here from the registry's text (no file is written:
// the registry is the source of truth, ADR 0043). Runs on the registry's watch thread.
void FlowHost::start_registry_flow(const std::string& name) {
  if (find(name)) return;
  // Never block a drain: it stops this watch (and waits for this call) while holding
  // lifecycle_mu_.
  while (!lifecycle_mu_.try_lock()) {
    if (draining_.load()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  MutexLock life(lifecycle_mu_, std::adopt_lock);
  if (draining_.load() || find(name)) return;
  auto active = cluster_->attach_flow(name, "", "");
  if (!active) {
    log::warn("cannot read a flow from the registry", {{"flow", name}, {"error", active.status().message()}});
    return;
  }
  const std::string path = (fs::path(config_.flows) / (name + ".yaml")).string();
  auto compiled = compile_version(active->text, path, active->version, TextOrigin::kNetwork, config_.admin);
  Status fits = compiled ? check_new_flow(*compiled.value(), running_flows()) : compiled.status();
  if (!fits) {
    log::error("a flow active in the registry cannot run here",
               {{"flow", name}, {"version", std::to_string(active->version)}, {"error", fits.message()}});
    return;
  }
  if (Status s = tables_->wait_loaded(kTablesWait); !s) {
    log::warn("flow starts before its tables are read", {{"flow", name}, {"error", s.message()}});
  }
  if (Status s = start(compiled.value(), active->text, active->pausing); !s) {
    log::error("cannot start a flow from the registry", {{"flow", name}, {"error", s.message()}});
    return;
  }
  log::info("flow started from the registry", {{"flow", name}, {"version", std::to_string(active->version)}});
}

}  // namespace weir

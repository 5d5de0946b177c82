#include "cluster/flow_registry.h"

#include <pthread.h>

#include <algorithm>

#include "runtime/base/log.h"

namespace weir::cluster {
namespace {
using Json = nlohmann::json;

ControlResult answer(Outcome outcome, Json body) { return ControlResult{outcome, std::move(body)}; }
ControlResult error(Outcome outcome, const std::string& message) { return ControlResult::failed(outcome, message); }
// A store that did not answer: unavailable, the caller may retry.
ControlResult unavailable(const Status& s) {
  return error(Outcome::kUnavailable, "flow registry unavailable: " + s.message());
}

int64_t ms_between(Clock::TimePoint a, Clock::TimePoint b) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

Json parse_object(const std::string& text) {
  Json j = Json::parse(text, nullptr, false);
  return j.is_object() ? j : Json();
}
}  // namespace

Json ActiveRecord::to_json() const {
  Json j = {{"version", version},
            {"epoch", epoch},
            {"phase", phase},
            {"stack", stack},
            {"history", history},
            {"promoted_by", promoted_by},
            {"promoted_at", promoted_at}};
  if (phase == "pausing") j["target"] = target;
  return j;
}

Result<ActiveRecord> ActiveRecord::parse(const std::string& text) {
  Json j = parse_object(text);
  if (j.is_null() || !j.contains("version") || !j["version"].is_number_integer()) {
    return Status::invalid("flow registry: malformed active record");
  }
  ActiveRecord r;
  r.version = j["version"].get<int64_t>();
  r.epoch = j.value("epoch", uint64_t{0});
  r.phase = j.value("phase", std::string("active"));
  r.target = j.value("target", int64_t{0});
  if (j.contains("stack") && j["stack"].is_array()) {
    for (const auto& v : j["stack"]) {
      if (v.is_number_integer()) r.stack.push_back(v.get<int64_t>());
    }
  }
  if (j.contains("history") && j["history"].is_array()) r.history = j["history"];
  r.promoted_by = j.value("promoted_by", std::string());
  r.promoted_at = j.value("promoted_at", int64_t{0});
  return r;
}

FlowRegistry::FlowRegistry(KvStore& flows, KvStore& members, LiveMembers live, RegistryOptions options)
    : flows_(flows), members_(members), live_(std::move(live)), options_(std::move(options)) {}

FlowRegistry::~FlowRegistry() { stop(); }

// ---- membership ----------------------------------------------------------------------

Status FlowRegistry::heartbeat() {
  const Clock::TimePoint sent = options_.clock->now();
  const Clock::Duration fresh_for = options_.member_ttl * 2 / 3;
  Status s = renew();
  if (s) fresh_until_.store((sent + fresh_for).time_since_epoch().count(), std::memory_order_release);
  return s;
}

Status FlowRegistry::renew() {
  const std::string key = member_key(options_.instance);
  const std::string value = Json{{"instance", options_.instance}, {"at", options_.wall_ms()}}.dump();
  if (member_revision_ != 0) {
    auto r = members_.update(key, value, member_revision_);
    if (r) {
      member_revision_ = *r;
      return Status::ok();
    }
    if (r.status().code() != Status::Code::kConflict) return r.status();
    // Conflict: the key expired (the bucket TTL removed it) — join again.
  }
  auto r = members_.create(key, value);
  if (!r) return r.status();
  member_revision_ = *r;
  return Status::ok();
}

void FlowRegistry::start_heartbeat() {
  heartbeat_thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "weir-heartbeat");
    // The member key lives `member_ttl` after the write that the server stamped; we count
    // from before sending it, so we fence no later than the key can expire.
    const auto fence_after = options_.member_ttl * 2 / 3;
    auto last_ok = options_.clock->now();
    int beats = 0;
    UniqueLock lock(hb_mu_);
    while (!stopping_) {
      lock.unlock();
      auto sent = options_.clock->now();
      Status s = heartbeat();
      if (s) {
        last_ok = sent;
        if (fenced_.load()) {
          log::info("member key renewed; flows resume", {{"instance", options_.instance}});
          unfence_all();
        }
        if (++beats % 4 == 0 && !fenced_.load()) reconcile();
      } else if (!fenced_.load() && options_.clock->now() - last_ok > fence_after) {
        log::warn("member key not renewed; pausing every flow until it is",
                  {{"instance", options_.instance}, {"error", s.message()}});
        fence_all();
      }
      lock.lock();
      lock.wait_for(hb_cv_, options_.heartbeat, [&]() REQUIRES(hb_mu_) { return stopping_; });
    }
  });
}

void FlowRegistry::stop() {
  {
    MutexLock lock(hb_mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  hb_cv_.notify_all();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  // First the watch that starts new flows (its call in progress may still follow one).
  std::unique_ptr<KvWatch> flows_watch;
  {
    MutexLock lock(mu_);
    flows_watch.swap(flows_watch_);
  }
  flows_watch.reset();
  std::map<std::string, std::unique_ptr<Followed>> followed;
  {
    MutexLock lock(mu_);
    followed.swap(followed_);
  }
  for (auto& [name, f] : followed) f->watch.reset();  // joins the watch thread
  if (member_revision_ != 0) (void)members_.erase(member_key(options_.instance), member_revision_);
}

void FlowRegistry::fence_all() {
  fenced_ = true;
  MutexLock lock(mu_);
  for (auto& [name, f] : followed_) {
    MutexLock fl(f->mu);
    f->fenced = true;
    f->running = 0;
    f->control->pause(std::chrono::milliseconds(0));  // no new batch starts
  }
}

void FlowRegistry::unfence_all() {
  fenced_ = false;
  std::vector<Followed*> all;
  {
    MutexLock lock(mu_);
    for (auto& [name, f] : followed_) all.push_back(f.get());
  }
  for (Followed* f : all) {
    {
      MutexLock fl(f->mu);
      f->fenced = false;
    }
    // What happened while we were away: the record as the leader has it now.
    auto e = flows_.get(active_key(f->flow));
    auto r = e ? ActiveRecord::parse(e->value) : Result<ActiveRecord>(e.status());
    if (r) {
      apply(*f, *r);
    } else {
      log::warn("cannot read the active version after a fence; the flow stays paused",
                {{"flow", f->flow}, {"error", r.status().message()}});
      MutexLock fl(f->mu);
      f->fenced = true;  // retried at the next renewal
      fenced_ = true;
    }
  }
}

// ---- following the active version ----------------------------------------------------

Result<ActiveFlow> FlowRegistry::attach(const std::string& flow, const std::string& text, const std::string& hash) {
  auto e = flows_.get(active_key(flow));
  if (!e && e.status().code() == Status::Code::kNotFound && text.empty()) {
    return Status::not_found("flow registry: " + flow + " has no active version");  // nothing to seed from
  }
  if (!e && e.status().code() == Status::Code::kNotFound) {
    // The first instance to start with this flow seeds version 1 from its file; the
    // others' creates lose and they read what it wrote.
    Json v1 = {{"version", 1},
               {"hash", hash},
               {"text", text},
               {"deployed_by", options_.instance},
               {"deployed_at", options_.wall_ms()},
               {"seeded_from", "flows dir"}};
    auto c = flows_.create(version_key(flow, 1), v1.dump());
    if (!c && c.status().code() != Status::Code::kConflict) return c.status();
    auto l = flows_.create(latest_key(flow), Json{{"version", 1}}.dump());
    if (!l && l.status().code() != Status::Code::kConflict) return l.status();
    ActiveRecord a;
    a.version = 1;
    a.promoted_by = options_.instance;
    a.promoted_at = options_.wall_ms();
    a.history.push_back({{"action", "seed"}, {"to", 1}, {"by", options_.instance}, {"at", a.promoted_at}});
    auto ac = flows_.create(active_key(flow), a.to_json().dump());
    if (!ac && ac.status().code() != Status::Code::kConflict) return ac.status();
    if (ac) log::info("flow registered", {{"flow", flow}, {"version", "1"}, {"by", options_.instance}});
    e = flows_.get(active_key(flow));
  }
  if (!e) return e.status();
  auto a = ActiveRecord::parse(e->value);
  if (!a) return a.status();
  auto v = flows_.get(version_key(flow, a->version));
  if (!v) return v.status();
  Json rec = parse_object(v->value);
  if (rec.is_null() || !rec.contains("text") || !rec["text"].is_string()) {
    return Status::invalid("flow registry: malformed record of " + flow + " v" + std::to_string(a->version));
  }
  if (!hash.empty() && rec.value("hash", std::string()) != hash) {
    log::info("the flows dir file differs from the active version in the registry; the registry wins",
              {{"flow", flow}, {"active_version", std::to_string(a->version)}});
  }
  ActiveFlow out{a->version, rec["text"].get<std::string>(), a->phase == "pausing"};
  MutexLock lock(mu_);
  attached_[flow] = out;
  return out;
}

Status FlowRegistry::watch_flows(std::function<void(const std::string& flow)> on_flow) {
  auto w = flows_.watch("*.active", [on_flow = std::move(on_flow)](const KvEvent& e) {
    if (e.kind != KvEvent::Kind::kPut) return;
    constexpr std::string_view kSuffix = ".active";
    if (e.key.size() <= kSuffix.size()) return;
    on_flow(e.key.substr(0, e.key.size() - kSuffix.size()));
  });
  if (!w) return w.status();
  MutexLock lock(mu_);
  if (flows_watch_) return Status::invalid("flow registry: flows are watched already");
  flows_watch_ = std::move(w.value());
  return Status::ok();
}

Status FlowRegistry::follow(const std::string& flow, FlowControl* control) {
  Followed* f = nullptr;
  {
    MutexLock lock(mu_);
    auto& slot = followed_[flow];
    if (slot) return Status::invalid("flow registry: " + flow + " is followed already");
    slot = std::make_unique<Followed>();
    f = slot.get();
    f->flow = flow;
    f->control = control;
    MutexLock fl(f->mu);  // the order of fence_all(): mu_, then a flow's mu
    if (fenced_.load()) f->fenced = true;
    if (auto it = attached_.find(flow); it != attached_.end()) {
      // The runtime started the flow with this version (paused when a switch was on).
      f->loaded.insert(it->second.version);
      if (!it->second.pausing) f->running = it->second.version;
    }
  }
  // The first event is the record as it is now; attach() loaded that version.
  auto w = flows_.watch(active_key(flow), [this, f](const KvEvent& e) {
    if (e.kind != KvEvent::Kind::kPut) return;
    // A hint (a replica may be ahead or diverged): act on what the leader has.
    auto now = flows_.get(active_key(f->flow));
    if (!now) {
      log::warn("cannot confirm a change of the active version",
                {{"flow", f->flow}, {"error", now.status().message()}});
      return;
    }
    auto r = ActiveRecord::parse(now->value);
    if (!r) {
      log::warn("ignoring a malformed active record", {{"flow", f->flow}, {"error", r.status().message()}});
      return;
    }
    apply(*f, *r);
  });
  if (!w) return w.status();
  MutexLock lock(mu_);
  f->watch = std::move(w.value());
  return Status::ok();
}

Status FlowRegistry::ensure_loaded(Followed& f, int64_t version) {
  if (f.loaded.count(version)) return Status::ok();
  auto v = flows_.get(version_key(f.flow, version));
  if (!v) return v.status();
  Json rec = parse_object(v->value);
  if (rec.is_null() || !rec.contains("text") || !rec["text"].is_string()) {
    return Status::invalid("malformed record of " + f.flow + " v" + std::to_string(version));
  }
  if (Status s = f.control->load(version, rec["text"].get<std::string>()); !s) return s;
  f.loaded.insert(version);
  return Status::ok();
}

void FlowRegistry::apply(Followed& f, const ActiveRecord& r) {
  MutexLock lock(f.mu);
  apply_locked(f, r);
}

void FlowRegistry::reconcile() {
  std::vector<Followed*> all;
  {
    MutexLock lock(mu_);
    for (auto& [name, f] : followed_) all.push_back(f.get());
  }
  for (Followed* f : all) {
    auto e = flows_.get(active_key(f->flow));
    if (!e) continue;
    auto r = ActiveRecord::parse(e->value);
    if (!r || r->phase != "active") continue;  // pausing: the watch's business (it may wait)
    if (!f->mu.try_lock()) continue;
    MutexLock lock(f->mu, std::adopt_lock);
    if (f->running == r->version || f->fenced) continue;
    log::warn("the watch missed a switch; applying it now",
              {{"flow", f->flow}, {"version", std::to_string(r->version)}});
    apply_locked(*f, *r);
  }
}

void FlowRegistry::apply_locked(Followed& f, const ActiveRecord& r) {
  if (f.fenced) return;  // unfence_all() re-reads the record
  if (r.phase == "pausing") {
    if (f.reported_epoch >= r.epoch) return;
    bool quiet = f.control->pause(options_.pause_timeout);
    f.running = 0;
    if (!quiet) {
      // No report: the promoter aborts at its deadline and we resume on its write.
      log::warn("flow did not pause in time for a promote", {{"flow", f.flow}, {"epoch", std::to_string(r.epoch)}});
      return;
    }
    f.reported_epoch = r.epoch;
    auto c = members_.create(pause_key(f.flow, r.epoch, options_.instance), Json{{"at", options_.wall_ms()}}.dump());
    if (!c) log::warn("cannot report the pause", {{"flow", f.flow}, {"error", c.status().message()}});
    // Compile the target now, so the switch itself is a pointer swap.
    if (Status s = ensure_loaded(f, r.target); !s) f.last_error = s.message();
    return;
  }
  if (f.running == r.version) return;
  if (Status s = ensure_loaded(f, r.version); !s) {
    // Running the old version here would interleave with the others: stay paused.
    f.last_error = "cannot run v" + std::to_string(r.version) + ": " + s.message();
    log::error("cannot run the active version; the flow stays paused on this instance",
               {{"flow", f.flow}, {"version", std::to_string(r.version)}, {"error", s.message()}});
    f.control->pause(std::chrono::milliseconds(0));
    f.running = 0;
    return;
  }
  f.control->resume(r.version);
  f.running = r.version;
  f.last_error.clear();
  log::info("flow version running",
            {{"flow", f.flow}, {"version", std::to_string(r.version)}, {"epoch", std::to_string(r.epoch)}});
}

int64_t FlowRegistry::running_version(const std::string& flow) const {
  MutexLock lock(mu_);
  auto it = followed_.find(flow);
  if (it == followed_.end()) return 0;
  MutexLock fl(it->second->mu);
  return it->second->running;
}

// ---- admin calls ---------------------------------------------------------------------

ControlResult FlowRegistry::deploy(const std::string& flow, const std::string& text, const std::string& hash,
                                   const std::string& by) {
  int64_t latest = 0;
  if (auto l = flows_.get(latest_key(flow)); l) {
    latest = parse_object(l->value).value("version", int64_t{0});
  } else if (l.status().code() != Status::Code::kNotFound) {
    return unavailable(l.status());
  }
  if (latest > 0) {
    // The same file again is the same version: deploys are idempotent.
    if (auto v = flows_.get(version_key(flow, latest)); v && parse_object(v->value).value("hash", "") == hash) {
      return answer(Outcome::kDone, {{"flow", flow}, {"version", latest}, {"hash", hash}, {"unchanged", true}});
    }
  }
  // Put-if-absent on the version key decides who gets a number; `latest` only follows.
  int64_t version = 0;
  const int64_t at = options_.wall_ms();
  for (int64_t n = latest + 1; n <= latest + 64; ++n) {
    Json rec = {{"version", n}, {"hash", hash}, {"text", text}, {"deployed_by", by}, {"deployed_at", at}};
    auto c = flows_.create(version_key(flow, n), rec.dump());
    if (c) {
      version = n;
      break;
    }
    if (c.status().code() != Status::Code::kConflict) return unavailable(c.status());
  }
  if (version == 0) return error(Outcome::kConflict, "flow " + flow + ": too many concurrent deploys");
  for (int attempt = 0; attempt < 16; ++attempt) {
    auto l = flows_.get(latest_key(flow));
    Result<uint64_t> w = Status::ok();
    if (l) {
      if (parse_object(l->value).value("version", int64_t{0}) >= version) break;
      w = flows_.update(latest_key(flow), Json{{"version", version}}.dump(), l->revision);
    } else if (l.status().code() == Status::Code::kNotFound) {
      w = flows_.create(latest_key(flow), Json{{"version", version}}.dump());
    } else {
      return unavailable(l.status());
    }
    if (w) break;
    if (w.status().code() != Status::Code::kConflict) return unavailable(w.status());
  }
  // A flow nobody runs yet stays stored: its first promote makes it active (ADR 0121), and
  // only then do the instances watching `*.active` start it.
  log::info("flow version deployed",
            {{"flow", flow}, {"version", std::to_string(version)}, {"hash", hash}, {"by", by}});
  return answer(Outcome::kCreated,
                {{"flow", flow}, {"version", version}, {"hash", hash}, {"deployed_by", by}, {"deployed_at", at}});
}

ControlResult FlowRegistry::promote(const std::string& flow, int64_t version, const std::string& by,
                                    int64_t expected_active) {
  if (version <= 0) return error(Outcome::kBadRequest, "version must be a positive integer");
  if (auto v = flows_.get(version_key(flow, version)); !v) {
    if (v.status().code() == Status::Code::kNotFound) {
      return error(Outcome::kNotFound, "flow " + flow + " has no version " + std::to_string(version));
    }
    return unavailable(v.status());
  }
  auto e = flows_.get(active_key(flow));
  if (!e && e.status().code() == Status::Code::kNotFound) {
    // A flow deployed but never active: no instance runs it, so there is no barrier to
    // pass — the first active record starts it on every instance (they watch for it,
    // ADR 0121). A peer's concurrent first promote wins the create; then this one is an
    // ordinary promote below.
    if (expected_active != 0) {
      return error(Outcome::kConflict,
                   "flow " + flow + ": no version is active yet, not v" + std::to_string(expected_active));
    }
    ActiveRecord first;
    first.version = version;
    first.promoted_by = by;
    first.promoted_at = options_.wall_ms();
    first.history.push_back({{"action", "start"}, {"to", version}, {"by", by}, {"at", first.promoted_at}});
    auto c = flows_.create(active_key(flow), first.to_json().dump());
    if (c) {
      log::info("flow activated", {{"flow", flow}, {"version", std::to_string(version)}, {"by", by}});
      return answer(Outcome::kDone, {{"flow", flow}, {"version", version}, {"started", true}});
    }
    if (c.status().code() != Status::Code::kConflict) return unavailable(c.status());
    e = flows_.get(active_key(flow));
  }
  if (!e) {
    if (e.status().code() == Status::Code::kNotFound)
      return error(Outcome::kNotFound, "no flow named " + flow + " in the registry");
    return unavailable(e.status());
  }
  auto a = ActiveRecord::parse(e->value);
  if (!a) return error(Outcome::kFailed, a.status().message());
  if (a->phase == "pausing") {
    return error(Outcome::kConflict,
                 "flow " + flow + ": a switch to v" + std::to_string(a->target) + " is in progress");
  }
  if (expected_active != 0 && a->version != expected_active) {
    return error(Outcome::kConflict, "flow " + flow + ": stale promote: v" + std::to_string(a->version) +
                                         " is active, not v" + std::to_string(expected_active));
  }
  if (a->version == version) return answer(Outcome::kDone, {{"flow", flow}, {"version", version}, {"unchanged", true}});
  return switch_to(flow, *a, e->revision, version, "promote", by);
}

ControlResult FlowRegistry::rollback(const std::string& flow, const std::string& by) {
  auto e = flows_.get(active_key(flow));
  if (!e) {
    if (e.status().code() == Status::Code::kNotFound)
      return error(Outcome::kNotFound, "no flow named " + flow + " in the registry");
    return unavailable(e.status());
  }
  auto a = ActiveRecord::parse(e->value);
  if (!a) return error(Outcome::kFailed, a.status().message());
  if (a->phase == "pausing") {
    return error(Outcome::kConflict,
                 "flow " + flow + ": a switch to v" + std::to_string(a->target) + " is in progress");
  }
  if (a->stack.empty()) return error(Outcome::kConflict, "flow " + flow + ": no earlier version to roll back to");
  return switch_to(flow, *a, e->revision, a->stack.back(), "rollback", by);
}

std::vector<std::string> FlowRegistry::wait_barrier(const std::string& flow, uint64_t epoch,
                                                    std::vector<std::string>* reported) {
  const auto deadline = options_.clock->now() + options_.barrier_timeout;
  std::set<std::string> done;
  std::vector<std::string> members;
  auto last_list = Clock::TimePoint{};
  for (;;) {
    const auto now = options_.clock->now();
    bool listed = false;
    if (members.empty() || now - last_list >= options_.relist) {
      if (auto l = live_(); l) {
        members = std::move(l.value());
        listed = true;
      }
      last_list = now;
    }
    std::vector<std::string> missing;
    for (const auto& m : members) {
      if (done.count(m)) continue;
      if (members_.get(pause_key(flow, epoch, m))) done.insert(m);
      else missing.push_back(m);
    }
    if (missing.empty() && !members.empty()) {
      // Everyone we know of paused: list once more, for an instance that joined meanwhile.
      if (listed) break;
      last_list = Clock::TimePoint{};
      continue;
    }
    if (options_.clock->now() >= deadline) {
      if (members.empty()) missing.push_back("(the member list could not be read)");
      *reported = std::vector<std::string>(done.begin(), done.end());
      return missing;
    }
    std::this_thread::sleep_for(options_.poll);
  }
  *reported = std::vector<std::string>(done.begin(), done.end());
  return {};
}

ControlResult FlowRegistry::switch_to(const std::string& flow, const ActiveRecord& current, uint64_t revision,
                                      int64_t target, const std::string& action, const std::string& by) {
  const auto started = options_.clock->now();
  ActiveRecord pausing = current;
  pausing.phase = "pausing";
  pausing.target = target;
  pausing.epoch = current.epoch + 1;
  auto p = flows_.update(active_key(flow), pausing.to_json().dump(), revision);
  if (!p) {
    if (p.status().code() == Status::Code::kConflict) {
      return error(Outcome::kConflict,
                   "flow " + flow + " changed meanwhile (another promote or rollback won); read it again");
    }
    return unavailable(p.status());
  }
  std::vector<std::string> reported;
  std::vector<std::string> missing = wait_barrier(flow, pausing.epoch, &reported);
  const int64_t barrier_ms = ms_between(started, options_.clock->now());

  ActiveRecord next = current;
  next.phase = "active";
  next.epoch = pausing.epoch;
  const int64_t at = options_.wall_ms();
  Json audit = {{"action", action},       {"from", current.version}, {"to", target}, {"by", by}, {"at", at},
                {"epoch", pausing.epoch}, {"barrier_ms", barrier_ms}};
  if (missing.empty()) {
    next.version = target;
    if (action == "rollback") {
      next.stack.pop_back();
    } else {
      next.stack.push_back(current.version);
      if (next.stack.size() > options_.history) next.stack.erase(next.stack.begin());
    }
    next.promoted_by = by;
    next.promoted_at = at;
  } else {
    audit["action"] = action + " aborted";
    audit["not_paused"] = missing;
  }
  next.history.push_back(audit);
  while (next.history.size() > options_.history) next.history.erase(next.history.begin());

  // Retried on a lost reply: the write may have landed (then the revision moved on and a
  // re-read shows our record) — anything else moving it is a conflict.
  auto w = flows_.update(active_key(flow), next.to_json().dump(), *p);
  if (!w) {
    if (auto e = flows_.get(active_key(flow)); e) {
      auto now = ActiveRecord::parse(e->value);
      if (now && now->epoch == next.epoch && now->phase == "active" && now->version == next.version) w = e->revision;
    }
  }
  if (!w) {
    log::error("flow registry: cannot finish a switch", {{"flow", flow}, {"error", w.status().message()}});
    if (w.status().code() == Status::Code::kConflict) {
      return error(Outcome::kConflict, "flow " + flow + " was changed by someone else during the " + action);
    }
    return unavailable(w.status());
  }
  const int64_t total_ms = ms_between(started, options_.clock->now());
  if (!missing.empty()) {
    std::string names;
    for (const auto& m : missing) names += (names.empty() ? "" : ", ") + m;
    log::warn("flow version switch aborted: instances did not pause in time",
              {{"flow", flow}, {"action", action}, {"to", std::to_string(target)}, {"missing", names}, {"by", by}});
    return answer(
        Outcome::kUnavailable,
        {{"error", action + " of flow " + flow + " to v" + std::to_string(target) + " aborted: not paused within " +
                       std::to_string(options_.barrier_timeout.count()) + " ms: " + names},
         {"version", current.version},
         {"not_paused", missing}});
  }
  log::info("flow version switched", {{"flow", flow},
                                      {"action", action},
                                      {"from", std::to_string(current.version)},
                                      {"to", std::to_string(target)},
                                      {"by", by},
                                      {"barrier_ms", std::to_string(barrier_ms)},
                                      {"instances", std::to_string(reported.size())}});
  return answer(Outcome::kDone, {{"flow", flow},
                                 {"version", target},
                                 {"previous", current.version},
                                 {"epoch", next.epoch},
                                 {"barrier_ms", barrier_ms},
                                 {"total_ms", total_ms},
                                 {"instances", reported}});
}

Json FlowRegistry::describe(const std::string& flow) {
  Json j = Json::object();
  auto e = flows_.get(active_key(flow));
  if (!e) return j;
  auto a = ActiveRecord::parse(e->value);
  if (!a) return j;
  int64_t latest = a->version;
  if (auto l = flows_.get(latest_key(flow)); l) latest = parse_object(l->value).value("version", latest);
  j["active_version"] = a->version;
  j["latest_version"] = latest;
  j["phase"] = a->phase;
  j["epoch"] = a->epoch;
  if (a->phase == "pausing") j["target_version"] = a->target;
  j["rollback_to"] = a->stack.empty() ? Json() : Json(a->stack.back());
  j["promoted_by"] = a->promoted_by;
  j["promoted_at"] = a->promoted_at;
  j["history"] = a->history;
  Json versions = Json::array();
  for (int64_t v = std::max<int64_t>(1, latest - 9); v <= latest; ++v) {
    auto r = flows_.get(version_key(flow, v));
    if (!r) continue;
    Json rec = parse_object(r->value);
    if (rec.is_null()) continue;
    versions.push_back({{"version", v},
                        {"hash", rec.value("hash", "")},
                        {"deployed_by", rec.value("deployed_by", "")},
                        {"deployed_at", rec.value("deployed_at", int64_t{0})}});
  }
  j["versions"] = versions;
  {
    MutexLock lock(mu_);
    if (auto it = followed_.find(flow); it != followed_.end()) {
      MutexLock fl(it->second->mu);
      j["running_here"] = it->second->running;
      if (!it->second->last_error.empty()) j["error_here"] = it->second->last_error;
    }
  }
  return j;
}

}  // namespace weir::cluster

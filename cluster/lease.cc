#include "cluster/lease.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <utility>

#include <nlohmann/json.hpp>

#include "runtime/base/log.h"

namespace weir::cluster {

namespace {

using std::chrono::milliseconds;

std::string ms_string(milliseconds d) { return std::to_string(d.count()) + "ms"; }

// A number no other Lease object will pick: it tells this lease's writes from everyone
// else's, even when two processes were given the same owner name.
std::string make_nonce() {
  std::random_device device;
  std::mt19937_64 rng((static_cast<uint64_t>(device()) << 32) ^ device() ^
                      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

std::string lease_value(const std::string& owner, const std::string& nonce) {
  return nlohmann::json{{"owner", owner}, {"nonce", nonce}}.dump();
}

bool written_by(const std::string& value, const std::string& nonce) {
  const nlohmann::json j = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("nonce") && j["nonce"].is_string() && j["nonce"] == nonce;
}

}  // namespace

const char* to_string(Lease::Role role) {
  switch (role) {
    case Lease::Role::kStandby: return "standby";
    case Lease::Role::kLeader: return "leader";
    case Lease::Role::kClosed: return "closed";
  }
  return "?";
}

std::string lease_bucket_name(std::string_view cluster, milliseconds ttl) {
  std::string name = "weir_leases_";
  for (char c : cluster) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    name += ok ? c : '_';
  }
  name += "_" + std::to_string(ttl.count());
  return name;
}

LeaseOptions LeaseOptions::for_ttl(milliseconds ttl) {
  LeaseOptions o;
  o.ttl = ttl;
  o.renew_interval = std::max(milliseconds(1), ttl / 5);
  o.hold = std::max(milliseconds(2), ttl * 4 / 5);
  o.campaign_interval = std::max(milliseconds(1), ttl / 4);
  return o;
}

Status LeaseOptions::validate() const {
  if (renew_interval.count() <= 0) return Status::invalid("lease renew interval must be > 0");
  if (campaign_interval.count() <= 0) return Status::invalid("lease campaign interval must be > 0");
  if (hold <= renew_interval) {
    return Status::invalid("lease hold (" + ms_string(hold) + ") must be longer than the renew interval (" +
                           ms_string(renew_interval) + ")");
  }
  if (ttl <= hold) {
    return Status::invalid("lease ttl (" + ms_string(ttl) + ") must be longer than the hold time (" + ms_string(hold) +
                           ")");
  }
  return Status::ok();
}

Lease::Lease(KvStore& kv, const Clock& clock, std::string key, std::string owner, LeaseOptions options)
    : kv_(kv),
      clock_(clock),
      key_(std::move(key)),
      owner_(std::move(owner)),
      nonce_(make_nonce()),
      value_(lease_value(owner_, nonce_)),
      options_(options) {
  const Clock::TimePoint now = clock_.now();
  campaign_at_ = now;  // first tick campaigns at once
  retry_at_ = now;
  paused_until_ = now;
}

std::optional<uint64_t> Lease::token() const {
  MutexLock lock(mu_);
  if (!valid_ || clock_.now() >= valid_until_) return std::nullopt;
  return term_;
}

void Lease::set_valid(bool valid, uint64_t term, Clock::TimePoint until) {
  MutexLock lock(mu_);
  valid_ = valid;
  term_ = term;
  valid_until_ = until;
}

void Lease::observe(uint64_t revision, bool present, bool mine) {
  // Revisions only grow: an older one is a late or stale answer and says nothing new.
  if (revision <= seen_revision_) return;
  seen_revision_ = revision;
  seen_at_ = clock_.now();
  present_ = present;
  seen_mine_ = present && mine;
}

void Lease::tick() {
  if (role_ == Role::kClosed) return;
  const Clock::TimePoint now = clock_.now();
  if (role_ == Role::kLeader) {
    Clock::TimePoint until;
    {
      MutexLock lock(mu_);
      until = valid_until_;
    }
    if (now >= until) {
      lose("not renewed within the hold time (" + ms_string(options_.hold) + ")");
    } else if (now >= renew_at_) {
      renew(now);
    }
    return;
  }
  if (now < paused_until_) return;
  if (takeover_due(now)) {
    take_over(now);
  } else if (now >= campaign_at_) {
    campaign(now);
  }
}

void Lease::campaign(Clock::TimePoint now) {
  campaign_at_ = now + options_.campaign_interval;
  Result<uint64_t> created = kv_.create(key_, value_);
  if (created) {
    become_leader(created.value(), now, "create");
    return;
  }
  const Status status = created.status();
  if (status.code() == Status::Code::kConflict) {
    // Someone holds it. Learn its revision when the watch has not told us yet, so the
    // takeover clock starts.
    if (!present_ || seen_revision_ == 0) refresh();
    return;
  }
  log::debug("lease campaign failed", {{"key", key_}, {"error", status.str()}});
}

void Lease::take_over(Clock::TimePoint now) {
  const uint64_t expected = seen_revision_;
  Result<uint64_t> updated = kv_.update(key_, value_, expected);
  if (updated) {
    become_leader(updated.value(), now, "takeover");
    return;
  }
  retry_at_ = clock_.now() + options_.campaign_interval;
  const Status status = updated.status();
  if (status.code() != Status::Code::kConflict) {
    log::debug("lease takeover failed", {{"key", key_}, {"error", status.str()}});
    return;
  }
  // Renewed (or deleted, or expired) since we looked: learn what is there now.
  refresh();
  if (!present_ && clock_.now() >= paused_until_) campaign(clock_.now());
}

void Lease::refresh() {
  Result<KvEntry> entry = kv_.get(key_);
  log::debug("lease refresh", {{"key", key_},
                               {"owner", owner_},
                               {"result", entry ? "revision " + std::to_string(entry->revision) + " " + entry->value
                                                : entry.status().str()}});
  if (entry) {
    observe(entry->revision, true, written_by(entry->value, nonce_));
    return;
  }
  if (entry.status().code() == Status::Code::kNotFound) {
    // Absent or deleted. We do not learn the marker's revision; Create will tell.
    present_ = false;
    return;
  }
  log::debug("lease refresh failed", {{"key", key_}, {"error", entry.status().str()}});
}

void Lease::renew(Clock::TimePoint now) {
  Result<uint64_t> updated = kv_.update(key_, value_, revision_);
  if (!updated) {
    lose("renewal failed: " + updated.status().str());
    return;
  }
  revision_ = updated.value();
  observe(revision_, true, true);
  renew_at_ = now + options_.renew_interval;
  const Clock::TimePoint until = now + options_.hold;
  if (clock_.now() >= until) {
    lose("renewal answered after the hold time (" + ms_string(options_.hold) + ")");
    return;
  }
  uint64_t term;
  {
    MutexLock lock(mu_);
    term = term_;
  }
  set_valid(true, term, until);
}

void Lease::become_leader(uint64_t revision, Clock::TimePoint sent, const char* how) {
  revision_ = revision;
  observe(revision, true, true);
  const Clock::TimePoint until = sent + options_.hold;
  if (clock_.now() >= until) {
    // The answer came too late to act on. We still hold the key: as a standby we take it
    // back by compare-and-set on our own revision, which needs no waiting.
    log::warn("lease won too late to act on", {{"key", key_}, {"revision", std::to_string(revision)}});
    retry_at_ = clock_.now();
    return;
  }
  role_ = Role::kLeader;
  ++acquisitions_;
  renew_at_ = sent + options_.renew_interval;
  set_valid(true, revision, until);
  log::info("lease acquired", {{"key", key_}, {"owner", owner_}, {"revision", std::to_string(revision)}, {"by", how}});
}

void Lease::lose(const std::string& reason) {
  set_valid(false, 0, Clock::TimePoint{});
  role_ = Role::kStandby;
  const Clock::TimePoint now = clock_.now();
  campaign_at_ = now + options_.campaign_interval;
  retry_at_ = now + options_.campaign_interval;
  log::warn("lease lost", {{"key", key_}, {"owner", owner_}, {"reason", reason}});
}

void Lease::on_event(const KvEvent& event) {
  if (role_ == Role::kClosed || event.key != key_) return;
  log::debug("lease event", {{"key", key_},
                             {"owner", owner_},
                             {"kind", event.kind == KvEvent::Kind::kPut ? "put" : "delete"},
                             {"revision", std::to_string(event.revision)}});
  // A holder decides from its own writes only: a watch may come from a diverged replica,
  // and anyone who really wrote the key makes the next renewal fail.
  if (role_ == Role::kLeader) return;
  if (event.revision <= seen_revision_) return;  // nothing new
  if (clock_.now() < paused_until_) return;
  if (event.kind == KvEvent::Kind::kDelete) {
    campaign(clock_.now());  // released: Create decides, on the leader
    return;
  }
  // A put is a hint that the key moved on. The takeover clock may only start from a
  // revision the stream leader confirms: a replica's revision can run ahead of the real
  // write with that number, which would start the clock early.
  refresh();
  if (!present_) campaign(clock_.now());
}

void Lease::step_down(std::chrono::milliseconds pause) {
  if (role_ == Role::kClosed) return;
  if (role_ == Role::kLeader) {
    set_valid(false, 0, Clock::TimePoint{});
    role_ = Role::kStandby;
    Status erased = kv_.erase(key_, revision_);
    if (!erased) log::warn("lease release failed", {{"key", key_}, {"error", erased.str()}});
    log::info("lease stepped down", {{"key", key_}, {"owner", owner_}});
    // Deleted (or, if the delete failed, someone will learn otherwise through Create).
    present_ = false;
  }
  const Clock::TimePoint now = clock_.now();
  paused_until_ = now + pause;
  campaign_at_ = paused_until_;
  retry_at_ = paused_until_;
}

void Lease::release() {
  if (role_ == Role::kLeader) {
    set_valid(false, 0, Clock::TimePoint{});
    Status erased = kv_.erase(key_, revision_);
    if (erased) {
      log::info("lease released", {{"key", key_}, {"owner", owner_}});
    } else {
      log::warn("lease release failed; others take over after the ttl", {{"key", key_}, {"error", erased.str()}});
    }
  }
  role_ = Role::kClosed;
}

void Lease::abandon() {
  set_valid(false, 0, Clock::TimePoint{});
  role_ = Role::kClosed;
}

bool Lease::takeover_due(Clock::TimePoint now) const {
  if (!present_ || seen_revision_ == 0 || now < retry_at_) return false;
  // The last write known is our own (a renewal whose answer we lost, too): nobody else can
  // have acted since without writing after it, which would make our compare-and-set
  // fail. No need to wait.
  if (seen_mine_) return true;
  return now - seen_at_ >= options_.ttl;
}

Clock::TimePoint Lease::next_deadline() const {
  const Clock::TimePoint now = clock_.now();
  switch (role_) {
    case Role::kClosed: return now + std::chrono::hours(1);
    case Role::kLeader: {
      MutexLock lock(mu_);
      return std::min(renew_at_, valid_until_);
    }
    case Role::kStandby: break;
  }
  if (now < paused_until_) return paused_until_;
  Clock::TimePoint next = campaign_at_;
  if (present_ && seen_revision_ != 0) {
    const Clock::TimePoint takeover = seen_mine_ ? retry_at_ : std::max(seen_at_ + options_.ttl, retry_at_);
    next = std::min(next, takeover);
  }
  return next;
}

}  // namespace weir::cluster

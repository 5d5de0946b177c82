#include "runtime/flow/state_store.h"

#include <utility>

#include "runtime/nats/nats_kv.h"

namespace weir {

Result<std::unique_ptr<StateStore>> StateStore::open(__natsConnection* connection, const StateStoreOptions& options) {
  if (connection == nullptr) return Status::invalid("state store: no NATS connection");
  NatsKvOptions o;
  o.bucket = options.bucket;
  o.replicas = options.replicas;
  o.timeout = options.timeout;
  o.description = "weir: durable state of sources (poll cursors, ETags)";
  auto kv = NatsKv::open(connection, o);
  if (!kv) return kv.status().prefixed("state store: ");
  return std::make_unique<StateStore>(std::move(kv.value()), options.bucket);
}

Result<std::pair<uint64_t, std::optional<std::string>>> StateStore::read(const std::string& key) {
  auto e = kv_->get(key);
  if (!e) {
    if (e.status().code() == Status::Code::kNotFound) {
      return std::pair<uint64_t, std::optional<std::string>>{0, std::nullopt};
    }
    return e.status().prefixed("state store: ");
  }
  return std::pair<uint64_t, std::optional<std::string>>{e->revision, std::move(e->value)};
}

Result<std::optional<std::string>> StateStore::get(const std::string& key) {
  if (!valid_kv_key(key)) return Status::invalid("state store: invalid key '" + key + "'");
  auto r = read(key);
  if (!r) return r.status();
  {
    MutexLock lock(mu_);
    Known& k = known_[key];
    k.revision = r->first;
    k.uncertain = false;
    k.attempted.clear();
  }
  return std::move(r->second);
}

Status StateStore::put(const std::string& key, const std::string& value) {
  if (!valid_kv_key(key)) return Status::invalid("state store: invalid key '" + key + "'");
  std::optional<Known> known;
  {
    MutexLock lock(mu_);
    if (auto it = known_.find(key); it != known_.end()) known = it->second;
  }
  uint64_t last = known ? known->revision : 0;
  if (known && known->uncertain) {
    // The previous put may or may not have landed: decide from what the key holds now.
    auto r = read(key);
    if (!r) return r.status();
    if (r->first != known->revision && r->second != known->attempted) {
      return Status::conflict("state store: put " + key + ": the key was changed by another writer");
    }
    last = r->first;
  }
  Result<uint64_t> written = last == 0 ? kv_->create(key, value) : kv_->update(key, value, last);
  Status status = written ? Status::ok() : written.status().prefixed("state store: ");
  MutexLock lock(mu_);
  Known& k = known_[key];
  if (written) {
    k.revision = written.value();
    k.uncertain = false;
    k.attempted.clear();
  } else if (status.code() == Status::Code::kConflict) {
    // Stays in conflict until the owner reads the key again (a new term's get). After an
    // unknown outcome the earlier attempt may land late (cnats sends what it buffered while
    // reconnecting): stay uncertain, so the next put checks for it again.
    k.revision = last;
    if (!(known && known->uncertain)) {
      k.uncertain = false;
      k.attempted.clear();
    }
  } else {
    k.revision = last;
    k.uncertain = true;
    k.attempted = value;
  }
  return status;
}

DeferredStateStore::DeferredStateStore(__natsConnection* connection, const StateStoreOptions& options)
    : opener_([this, connection, options] {
        // Unnamed on purpose: opening the bucket starts a cnats thread (its delivery pool's),
        // which would inherit this name for the life of the process (docs/architecture.md).
        auto opened = StateStore::open(connection, options);
        MutexLock lock(mu_);
        if (opened) {
          store_ = std::move(opened.value());
        } else {
          status_ = opened.status();
        }
        done_ = true;
        cv_.notify_all();
      }) {}

DeferredStateStore::~DeferredStateStore() {
  if (opener_.joinable()) opener_.join();
}

Result<StateStore*> DeferredStateStore::store() {
  UniqueLock lock(mu_);
  lock.wait(cv_, [&]() REQUIRES(mu_) { return done_; });
  if (!store_) return status_;
  return store_.get();
}

Status DeferredStateStore::wait() {
  auto s = store();
  return s ? Status::ok() : s.status();
}

Result<std::optional<std::string>> DeferredStateStore::get(const std::string& key) {
  auto s = store();
  if (!s) return s.status();
  return s.value()->get(key);
}

Status DeferredStateStore::put(const std::string& key, const std::string& value) {
  auto s = store();
  if (!s) return s.status();
  return s.value()->put(key, value);
}

}  // namespace weir

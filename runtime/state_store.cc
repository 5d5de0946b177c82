#include "runtime/state_store.h"

#include <nats/nats.h>

#include <algorithm>
#include <utility>

#include "runtime/bus.h"

namespace weir {

namespace {

// Creating an R3 stream needs its Raft group: allow more than a data request.
constexpr std::chrono::milliseconds kAdminTimeout{5000};

Result<jsCtx*> make_js(natsConnection* connection, std::chrono::milliseconds wait) {
  jsOptions options;
  jsOptions_Init(&options);
  options.Wait = wait.count();
  jsCtx* js = nullptr;
  natsStatus s = natsConnection_JetStream(&js, connection, &options);
  if (s != NATS_OK) return nats_status(s, "state store: jetstream context");
  return js;
}

// A failed compare-and-set reports "wrong last sequence" (JetStream error 10071) through
// cnats' thread-local last error; call right after the failing request.
bool lost_race(natsStatus s, jsErrCode js_error) {
  if (js_error == JSStreamWrongLastSequenceErr) return true;
  natsStatus last = NATS_OK;
  const char* text = nats_GetLastError(&last);
  return s != NATS_OK && last == s && text != nullptr &&
         std::string_view(text).find("wrong last sequence") != std::string_view::npos;
}

Status write_status(natsStatus s, const std::string& what) {
  if (lost_race(s, static_cast<jsErrCode>(0))) {
    return Status::conflict(what + ": the key was changed by another writer");
  }
  return nats_status(s, what);
}

}  // namespace

bool valid_state_key(std::string_view key) {
  if (key.empty() || key.size() > 1024) return false;
  for (size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    if (c == '.') {
      if (i == 0 || i + 1 == key.size() || key[i - 1] == '.') return false;
      continue;
    }
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && c != '_' && c != '-' && c != '/' && c != '=') return false;
  }
  return true;
}

StateStore::StateStore(jsCtx* js, kvStore* kv, std::string bucket)
    : js_(js), kv_(kv), bucket_(std::move(bucket)), stream_("KV_" + bucket_), prefix_("$KV." + bucket_ + ".") {}

StateStore::~StateStore() {
  kvStore_Destroy(kv_);
  jsCtx_Destroy(js_);
}

Result<std::unique_ptr<StateStore>> StateStore::open(natsConnection* connection, const StateStoreOptions& options) {
  if (connection == nullptr) return Status::invalid("state store: no NATS connection");
  const std::string& bucket = options.bucket;
  if (bucket.empty() || !std::all_of(bucket.begin(), bucket.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
      })) {
    return Status::invalid("state store: bucket name '" + bucket + "' is not [A-Za-z0-9_-]+");
  }
  if (options.replicas < 1 || options.replicas > 5) {
    return Status::invalid("state store: replicas must be 1..5, got " + std::to_string(options.replicas));
  }
  if (options.timeout.count() <= 0) return Status::invalid("state store: timeout must be > 0");

  {
    auto admin = make_js(connection, std::max(options.timeout, kAdminTimeout));
    if (!admin) return admin.status();
    kvStore* raw = nullptr;
    natsStatus s = js_KeyValue(&raw, admin.value(), bucket.c_str());
    if (s == NATS_NOT_FOUND) {
      kvConfig config;
      kvConfig_Init(&config);
      config.Bucket = bucket.c_str();
      config.Description = "weir: durable state of sources (poll cursors, ETags)";
      config.History = 1;
      config.Replicas = options.replicas;
      config.StorageType = js_FileStorage;
      s = js_CreateKeyValue(&raw, admin.value(), &config);
      if (s != NATS_OK) {
        // Another instance may have created it a moment earlier: look again.
        Status create_error = nats_status(s, "state store: create bucket " + bucket);
        raw = nullptr;
        s = js_KeyValue(&raw, admin.value(), bucket.c_str());
        if (s != NATS_OK) {
          jsCtx_Destroy(admin.value());
          return create_error;
        }
      }
    } else if (s != NATS_OK) {
      Status error = nats_status(s, "state store: open bucket " + bucket);
      jsCtx_Destroy(admin.value());
      return error;
    }
    kvStore_Destroy(raw);
    jsCtx_Destroy(admin.value());
  }

  auto js = make_js(connection, options.timeout);
  if (!js) return js.status();
  kvStore* kv = nullptr;
  natsStatus s = js_KeyValue(&kv, js.value(), bucket.c_str());
  if (s != NATS_OK) {
    Status error = nats_status(s, "state store: open bucket " + bucket);
    jsCtx_Destroy(js.value());
    return error;
  }
  return std::unique_ptr<StateStore>(new StateStore(js.value(), kv, bucket));
}

Result<std::pair<uint64_t, std::optional<std::string>>> StateStore::read(const std::string& key) {
  const std::string subject = prefix_ + key;
  natsMsg* msg = nullptr;
  jsErrCode js_error = static_cast<jsErrCode>(0);
  natsStatus s = js_GetLastMsg(&msg, js_, stream_.c_str(), subject.c_str(), nullptr, &js_error);
  if (s == NATS_NOT_FOUND || js_error == JSNoMessageFoundErr) {
    natsMsg_Destroy(msg);
    return std::pair<uint64_t, std::optional<std::string>>{0, std::nullopt};
  }
  if (s != NATS_OK) {
    natsMsg_Destroy(msg);
    return nats_status(s, "state store: get " + key);
  }
  const uint64_t revision = natsMsg_GetSequence(msg);
  const char* op = nullptr;
  std::optional<std::string> value;
  if (natsMsgHeader_Get(msg, "KV-Operation", &op) == NATS_OK && op != nullptr &&
      (std::string_view(op) == "DEL" || std::string_view(op) == "PURGE")) {
    value.reset();
  } else {
    const char* data = natsMsg_GetData(msg);
    const int len = natsMsg_GetDataLength(msg);
    value.emplace(data != nullptr && len > 0 ? std::string(data, static_cast<size_t>(len)) : std::string());
  }
  natsMsg_Destroy(msg);
  return std::pair<uint64_t, std::optional<std::string>>{revision, std::move(value)};
}

Result<std::optional<std::string>> StateStore::get(const std::string& key) {
  if (!valid_state_key(key)) return Status::invalid("state store: invalid key '" + key + "'");
  auto r = read(key);
  if (!r) return r.status();
  {
    std::lock_guard<std::mutex> lock(mu_);
    Known& k = known_[key];
    k.revision = r->first;
    k.uncertain = false;
    k.attempted.clear();
  }
  return std::move(r->second);
}

Status StateStore::put(const std::string& key, const std::string& value) {
  if (!valid_state_key(key)) return Status::invalid("state store: invalid key '" + key + "'");
  std::optional<Known> known;
  {
    std::lock_guard<std::mutex> lock(mu_);
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
  uint64_t revision = 0;
  natsStatus s = NATS_OK;
  std::string what;
  if (last == 0) {
    what = "state store: create " + key;
    s = kvStore_Create(&revision, kv_, key.c_str(), value.data(), static_cast<int>(value.size()));
  } else {
    what = "state store: update " + key;
    s = kvStore_Update(&revision, kv_, key.c_str(), value.data(), static_cast<int>(value.size()), last);
  }
  Status status = write_status(s, what);
  std::lock_guard<std::mutex> lock(mu_);
  Known& k = known_[key];
  if (status) {
    k.revision = revision;
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

}  // namespace weir

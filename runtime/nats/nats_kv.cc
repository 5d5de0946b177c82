#include "runtime/nats/nats_kv.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>
#include <utility>

#include "runtime/base/log.h"
#include "runtime/nats/nats_status.h"
#include "runtime/nats/stream_ready.h"

namespace weir {

namespace {

constexpr int64_t kNanosPerMilli = 1000000;
// Stream lookup and creation (an R3 stream needs its Raft group) may take longer than
// a data request; they happen once, at open.
constexpr std::chrono::milliseconds kAdminTimeout{5000};
// Opening a bucket is retried this long while the answers mean "not yet" (js_KeyValue waits
// `timeout` per attempt; a fresh R3 bucket on a busy cluster answered later than 3 x 500 ms).
constexpr std::chrono::milliseconds kSetupTimeout{30000};

Result<jsCtx*> make_js(natsConnection* connection, std::chrono::milliseconds wait) {
  jsOptions options;
  jsOptions_Init(&options);
  options.Wait = wait.count();
  jsCtx* js = nullptr;
  natsStatus s = natsConnection_JetStream(&js, connection, &options);
  if (s != NATS_OK) return nats_status(s, "jetstream context");
  return js;
}

struct JsDeleter {
  void operator()(jsCtx* js) const { jsCtx_Destroy(js); }
};
struct KvDeleter {
  void operator()(kvStore* kv) const { kvStore_Destroy(kv); }
};
struct EntryDeleter {
  void operator()(kvEntry* e) const { kvEntry_Destroy(e); }
};
using JsPtr = std::unique_ptr<jsCtx, JsDeleter>;
using KvPtr = std::unique_ptr<kvStore, KvDeleter>;
using EntryPtr = std::unique_ptr<kvEntry, EntryDeleter>;

struct StreamInfoDeleter {
  void operator()(jsStreamInfo* si) const { jsStreamInfo_Destroy(si); }
};
using StreamInfoPtr = std::unique_ptr<jsStreamInfo, StreamInfoDeleter>;

// The bucket's stream info (one STREAM.INFO); NATS_NOT_FOUND when there is none.
natsStatus bucket_info(jsCtx* js, const std::string& stream, StreamInfoPtr* out) {
  jsStreamInfo* raw = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&raw, js, stream.c_str(), nullptr, &jerr);
  out->reset(raw);
  if (s != NATS_OK && jerr == JSStreamNotFoundErr) s = NATS_NOT_FOUND;
  return s;
}

bool led(const jsStreamInfo* si) {
  return si != nullptr && si->Cluster != nullptr && si->Cluster->Leader != nullptr && si->Cluster->Leader[0] != '\0';
}

// Looks the bucket up, creating it when missing; checks its TTL. One STREAM.INFO answers
// whether it exists, its TTL and its leader (js_KeyValue and kvStore_Status asked twice;
// start-up round trips, docs/adr/0215-start-up-round-trips.md).
// `*storage_refused`: the create was refused for want of storage (and no peer made it).
Status ensure_bucket(jsCtx* js, const NatsKvOptions& options, bool* storage_refused) {
  const std::string& bucket = options.bucket;
  const std::string stream = "KV_" + bucket;
  const int64_t ttl_ns = options.ttl.count() * kNanosPerMilli;
  StreamInfoPtr si;
  natsStatus s = bucket_info(js, stream, &si);
  if (s == NATS_NOT_FOUND && !options.create) return Status::not_found("kv bucket " + bucket + " does not exist");
  if (s == NATS_NOT_FOUND) {
    kvConfig config;
    kvConfig_Init(&config);
    config.Bucket = bucket.c_str();
    config.History = 1;
    config.TTL = ttl_ns;
    config.Replicas = options.replicas;
    config.StorageType = options.memory_storage ? js_MemoryStorage : js_FileStorage;
    if (!options.description.empty()) config.Description = options.description.c_str();
    if (options.max_value_size > 0) config.MaxValueSize = options.max_value_size;
    kvStore* raw = nullptr;
    s = js_CreateKeyValue(&raw, js, &config);
    if (raw != nullptr) kvStore_Destroy(raw);
    if (s != NATS_OK) {
      // Another instance may have created it first (with other settings, or just
      // slightly earlier): look again before giving up.
      Status create_error = nats_status(s, "kv create bucket " + bucket);
      const bool refused = nats_storage_refused(s);  // before the next call replaces cnats' last error
      if (bucket_info(js, stream, &si) != NATS_OK) {
        *storage_refused = refused;
        return create_error;
      }
      s = NATS_OK;
    }
  } else if (s != NATS_OK) {
    return nats_status(s, "kv open bucket " + bucket);
  }
  if (si) {  // found (not made here): the checks js_KeyValue and kvStore_Status made
    if (si->Config == nullptr || si->Config->MaxMsgsPerSubject < 1) {
      return Status::invalid("kv bucket " + bucket + ": stream " + stream + " is not a KV bucket");
    }
    const int64_t actual_ttl = si->Config->MaxAge;
    if (actual_ttl != ttl_ns) {
      return Status::invalid("kv bucket " + bucket + " exists with TTL " + std::to_string(actual_ttl / kNanosPerMilli) +
                             "ms, expected " + std::to_string(options.ttl.count()) + "ms");
    }
  }
  // A replicated bucket just created has no Raft leader for a moment, and a write then
  // fails with "no responders" (weir exited at start on a fresh 3-node cluster): wait
  // for one, bounded by the admin timeout.
  if (options.replicas > 1 && !led(si.get())) {
    const auto deadline = std::chrono::steady_clock::now() + kAdminTimeout;
    for (;;) {
      if (bucket_info(js, stream, &si) == NATS_OK && led(si.get())) break;
      if (std::chrono::steady_clock::now() > deadline)
        return Status::unavailable("kv bucket " + bucket + ": no leader");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // A bucket found made may still be in its creation on the server: a watch made on it
  // then never delivers (docs/adr/0321-a-stream-that-serves.md).
  if (Status serving = await_stream_serving(js, stream, "$KV." + bucket + ".serving", kAdminTimeout); !serving) {
    return serving;
  }
  return Status::ok();
}

class NatsKvWatch final : public KvWatch {
 public:
  NatsKvWatch(std::unique_ptr<NatsKvWatcher> watcher, std::function<void(const KvEvent&)> on_event)
      : watcher_(std::move(watcher)), on_event_(std::move(on_event)) {
    thread_ = std::thread([this] { run(); });
    pthread_setname_np(thread_.native_handle(), "weir-kv-watch");
  }
  ~NatsKvWatch() override {
    watcher_->stop();
    thread_.join();
  }

 private:
  void run() {
    bool warned = false;
    KvEvent event;
    Status error;
    for (;;) {
      switch (watcher_->next(std::chrono::milliseconds(60000), &event, &error)) {
        case NatsKvWatcher::Next::kStopped: return;
        case NatsKvWatcher::Next::kIdle:
        case NatsKvWatcher::Next::kInitialDone: continue;
        case NatsKvWatcher::Next::kFailed:
          if (!warned) log::warn("kv watch failed", {{"error", error.str()}});
          warned = true;
          // The next call may block until data or stop; a hard error would spin here.
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          continue;
        case NatsKvWatcher::Next::kEvent:
          warned = false;
          on_event_(event);
          continue;
      }
    }
  }

  std::unique_ptr<NatsKvWatcher> watcher_;
  std::function<void(const KvEvent&)> on_event_;
  std::thread thread_;
};

}  // namespace

bool valid_kv_key(std::string_view key) {
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

bool valid_kv_bucket(std::string_view bucket) {
  if (bucket.empty()) return false;
  return std::all_of(bucket.begin(), bucket.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

Result<std::unique_ptr<NatsKv>> NatsKv::open(natsConnection* connection, const NatsKvOptions& options) {
  if (connection == nullptr) return Status::invalid("kv open: no NATS connection");
  if (!valid_kv_bucket(options.bucket)) {
    return Status::invalid("kv bucket name '" + options.bucket + "' is not [A-Za-z0-9_-]+");
  }
  if (options.replicas < 1 || options.replicas > 5) {
    return Status::invalid("kv bucket " + options.bucket + ": replicas must be 1..5");
  }
  if (options.ttl.count() < 0) return Status::invalid("kv bucket " + options.bucket + ": negative TTL");
  if (options.timeout.count() <= 0) return Status::invalid("kv bucket " + options.bucket + ": timeout must be > 0");

  // A fresh (R3) cluster may not answer in time while it elects leaders, and a peer may be
  // creating the same bucket: "not yet" answers are retried with backoff up to kSetupTimeout
  // (docs/adr/0110-startup-on-any-nats.md); anything else is final at once.
  const auto deadline = std::chrono::steady_clock::now() + kSetupTimeout;
  auto transient = [](const Status& s) {
    return s.code() == Status::Code::kTimeout || s.code() == Status::Code::kUnavailable;
  };
  auto backoff = [](int attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(2000, 100 << std::min(attempt - 1, 5))));
  };
  // A create refused for want of storage is retried for kBorrowedStorageWait from the first
  // refusal: a sizing probe (this instance's, opening its streams meanwhile, or a peer's) may
  // hold the storage for a moment (docs/adr/0290-storage-borrowed-by-probes.md).
  std::optional<std::chrono::steady_clock::time_point> refused_until;
  for (int attempt = 1, refusals = 0;; ++attempt) {
    auto admin = make_js(connection, std::max(options.timeout, kAdminTimeout));
    if (!admin) return admin.status();
    JsPtr admin_js(admin.value());
    bool storage_refused = false;
    Status ensured = ensure_bucket(admin_js.get(), options, &storage_refused);
    if (ensured) break;
    if (storage_refused) {
      const auto now = std::chrono::steady_clock::now();
      if (!refused_until) refused_until = now + kBorrowedStorageWait;
      if (now >= *refused_until) return ensured;
      if (++refusals == 1) {
        log::info("kv bucket refused storage, retrying (a sizing probe may hold it)",
                  {{"bucket", options.bucket}, {"error", ensured.str()}});
      }
      std::this_thread::sleep_for(borrowed_storage_pause(refusals));
      continue;
    }
    // "not found" here comes from the status read of a bucket a peer has just created (the
    // stream is there, its info not yet everywhere): seen on a brand-new R3 cluster.
    const bool settling = ensured.code() == Status::Code::kNotFound && options.create;
    if ((!transient(ensured) && !settling) || std::chrono::steady_clock::now() >= deadline) return ensured;
    log::info("kv bucket not ready, retrying", {{"bucket", options.bucket}, {"error", ensured.str()}});
    backoff(attempt);
  }

  auto made = make_js(connection, options.timeout);
  if (!made) return made.status();
  JsPtr js(made.value());
  for (int attempt = 1;; ++attempt) {
    kvStore* kv = nullptr;
    natsStatus s = js_KeyValue(&kv, js.get(), options.bucket.c_str());
    if (s == NATS_OK) {
      return std::unique_ptr<NatsKv>(new NatsKv(connection, js.release(), kv, options.bucket, options.timeout));
    }
    Status error = nats_status(s, "kv open bucket " + options.bucket);
    if (!transient(error) || std::chrono::steady_clock::now() >= deadline) return error;
    if (attempt > 1) backoff(attempt - 1);
  }
}

NatsKv::NatsKv(natsConnection* connection, jsCtx* js, kvStore* kv, std::string bucket,
               std::chrono::milliseconds timeout)
    : connection_(connection),
      js_(js),
      kv_(kv),
      bucket_(std::move(bucket)),
      stream_("KV_" + bucket_),
      timeout_(timeout),
      async_errors_(std::make_unique<AsyncErrors>()) {}

NatsKv::~NatsKv() {
  kvStore_Destroy(kv_);
  jsCtx_Destroy(js_);
}

Result<uint64_t> NatsKv::put_checked(const std::string& key, std::string_view value, uint64_t last, const char* what) {
  if (!valid_kv_key(key)) return Status::invalid(std::string(what) + ": invalid key '" + key + "'");
  jsPubOptions options;
  jsPubOptions_Init(&options);
  if (last == 0) {
    options.ExpectNoMessage = true;
  } else {
    options.ExpectLastSubjectSeq = last;
  }
  jsPubAck* ack = nullptr;
  jsErrCode js_error = static_cast<jsErrCode>(0);
  const std::string subject = subject_of(key);
  natsStatus s = js_Publish(&ack, js_, subject.c_str(), value.data(), static_cast<int>(value.size()), &options,
                            &js_error);
  if (s != NATS_OK) return nats_status(s, std::string(what) + " " + bucket_ + "/" + key, js_error);
  const uint64_t revision = ack->Sequence;
  jsPubAck_Destroy(ack);
  return revision;
}

Result<uint64_t> NatsKv::create(const std::string& key, std::string_view value) {
  // Not kvStore_Create: over an existing key it asks a *direct* get (any replica) whether
  // the last entry is a delete marker and then compare-and-sets on that revision; a
  // diverged replica can make it overwrite a live key. Both steps here go to the leader.
  Result<uint64_t> created = put_checked(key, value, 0, "kv create");
  if (created || created.status().code() != Status::Code::kConflict) return created;
  Result<LastEntry> last = last_entry(key);
  if (!last) return last.status().code() == Status::Code::kNotFound ? created : last.status();
  if (!last->deleted) return created;  // a live key: the conflict stands
  return put_checked(key, value, last->revision, "kv create");
}

Result<uint64_t> NatsKv::update(const std::string& key, std::string_view value, uint64_t last) {
  if (last == 0) return Status::invalid("kv update " + bucket_ + "/" + key + ": revision 0");
  return put_checked(key, value, last, "kv update");
}

Status NatsKv::erase(const std::string& key, uint64_t last) {
  Result<uint64_t> r = delete_marker(key, last);
  return r ? Status::ok() : r.status();
}

Result<uint64_t> NatsKv::erase_returning_revision(const std::string& key) { return delete_marker(key, 0); }

Result<uint64_t> NatsKv::delete_marker(const std::string& key, uint64_t last) {
  if (!valid_kv_key(key)) return Status::invalid("kv delete: invalid key '" + key + "'");
  // The marker kvStore_Delete writes, published here for its revision (the PubAck) and,
  // with `last`, the expected-last-subject-sequence check cnats 3.4 has no call for.
  const std::string subject = subject_of(key);
  natsMsg* msg = nullptr;
  natsStatus s = natsMsg_Create(&msg, subject.c_str(), nullptr, nullptr, 0);
  if (s == NATS_OK) s = natsMsgHeader_Set(msg, "KV-Operation", "DEL");
  jsErrCode js_error = static_cast<jsErrCode>(0);
  jsPubAck* ack = nullptr;
  if (s == NATS_OK) {
    jsPubOptions options;
    jsPubOptions_Init(&options);
    if (last != 0) options.ExpectLastSubjectSeq = last;
    s = js_PublishMsg(&ack, js_, msg, &options, &js_error);
  }
  natsMsg_Destroy(msg);
  if (s != NATS_OK) return nats_status(s, "kv delete " + bucket_ + "/" + key, js_error);
  const uint64_t revision = ack->Sequence;
  jsPubAck_Destroy(ack);
  return revision;
}

Result<NatsKv::LastEntry> NatsKv::last_entry(const std::string& key) {
  if (!valid_kv_key(key)) return Status::invalid("kv get: invalid key '" + key + "'");
  // js_GetLastMsg goes through the STREAM.MSG.GET API, which the stream leader answers;
  // kvStore_Get uses direct get, which any replica may answer.
  natsMsg* raw = nullptr;
  jsErrCode js_error = static_cast<jsErrCode>(0);
  const std::string subject = subject_of(key);
  natsStatus s = js_GetLastMsg(&raw, js_, stream_.c_str(), subject.c_str(), nullptr, &js_error);
  if (s != NATS_OK && js_error == JSNoMessageFoundErr) s = NATS_NOT_FOUND;
  if (s != NATS_OK) {
    natsMsg_Destroy(raw);
    return nats_status(s, "kv get " + bucket_ + "/" + key, js_error);
  }
  LastEntry out;
  out.revision = natsMsg_GetSequence(raw);
  const char* op = nullptr;
  if (natsMsgHeader_Get(raw, "KV-Operation", &op) == NATS_OK && op != nullptr) {
    out.deleted = std::string_view(op) == "DEL" || std::string_view(op) == "PURGE";
  }
  const char* data = natsMsg_GetData(raw);
  const int len = natsMsg_GetDataLength(raw);
  if (!out.deleted && data != nullptr && len > 0) out.value.assign(data, len);
  natsMsg_Destroy(raw);
  return out;
}

Result<KvEntry> NatsKv::get(const std::string& key) {
  Result<LastEntry> last = last_entry(key);
  if (!last) return last.status();
  if (last->deleted) return Status::not_found("kv get " + bucket_ + "/" + key + ": deleted");
  return KvEntry{key, std::move(last->value), last->revision};
}

Result<std::unique_ptr<KvWatch>> NatsKv::watch(const std::string& key, std::function<void(const KvEvent&)> on_event) {
  if (!on_event) return Status::invalid("kv watch " + bucket_ + "/" + key + ": no callback");
  auto w = watcher(key);
  if (!w) return w.status();
  return std::unique_ptr<KvWatch>(std::make_unique<NatsKvWatch>(std::move(w.value()), std::move(on_event)));
}

// ---- beyond KvStore --------------------------------------------------------------------

Result<uint64_t> NatsKv::put(const std::string& key, std::string_view value) {
  if (!valid_kv_key(key)) return Status::invalid("kv put: invalid key '" + key + "'");
  uint64_t revision = 0;
  natsStatus s = kvStore_Put(&revision, kv_, key.c_str(), value.data(), static_cast<int>(value.size()));
  if (s != NATS_OK) return nats_status(s, "kv put " + bucket_ + "/" + key);
  return revision;
}

Result<std::vector<std::string>> NatsKv::keys(const std::string& prefix, std::chrono::milliseconds timeout) {
  kvWatchOptions options;
  kvWatchOptions_Init(&options);
  options.Timeout = timeout.count();
  kvKeysList list{};
  natsStatus s = kvStore_Keys(&list, kv_, &options);
  std::vector<std::string> out;
  if (s == NATS_NOT_FOUND) return out;  // an empty bucket
  if (s != NATS_OK) return nats_status(s, "kv keys " + bucket_);
  for (int i = 0; i < list.Count; ++i) {
    std::string_view k = list.Keys[i];
    if (k.substr(0, prefix.size()) == prefix) out.emplace_back(k.substr(prefix.size()));
  }
  kvKeysList_Destroy(&list);
  return out;
}

Result<uint64_t> NatsKv::last_revision() {
  StreamInfoPtr si;
  if (natsStatus s = bucket_info(js_, stream_, &si); s != NATS_OK) {
    return nats_status(s, "kv bucket " + bucket_ + ": stream info");
  }
  return si->State.LastSeq;
}

Status NatsKv::purge(const std::string& filter, uint64_t below) {
  jsOptions options;
  jsOptions_Init(&options);
  const std::string subject = subject_of(filter);
  options.Stream.Purge.Subject = subject.c_str();
  if (below != 0) options.Stream.Purge.Sequence = below;  // up to, not including
  jsErrCode js_error = static_cast<jsErrCode>(0);
  return nats_status(js_PurgeStream(js_, stream_.c_str(), &options, &js_error), "kv purge " + bucket_ + "/" + filter,
                     js_error);
}

struct NatsKv::AsyncErrors {
  std::atomic<int> failed{0};
  Mutex mu;
  std::string first GUARDED_BY(mu);
  void reset() {
    failed = 0;
    MutexLock lock(mu);
    first.clear();
  }
};

namespace {
void on_async_error(jsCtx*, jsPubAckErr* pae, void* closure) {
  auto* errors = static_cast<NatsKv::AsyncErrors*>(closure);
  if (errors->failed.fetch_add(1) == 0) {
    MutexLock lock(errors->mu);
    errors->first = pae->ErrText ? pae->ErrText : natsStatus_GetText(pae->Err);
  }
}
}  // namespace

// Also after a failed publish it waits for the acks of those sent, and takes back what is
// still unanswered after that: no handler call for this put_all starts once it returns.
Status NatsKv::put_all(const std::vector<std::pair<std::string, std::string>>& entries) {
  MutexLock lock(put_all_mu_);
  AsyncErrors& errors = *async_errors_;
  errors.reset();
  jsOptions ao;
  jsOptions_Init(&ao);
  ao.Wait = timeout_.count();
  ao.PublishAsync.MaxPending = 1024;
  ao.PublishAsync.StallWait = timeout_.count();
  ao.PublishAsync.ErrHandler = on_async_error;
  ao.PublishAsync.ErrHandlerClosure = &errors;
  jsCtx* ajs = nullptr;
  if (natsStatus s = natsConnection_JetStream(&ajs, connection_, &ao); s != NATS_OK) {
    return Status::unavailable(nats_status(s, "publish").message());
  }
  natsStatus s = NATS_OK;
  for (const auto& [key, value] : entries) {
    const std::string subject = subject_of(key);
    s = js_PublishAsync(ajs, subject.c_str(), value.data(), static_cast<int>(value.size()), nullptr);
    if (s != NATS_OK) break;
  }
  jsPubOptions wait;
  jsPubOptions_Init(&wait);
  wait.MaxWait = s == NATS_OK ? 60000 : timeout_.count();
  const natsStatus complete = js_PublishAsyncComplete(ajs, &wait);
  if (complete != NATS_OK) {
    natsMsgList pending;
    if (js_PublishAsyncGetPendingList(&pending, ajs) == NATS_OK) natsMsgList_Destroy(&pending);
  }
  if (s == NATS_OK) s = complete;
  jsCtx_Destroy(ajs);
  if (s != NATS_OK) return Status::unavailable(nats_status(s, "publish").message());
  if (errors.failed.load() > 0) {
    MutexLock elock(errors.mu);  // the handler may still be writing it
    return Status::unavailable(errors.first);
  }
  return Status::ok();
}

Result<std::unique_ptr<NatsKvWatcher>> NatsKv::watcher(const std::string& filter) {
  kvWatcher* w = nullptr;
  natsStatus s = kvStore_Watch(&w, kv_, filter.c_str(), nullptr);
  if (s != NATS_OK) return nats_status(s, "kv watch " + bucket_ + "/" + filter);
  return std::make_unique<NatsKvWatcher>(w);
}

NatsKvWatcher::~NatsKvWatcher() {
  stop();
  kvWatcher_Destroy(watcher_);
}

void NatsKvWatcher::stop() {
  if (!stopped_.exchange(true)) kvWatcher_Stop(watcher_);  // wakes kvWatcher_Next with NATS_ILLEGAL_STATE
}

NatsKvWatcher::Next NatsKvWatcher::next(std::chrono::milliseconds wait, KvEvent* event, Status* error) {
  kvEntry* raw = nullptr;
  natsStatus s = kvWatcher_Next(&raw, watcher_, wait.count());
  if (s == NATS_ILLEGAL_STATE) return Next::kStopped;
  if (s == NATS_TIMEOUT) return Next::kIdle;
  if (s != NATS_OK) {
    *error = nats_status(s, "kv watch");
    return Next::kFailed;
  }
  if (raw == nullptr) return Next::kInitialDone;
  EntryPtr entry(raw);
  const kvOperation op = kvEntry_Operation(raw);
  event->kind = (op == kvOp_Delete || op == kvOp_Purge) ? KvEvent::Kind::kDelete : KvEvent::Kind::kPut;
  event->key = kvEntry_Key(raw);
  event->revision = kvEntry_Revision(raw);
  event->value.clear();
  if (event->kind == KvEvent::Kind::kPut) {
    const void* data = kvEntry_Value(raw);
    const int len = kvEntry_ValueLen(raw);
    if (data != nullptr && len > 0) event->value.assign(static_cast<const char*>(data), len);
  }
  return Next::kEvent;
}

}  // namespace weir

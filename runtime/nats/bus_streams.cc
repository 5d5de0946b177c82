// Stream and consumer set-up (sizes planned against the server's storage, configs
// compared and updated, creation retried while a fresh server elects leaders) and the
// direct stream operations: bounds, state, get and delete of one message, and reading a
// range of messages in batches (read_stream).
#include <nats/nats.h>

#include <algorithm>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/base/log.h"
#include "runtime/nats/bus.h"
#include "runtime/nats/nats_msg.h"
#include "runtime/nats/nats_status.h"
#include "runtime/nats/pull_consumer_impl.h"
#include "runtime/nats/stream_ready.h"

namespace weir {

namespace {
Status js_status(natsStatus s, jsErrCode jerr, std::string_view what) { return nats_status(s, what, jerr); }
}  // namespace

namespace {
// Answers that mean "not yet" rather than "no" at start-up: the server or a fresh cluster
// is still electing leaders, or the API did not answer in time.
bool transient(natsStatus s, jsErrCode jerr) {
  if (s == NATS_TIMEOUT || s == NATS_NO_RESPONDERS || s == NATS_CONNECTION_DISCONNECTED) return true;
  // 10049 (generic create error) comes back when a peer's create of the same stream is
  // still being applied: the next attempt finds the stream (10058) and confirms it.
  // 10005 (no suitable peers for placement): on a brand-new cluster the meta leader counts
  // a peer as offline until that peer's first statistics reach it, a second or so after
  // /healthz is green; a peer that is really down comes back or the deadline says so.
  return jerr == JSClusterNotAvailErr || jerr == JSClusterNotLeaderErr || jerr == JSStreamCreateErr ||
         jerr == JSClusterNoPeersErr;
}

// Waits before attempt `n` (1-based) of a start-up call: 100 ms doubling to 2 s.
void setup_backoff(int n) {
  std::this_thread::sleep_for(std::chrono::milliseconds(std::min(2000, 100 << std::min(n - 1, 5))));
}

std::string size_text(int64_t bytes) {
  if (bytes % (1LL << 30) == 0) return std::to_string(bytes >> 30) + "GiB";
  if (bytes % (1LL << 20) == 0) return std::to_string(bytes >> 20) + "MiB";
  return std::to_string(bytes) + " bytes";
}

constexpr int64_t kMinStreamBytes = 8LL << 20;

int64_t number_at(const nlohmann::json& j, const char* key, int64_t absent) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : absent;
}
std::string text_at(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// True when a stream's config as the server reports it is what `cfg` would create: every
// field weir sets, and the limits weir leaves at "none" (so a hand-set limit is still reset
// by the update, as without a prefetch).
bool same_stream_config(const nlohmann::json& have, const jsStreamConfig& cfg) {
  if (!have.is_object()) return false;
  auto subjects = have.find("subjects");
  if (subjects == have.end() || !subjects->is_array() || subjects->size() != static_cast<size_t>(cfg.SubjectsLen)) {
    return false;
  }
  for (int i = 0; i < cfg.SubjectsLen; ++i) {
    if (!(*subjects)[i].is_string() || (*subjects)[i].get<std::string>() != cfg.Subjects[i]) return false;
  }
  const char* retention = cfg.Retention == js_WorkQueuePolicy ? "workqueue" : "limits";
  const char* discard = cfg.Discard == js_DiscardNew ? "new" : "old";
  return text_at(have, "retention") == retention && text_at(have, "storage") == "file" &&
         text_at(have, "discard") == discard && number_at(have, "num_replicas", 1) == cfg.Replicas &&
         number_at(have, "duplicate_window", 0) == cfg.Duplicates && number_at(have, "max_bytes", -1) == cfg.MaxBytes &&
         number_at(have, "max_age", 0) == cfg.MaxAge && number_at(have, "max_msgs", -1) == -1 &&
         number_at(have, "max_msgs_per_subject", -1) == -1 && number_at(have, "max_msg_size", -1) == -1 &&
         number_at(have, "max_consumers", -1) == -1 && !have.value("sealed", false) &&
         !have.value("deny_delete", false) && !have.value("deny_purge", false);
}

// The same for a durable pull consumer weir creates (Bus::pull_consumer).
bool same_consumer_config(const nlohmann::json& have, const jsConsumerConfig& cc) {
  if (!have.is_object()) return false;
  const int64_t replicas = number_at(have, "num_replicas", 0);
  return text_at(have, "durable_name") == cc.Durable && text_at(have, "filter_subject") == cc.FilterSubject &&
         text_at(have, "deliver_subject").empty() && text_at(have, "ack_policy") == "explicit" &&
         text_at(have, "deliver_policy") == "all" && number_at(have, "ack_wait", 0) == cc.AckWait &&
         number_at(have, "max_ack_pending", 0) == cc.MaxAckPending &&
         number_at(have, "max_deliver", -1) == cc.MaxDeliver && number_at(have, "max_waiting", 0) == cc.MaxWaiting &&
         replicas == cc.Replicas && have.value("mem_storage", false) == cc.MemoryStorage;
}

// A durable's config as the starvation watch creates it again (same_consumer_config holds).
std::string consumer_create_body(const std::string& stream, const jsConsumerConfig& cc) {
  nlohmann::json config{{"durable_name", cc.Durable},   {"filter_subject", cc.FilterSubject},
                        {"ack_policy", "explicit"},     {"deliver_policy", "all"},
                        {"ack_wait", cc.AckWait},       {"max_ack_pending", cc.MaxAckPending},
                        {"max_deliver", cc.MaxDeliver}, {"max_waiting", cc.MaxWaiting},
                        {"replay_policy", "instant"}};
  if (cc.Replicas > 0) config["num_replicas"] = cc.Replicas;
  if (cc.MemoryStorage) config["mem_storage"] = true;
  return nlohmann::json{{"stream_name", stream}, {"config", std::move(config)}}.dump();
}
}  // namespace

// Create-or-confirm, safe when several instances start at the same instant and on a server
// that is still coming up (two instances racing got JetStream error 10065; ADR 0110):
//  - 10058 name exists → update it to this config;
//  - 10065 subjects overlap → a racing peer created it a moment ago: if a stream of this
//    name exists, update it; otherwise another stream owns the subjects (a clear error);
//  - 10047/10023 no storage → first asked again for 5 s (a sizing probe, ours or a peer's,
//    may hold the space for a moment: ADR 0290); then the server's JetStream limit
//    (max_file_store) is smaller than asked: halve the size down to 8 MiB and say what was
//    chosen;
//  - timeouts, no responders, no leader yet, no peers for placement yet → retried with
//    backoff up to setup_timeout.
namespace {
// Creates stream cfg.Name or, when it exists, updates it to `cfg`. A subject overlap with a
// stream of that name is a peer's create that landed first (confirmed like an existing
// one); with no such stream the subjects belong to someone else: `*foreign` is set.
natsStatus add_or_update(jsCtx* js, jsStreamConfig& cfg, jsErrCode* jerr, bool* foreign) {
  jsStreamInfo* si = nullptr;
  *jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_AddStream(&si, js, &cfg, nullptr, jerr);
  if (si) jsStreamInfo_Destroy(si), si = nullptr;
  if (s != NATS_OK && *jerr == JSStreamSubjectOverlapErr) {
    jsErrCode ierr = static_cast<jsErrCode>(0);
    natsStatus is = js_GetStreamInfo(&si, js, cfg.Name, nullptr, &ierr);
    if (si) jsStreamInfo_Destroy(si), si = nullptr;
    if (is == NATS_OK) {
      *jerr = JSStreamNameExistErr;  // a peer made it first: confirm it below
    } else if (is == NATS_NOT_FOUND || ierr == JSStreamNotFoundErr) {
      *foreign = true;
      return s;
    }
  }
  if (s != NATS_OK && *jerr == JSStreamNameExistErr) {
    *jerr = static_cast<jsErrCode>(0);
    s = js_UpdateStream(&si, js, &cfg, nullptr, jerr);
    if (si) jsStreamInfo_Destroy(si), si = nullptr;
  }
  return s;
}

// JetStream refused the storage: halves cfg.MaxBytes while that stays at least
// kMinStreamBytes (nullopt: try again), else the operator's error.
std::optional<Status> shrink_or_fail(jsStreamConfig& cfg, const std::string& name, jsErrCode jerr) {
  if (cfg.MaxBytes <= 0) {
    return Status::unavailable("create stream " + name +
                               ": JetStream's storage is fully reserved by other "
                               "streams (JetStream error " +
                               std::to_string(jerr) +
                               "); raise the server's "
                               "jetstream max_file_store, or lower nats.stream_max_bytes");
  }
  if (cfg.MaxBytes / 2 >= kMinStreamBytes) {
    cfg.MaxBytes /= 2;
    return std::nullopt;
  }
  return Status::unavailable("create stream " + name + ": JetStream has no storage left for it even at " +
                             size_text(cfg.MaxBytes) + " (JetStream error " + std::to_string(jerr) +
                             "); raise the server's jetstream max_file_store, free space, or lower "
                             "nats.stream_max_bytes");
}
}  // namespace

Status Bus::add_or_update_stream(const std::string& name, const std::vector<std::string>& subjects, bool work_queue,
                                 int64_t max_age_ns, std::optional<int64_t> max_bytes) {
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  cfg.Name = name.c_str();
  std::vector<const char*> subs;
  subs.reserve(subjects.size());
  for (const auto& s : subjects) subs.push_back(s.c_str());
  cfg.Subjects = subs.data();
  cfg.SubjectsLen = static_cast<int>(subs.size());
  cfg.Storage = js_FileStorage;
  cfg.Retention = work_queue ? js_WorkQueuePolicy : js_LimitsPolicy;
  cfg.Replicas = options_.stream_replicas;
  cfg.Duplicates = std::chrono::duration_cast<std::chrono::nanoseconds>(options_.dedup_window).count();
  // The flow stream size (nats.stream_max_bytes) bounds flow streams only. The dead-letter
  // stream keeps every dead letter (dlq.max_bytes 0, docs/configuration.md): with a byte limit and
  // DiscardOld, a burst of dead letters would silently push out the oldest.
  cfg.MaxBytes = work_queue ? options_.stream_max_bytes : -1;
  cfg.MaxAge = max_age_ns;
  // A full stream refuses new writes (ingress answers 503) instead of dropping old ones.
  cfg.Discard = work_queue ? js_DiscardNew : js_DiscardOld;
  // Dead letters: an explicit limit (0 = none) with discard-new, so a full stream refuses a
  // dead letter (the stage holds the event) instead of dropping the oldest (ADR 0090).
  if (max_bytes) {
    cfg.MaxBytes = *max_bytes > 0 ? *max_bytes : -1;
    cfg.Discard = js_DiscardNew;
  }
  auto info = prefetched(true, name, true);
  const bool as_made = info && info->is_object() && same_stream_config((*info)["config"], cfg);
  // As it would be made: confirmed without a request (ADR 0215). Made or found, it is used
  // only once it serves: a stream a peer is still creating on the server gives consumers
  // that never deliver (docs/adr/0321-a-stream-that-serves.md).
  if (Status made = as_made ? Status::ok() : create_stream(cfg, name, subjects.front()); !made) return made;
  const std::string& all = subjects.front();  // "<prefix>.>"
  return await_stream_serving(js_, name, all.substr(0, all.size() - 1) + "serving", options_.setup_timeout);
}

Status Bus::create_stream(jsStreamConfig& cfg, const std::string& name, const std::string& subject) {
  const int64_t asked = cfg.MaxBytes;
  const auto deadline = std::chrono::steady_clock::now() + options_.setup_timeout;
  std::optional<std::chrono::steady_clock::time_point> refused_until;  // set at the first storage refusal
  for (int attempt = 1, refusals = 0;; ++attempt) {
    jsErrCode jerr = static_cast<jsErrCode>(0);
    bool foreign = false;
    natsStatus s = add_or_update(js_, cfg, &jerr, &foreign);
    if (foreign) {
      return Status::invalid("create stream " + name + ": its subjects (" + subject +
                             ") belong to another stream on this NATS; remove that stream or use another "
                             "cluster name");
    }
    if (s == NATS_OK) {
      if (cfg.MaxBytes != asked) {
        log::warn("stream sized to fit the server's JetStream storage", {{"stream", name},
                                                                         {"max_bytes", size_text(cfg.MaxBytes)},
                                                                         {"asked", size_text(asked)},
                                                                         {"key", "nats.stream_max_bytes"}});
      }
      return Status::ok();
    }
    if (nats_storage_refused(s, jerr)) {
      // First the same size again for a while: a sizing probe may hold the space for a
      // moment. Only a refusal that outlasts it shrinks the stream or is reported.
      const auto now = std::chrono::steady_clock::now();
      if (!refused_until) refused_until = now + kBorrowedStorageWait;
      if (now < *refused_until) {
        if (++refusals == 1) {
          log::info("JetStream storage refused, retrying (a sizing probe may hold it)",
                    {{"stream", name}, {"error", js_status(s, jerr, "create").str()}});
        }
        std::this_thread::sleep_for(borrowed_storage_pause(refusals));
        continue;
      }
      if (auto failed = shrink_or_fail(cfg, name, jerr)) return *failed;
      continue;
    }
    if (transient(s, jerr) && std::chrono::steady_clock::now() < deadline) {
      if (attempt == 1 || attempt % 10 == 0) {
        log::info("JetStream not ready, retrying", {{"stream", name}, {"error", js_status(s, jerr, "create").str()}});
      }
      setup_backoff(attempt);
      continue;
    }
    return js_status(s, jerr, "create stream " + name);
  }
}

Status Bus::plan_stream_sizes(const std::vector<std::string>& streams) {
  if (streams.empty()) return Status::ok();
  const int64_t n = static_cast<int64_t>(streams.size());
  // The smallest share worth having: 8 MiB, or the configured size when that is smaller.
  const int64_t floor = std::min(kMinStreamBytes, options_.stream_max_bytes);
  const int64_t want = options_.stream_max_bytes * n;
  // A budget too small for weir may be one measured while a peer's probe held the storage,
  // or before a peer's streams (the same ones) counted as ours: measured again, with fresh
  // stream info, until kBorrowedStorageWait says it is what the server has.
  const auto refused_until = std::chrono::steady_clock::now() + kBorrowedStorageWait;
  for (int attempt = 1;; ++attempt) {
    // What these streams reserve already (a restart re-ensures them with the same share).
    int64_t ours = 0;
    for (const auto& name : streams) {
      if (auto info = attempt == 1 ? prefetched(true, name, false) : std::nullopt) {  // no request (ADR 0215)
        if (info->is_object()) ours += std::max<int64_t>(0, number_at((*info)["config"], "max_bytes", -1));
        continue;
      }
      jsStreamInfo* si = nullptr;
      if (js_GetStreamInfo(&si, js_, name.c_str(), nullptr, nullptr) == NATS_OK && si) {
        if (si->Config && si->Config->MaxBytes > 0) ours += si->Config->MaxBytes;
      }
      if (si) jsStreamInfo_Destroy(si);
    }
    if (want <= ours) return Status::ok();
    auto free_bytes = probe_free_storage(want - ours, floor / 2);
    if (!free_bytes) return Status::ok();  // not a storage answer: nothing learned; creation reports errors itself
    if (*free_bytes == want - ours) return Status::ok();  // everything fits as configured
    const int64_t budget = std::max<int64_t>(*free_bytes, 0) + ours;
    // One share stays unreserved: streams without a size limit (dead letters, KV buckets) are
    // refused by the server once reservations take all of its storage.
    int64_t share = (budget / (n + 1)) & ~((int64_t{1} << 20) - 1);  // whole MiB
    if (share < floor && std::chrono::steady_clock::now() < refused_until) {
      if (attempt == 1) {
        log::info("JetStream storage looks too small for weir's streams, measuring again (a sizing probe may hold it)",
                  {{"streams", std::to_string(n)}, {"available", size_text(budget)}});
      }
      std::this_thread::sleep_for(borrowed_storage_pause(attempt));
      continue;
    }
    if (share < floor) {
      return Status::unavailable("JetStream storage is too small for weir: " + std::to_string(n) +
                                 " streams need at least " + size_text(floor) +
                                 " each (and as much left "
                                 "unreserved), the server can give " +
                                 size_text(budget) +
                                 " in all; raise the server's jetstream max_file_store or free "
                                 "space (weir sizes its streams with nats.stream_max_bytes)");
    }
    share = std::min(share, options_.stream_max_bytes);
    log::warn("streams sized to fit the server's JetStream storage", {{"streams", std::to_string(n)},
                                                                      {"max_bytes_each", size_text(share)},
                                                                      {"asked", size_text(options_.stream_max_bytes)},
                                                                      {"available", size_text(budget)},
                                                                      {"key", "nats.stream_max_bytes"}});
    options_.stream_max_bytes = share;
    return Status::ok();
  }
}

std::optional<int64_t> Bus::probe_free_storage(int64_t size, int64_t smallest) {
  // The largest probe the server accepts, halving from `size`.
  natsInbox* ib = nullptr;
  natsInbox_Create(&ib);
  std::string token(static_cast<const char*>(ib));
  natsInbox_Destroy(ib);
  for (char& c : token) {
    if (c == '.') c = '_';
  }
  const std::string probe = "weir_probe" + token.substr(token.find('_', 1));
  const std::string subject = probe + ".x";
  for (; size > 0 && size >= smallest; size /= 2) {
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    cfg.Name = probe.c_str();
    const char* subs[] = {subject.c_str()};
    cfg.Subjects = subs;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_FileStorage;
    cfg.Replicas = options_.stream_replicas;
    cfg.MaxBytes = size;
    jsStreamInfo* si = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_AddStream(&si, js_, &cfg, nullptr, &jerr);
    if (si) jsStreamInfo_Destroy(si);
    if (s == NATS_OK) {
      js_DeleteStream(js_, probe.c_str(), nullptr, nullptr);
      return size;
    }
    if (!nats_storage_refused(s, jerr)) return std::nullopt;
  }
  return -1;
}

Status Bus::ensure_flow_stream(std::string_view flow) {
  std::string f(flow);
  std::string name = layout::flow_stream(f);
  // nats-server enforces a lowered MaxBytes by deleting stored messages, DiscardNew or
  // not: refuse to shrink a stream below what it holds (those are acked events).
  Result<StreamState> st = Status::not_found("");
  if (auto info = prefetched(true, name, false)) {  // answered: no request (ADR 0215)
    if (info->is_object()) {
      StreamState known;
      known.bytes = number_at((*info)["state"], "bytes", 0);
      known.max_bytes = number_at((*info)["config"], "max_bytes", -1);
      st = known;
    }
  } else {
    st = stream_state(name);
  }
  if (st && options_.stream_max_bytes > 0 && st->bytes > options_.stream_max_bytes &&
      st->max_bytes != options_.stream_max_bytes) {
    return Status::invalid("stream " + name + " holds " + std::to_string(st->bytes) +
                           " bytes, more than nats.stream_max_bytes (" + std::to_string(options_.stream_max_bytes) +
                           "): shrinking it would delete stored events; raise nats.stream_max_bytes or let the flow "
                           "drain first");
  }
  return add_or_update_stream(name, {layout::flow_subjects(f)}, true, 0);
}

Status Bus::ensure_dlq_stream(std::chrono::milliseconds max_age, int64_t max_bytes) {
  // Dead letters are kept until replayed, unless the config bounds them
  // (dlq.max_age, dlq.max_bytes: ADR 0090).
  return add_or_update_stream(layout::dlq_stream(), {layout::dlq_subjects()}, false,
                              std::chrono::duration_cast<std::chrono::nanoseconds>(max_age).count(), max_bytes);
}

Result<std::unique_ptr<PullConsumer>> Bus::pull_consumer(const ConsumerOptions& o) {
  jsConsumerConfig cc;
  jsConsumerConfig_Init(&cc);
  cc.Durable = o.durable.c_str();
  cc.FilterSubject = o.filter_subject.c_str();
  cc.AckPolicy = js_AckExplicit;
  cc.DeliverPolicy = js_DeliverAll;
  cc.AckWait = std::chrono::duration_cast<std::chrono::nanoseconds>(o.ack_wait).count();
  cc.MaxAckPending = o.max_ack_pending;
  cc.MaxDeliver = -1;
  cc.MaxWaiting = 512;
  if (o.replicas > 0) cc.Replicas = o.replicas;
  // On one server the durable's state lives in the server's memory: its state file,
  // rewritten up to ten times a second per consumer, was most of nats-server's extra cost
  // with many flows; a restarted server forgets the durable and the watch creates it again
  // from what the stream holds (docs/adr/0320-consumer-state-in-memory.md).
  cc.MemoryStorage = o.memory_state.value_or((o.replicas > 0 ? o.replicas : options_.stream_replicas) <= 1);
  // Create-or-confirm with retries, like streams: a consumer that exists with another config
  // (a changed AckWait) is updated; a server still electing leaders is waited for.
  auto have = prefetched(false, o.stream + "/" + o.durable, true);
  const bool confirmed = have && same_consumer_config(*have, cc);  // no request (ADR 0215)
  const auto deadline = std::chrono::steady_clock::now() + options_.setup_timeout;
  for (int attempt = 1; !confirmed; ++attempt) {
    jsConsumerInfo* ci = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_AddConsumer(&ci, js_, o.stream.c_str(), &cc, nullptr, &jerr);
    if (ci) jsConsumerInfo_Destroy(ci), ci = nullptr;
    if (s != NATS_OK && jerr != 0 && !transient(s, jerr)) {
      jerr = static_cast<jsErrCode>(0);
      s = js_UpdateConsumer(&ci, js_, o.stream.c_str(), &cc, nullptr, &jerr);
      if (ci) jsConsumerInfo_Destroy(ci), ci = nullptr;
    }
    if (s == NATS_OK) break;
    if (!transient(s, jerr) || std::chrono::steady_clock::now() >= deadline) {
      return js_status(s, jerr, "create consumer " + o.durable);
    }
    if (attempt == 1 || attempt % 10 == 0) {
      log::info("JetStream not ready, retrying",
                {{"consumer", o.durable}, {"error", js_status(s, jerr, "create").str()}});
    }
    setup_backoff(attempt);
  }
  std::unique_ptr<PullConsumer> pc(new PullConsumer());
  pc->impl_ = std::make_shared<PullConsumer::Impl>();
  auto& c = *pc->impl_;
  c.bus = this;
  c.nc = nc_;
  if (o.loop != ConsumerLoop::kNone && options_.flow_loop) {
    auto fl = flow_loop(o.loop);
    if (!fl) return fl.status();
    c.flow_loop = fl.value();
    c.sink_first = o.loop == ConsumerLoop::kSinks;
    c.loop = c.flow_loop->pub.get();
    c.nc = nullptr;  // the loop's, set on its thread at start (subscribe_on_loop)
  } else {
    c.pool_consumers = &consumer_count_;
  }
  c.durable = o.durable;
  c.next_subject = "$JS.API.CONSUMER.MSG.NEXT." + o.stream + "." + o.durable;
  natsInbox* ib = nullptr;
  natsInbox_Create(&ib);
  c.inbox_prefix = std::string(static_cast<const char*>(ib)) + ".";
  natsInbox_Destroy(ib);
  c.kick_subject = c.inbox_prefix + "k";
  c.expires = std::max(o.request_expires, std::chrono::milliseconds(100));
  c.starve_check = o.starve_check;
  c.memory_state = cc.MemoryStorage;
  c.ack_wait = o.ack_wait;
  {
    MutexLock lock(c.mu);
    c.check_every = o.starve_check;
  }
  c.recreated_metric = o.recreated;
  c.corrupt_metric = o.corrupt;
  c.on_tick = o.on_tick;
  c.stream_name = o.stream;
  c.filter = o.filter_subject;
  c.create_body = consumer_create_body(o.stream, cc);
  return pc;
}

Result<std::pair<uint64_t, uint64_t>> Bus::stream_bounds(const std::string& stream) {
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&si, js_, stream.c_str(), nullptr, &jerr);
  if (s != NATS_OK) return js_status(s, jerr, "stream info " + stream);
  std::pair<uint64_t, uint64_t> out{si->State.FirstSeq, si->State.LastSeq};
  if (si->State.Msgs == 0) out = {0, 0};
  jsStreamInfo_Destroy(si);
  return out;
}

Result<Bus::StreamState> Bus::stream_state(const std::string& stream, std::chrono::milliseconds wait) {
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = wait.count();
  natsStatus s = js_GetStreamInfo(&si, js_, stream.c_str(), wait.count() > 0 ? &jo : nullptr, &jerr);
  if (s != NATS_OK) return js_status(s, jerr, "stream info " + stream);
  StreamState out;
  out.bytes = static_cast<int64_t>(si->State.Bytes);
  out.messages = static_cast<int64_t>(si->State.Msgs);
  out.last_seq = si->State.LastSeq;
  if (si->Config) out.max_bytes = si->Config->MaxBytes;
  jsStreamInfo_Destroy(si);
  return out;
}

namespace {
// Subject, data and headers of a stored message (sequence and time are the caller's).
StoredMessage stored_message(natsMsg* msg) {
  StoredMessage out;
  out.subject = natsMsg_GetSubject(msg);
  out.data.assign(natsMsg_GetData(msg), static_cast<size_t>(natsMsg_GetDataLength(msg)));
  const char** keys = nullptr;
  int count = 0;
  if (natsMsgHeader_Keys(msg, &keys, &count) == NATS_OK) {
    for (int i = 0; i < count; ++i) {
      const char* v = nullptr;
      if (natsMsgHeader_Get(msg, keys[i], &v) == NATS_OK && v) out.headers.emplace_back(keys[i], v);
    }
    free(static_cast<void*>(keys));
  }
  return out;
}
}  // namespace

Result<StoredMessage> Bus::get_message(const std::string& stream, uint64_t seq) {
  natsMsg* msg = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_GetMsg(&msg, js_, stream.c_str(), seq, nullptr, &jerr);
  if (s != NATS_OK) return js_status(s, jerr, "get message");
  StoredMessage out = stored_message(msg);
  out.sequence = seq;
  out.time_ns = natsMsg_GetTime(msg);
  free_nats_msg(msg);
  return out;
}

Status Bus::read_stream(const std::string& stream, const std::string& subject, uint64_t from_seq, size_t batch,
                        std::chrono::milliseconds timeout, const std::function<bool(StoredMessage&&)>& visit) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  auto left_ms = [&] {
    return std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
  };
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = stream.c_str();
  so.Config.DeliverPolicy = js_DeliverByStartSequence;
  so.Config.OptStartSeq = std::max<uint64_t>(from_seq, 1);
  so.Config.AckPolicy = js_AckNone;
  so.Config.MemoryStorage = true;
  // Removed by the server if this process dies before it deletes the consumer.
  so.Config.InactiveThreshold = std::chrono::nanoseconds(std::chrono::minutes(1)).count();
  natsSubscription* sub = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_PullSubscribe(&sub, js_, subject.c_str(), nullptr, nullptr, &so, &jerr);
  if (s != NATS_OK) return js_status(s, jerr, "read " + stream);
  struct Closer {  // unsubscribing deletes the consumer the library created
    natsSubscription* sub;
    ~Closer() {
      natsSubscription_Unsubscribe(sub);
      natsSubscription_Destroy(sub);
    }
  } closer{sub};
  // What is there to read: a fetch for more than the consumer has pending would wait for
  // new messages until its expiry.
  jsConsumerInfo* ci = nullptr;
  s = natsSubscription_GetConsumerInfo(&ci, sub, nullptr, &jerr);
  if (s != NATS_OK) return js_status(s, jerr, "read " + stream);
  uint64_t pending = ci->NumPending;
  jsConsumerInfo_Destroy(ci);
  const int per_fetch = static_cast<int>(std::clamp<size_t>(batch, 1, 1024));
  while (pending > 0) {
    if (left_ms() == 0) return Status::unavailable("read " + stream + ": timed out");
    jsFetchRequest req;
    jsFetchRequest_Init(&req);
    req.Batch = static_cast<int>(std::min<uint64_t>(pending, static_cast<uint64_t>(per_fetch)));
    req.MaxBytes = 8 << 20;
    req.Expires = left_ms() * 1'000'000;
    natsMsgList list;
    s = natsSubscription_FetchRequest(&list, sub, &req);
    if (s != NATS_OK) return js_status(s, static_cast<jsErrCode>(0), "read " + stream);
    bool go_on = true;
    for (int i = 0; i < list.Count; ++i) {
      natsMsg* msg = list.Msgs[i];
      list.Msgs[i] = nullptr;
      jsMsgMetaData* meta = nullptr;
      if (go_on && natsMsg_GetMetaData(&meta, msg) == NATS_OK) {
        StoredMessage m = stored_message(msg);
        m.sequence = meta->Sequence.Stream;
        m.time_ns = meta->Timestamp;
        pending = meta->NumPending;
        jsMsgMetaData_Destroy(meta);
        go_on = visit(std::move(m));
      }
      free_nats_msg(msg);
    }
    natsMsgList_Destroy(&list);
    if (!go_on) break;
  }
  return Status::ok();
}

Status Bus::delete_message(const std::string& stream, uint64_t seq) {
  jsErrCode jerr = static_cast<jsErrCode>(0);
  return js_status(js_DeleteMsg(js_, stream.c_str(), seq, nullptr, &jerr), jerr, "delete message");
}

}  // namespace weir

// weir-jsbench: raw JetStream ceilings with cnats, the numbers weir's own stages are held to.
//
//   weir-jsbench publish --count N [--size 300]  async publish N messages (js_PublishAsync,
//                                                  --max-pending in flight); rate = N / time
//                                                  until every PubAck is in.
//   weir-jsbench consume --count N                 pre-fill N, then pull-consume them with
//                                                  natsSubscription_Fetch batches (--batch 250)
//                                                  and ack each; rate over the consume phase.
//   weir-jsbench hop --count N                     pre-fill N into stream A, then per fetched
//                                                  batch: publish each message to stream B
//                                                  async, wait for the batch's PubAcks, ack the
//                                                  batch's inputs (publish before ack). Batches
//                                                  are pipelined two deep: batch k+1 is fetched
//                                                  and published while batch k's PubAcks come.
//   weir-jsbench pipeline --rate R --seconds S     a weir event's three JetStream legs at a
//                                                  fixed rate, with the least traffic a client
//                                                  can make: publish to A with a Nats-Msg-Id
//                                                  and a PubAck (ingress); a push consumer on
//                                                  A publishes each message to B and acks it
//                                                  (the flow stage); a push consumer on B acks
//                                                  each (the sink stage). Four messages in and
//                                                  four out per event, as weir's connections
//                                                  count them, on three connections with
//                                                  SendAsap. bench/paced.sh measures
//                                                  nats-server's CPU while it runs: the
//                                                  server's cost per event at that rate for any
//                                                  client (the paced reference of docs/bench.md).
//     --flows N [--layout streams|shared-stream|shared-in|split-in|shared-consumers|two-streams]
//                                                  the same legs for N flows in weir's layout
//                                                  (a stream per flow) or a shared one
//                                                  (run_pipeline_flows); --consumers pull,
//                                                  --sinks, --burst and --ack-after-puback
//                                                  make it read and load like weir
//                                                  (docs/adr/0322-a-model-of-the-bus.md).
//
// Each run creates throwaway streams (JSBENCH_<pid>_<time>_A/B) on --nats and deletes them at
// the end, also when the run fails. One JSON object on stdout; exit 0 on success, 1 when a
// run failed (errors, missing messages), 2 on a usage error.
//
// Units (cnats 3.4.1): stream/consumer durations are nanoseconds; jsOptions.Wait,
// PubOptions.MaxWait and the Fetch timeout are milliseconds. Connections: publishing and
// fetching/acking use one connection each, both without SendAsap by default. SendAsap saves
// the flusher's ~1 ms per pull request, but turns each of a batch's 250 acks into its own
// socket write; measured here that cost more (consume 52k/s with it, 63k/s without, same
// load). Both are flags (--pub-send-asap, --sub-send-asap), to measure the other choices.
//
// Threading: the main thread runs the benchmark; cnats threads call the PubAck handler, which
// only touches atomics.

#include <nats/nats.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <string>
#include <vector>

namespace weir::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Setup failures end the run with a message; the streams are still deleted by their guards.
class BenchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

void need(natsStatus s, const std::string& what, jsErrCode jerr = static_cast<jsErrCode>(0)) {
  if (s == NATS_OK) return;
  std::string msg = what + ": " + natsStatus_GetText(s);
  if (jerr) msg += " (jetstream error " + std::to_string(static_cast<int>(jerr)) + ")";
  const char* last = nats_GetLastError(nullptr);
  if (last && *last) msg += std::string(" - ") + last;
  throw BenchError(msg);
}

struct ConnDeleter {
  void operator()(natsConnection* c) const {
    natsConnection_Close(c);
    natsConnection_Destroy(c);
  }
};
struct OptsDeleter {
  void operator()(natsOptions* o) const { natsOptions_Destroy(o); }
};
struct JsDeleter {
  void operator()(jsCtx* j) const { jsCtx_Destroy(j); }
};
struct SubDeleter {
  void operator()(natsSubscription* s) const {
    natsSubscription_Unsubscribe(s);
    natsSubscription_Destroy(s);
  }
};
using ConnPtr = std::unique_ptr<natsConnection, ConnDeleter>;
using JsPtr = std::unique_ptr<jsCtx, JsDeleter>;
using SubPtr = std::unique_ptr<natsSubscription, SubDeleter>;

struct Config {
  std::string mode;
  std::string nats_url = "nats://127.0.0.1:4222";
  int64_t count = 100000;
  int size = 300;
  int64_t max_pending = 512;
  int batch = 250;
  std::string storage = "file";
  std::string retention = "workqueue";
  bool pub_send_asap = false;
  bool sub_send_asap = false;
  bool msg_id = false;
  bool one_stream = false;  // hop
  int64_t max_ack_pending = 20000;
  double rate = 1000;              // pipeline
  double seconds = 5;              // pipeline
  int flows = 0;                   // pipeline: 0 = streams A and B; N = N flows in weir's layout
  std::string consumers = "push";  // pipeline --flows: push | pull (weir's way, PullFeed)
  int sinks = 1;                   // pipeline --flows: sink consumers per flow, taken in turn
  bool ack_after_puback = false;   // pipeline --flows: the flow leg acks once its output is stored
  int burst = 1;                   // pipeline: events published back to back per pacing step
  int pulls_in_flight = 2;         // pull: requests of --batch kept outstanding per consumer
  std::string layout = "streams";  // pipeline --flows: see run_pipeline_flows
};

ConnPtr connect(const Config& cfg, bool send_asap, const char* name) {
  natsOptions* raw = nullptr;
  need(natsOptions_Create(&raw), "natsOptions_Create");
  std::unique_ptr<natsOptions, OptsDeleter> opts(raw);
  need(natsOptions_SetURL(opts.get(), cfg.nats_url.c_str()), "natsOptions_SetURL");
  need(natsOptions_SetName(opts.get(), name), "natsOptions_SetName");
  need(natsOptions_SetSendAsap(opts.get(), send_asap), "natsOptions_SetSendAsap");
  need(natsOptions_SetTimeout(opts.get(), 5000), "natsOptions_SetTimeout");  // ms
  natsConnection* nc = nullptr;
  need(natsConnection_Connect(&nc, opts.get()), "connect to " + cfg.nats_url);
  return ConnPtr(nc);
}

// Counts PubAcks; runs on cnats threads.
struct AckCounter {
  std::atomic<int64_t> ok{0};
  std::atomic<int64_t> failed{0};
  std::mutex mu;
  std::string first_error;  // guarded by mu

  // Set: a published message that names an input to ack ("Jsbench-Ack") gets it acked on
  // this connection once its PubAck is in (pipeline --ack-after-puback).
  natsConnection* ack_on = nullptr;

  static void on_ack(jsCtx*, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae, void* closure) {
    auto* self = static_cast<AckCounter*>(closure);
    if (pa != nullptr && pae == nullptr) {
      self->ok.fetch_add(1, std::memory_order_relaxed);
      const char* input = nullptr;
      if (self->ack_on != nullptr && natsMsgHeader_Get(msg, "Jsbench-Ack", &input) == NATS_OK &&
          natsConnection_PublishString(self->ack_on, input, "+ACK") != NATS_OK) {
        self->failed.fetch_add(1, std::memory_order_relaxed);
      }
    } else {
      self->failed.fetch_add(1, std::memory_order_relaxed);
      std::lock_guard lock(self->mu);
      if (self->first_error.empty() && pae != nullptr)
        self->first_error = pae->ErrText ? pae->ErrText : natsStatus_GetText(pae->Err);
    }
    natsMsg_Destroy(msg);  // the handler owns the message
  }
};

JsPtr jetstream(natsConnection* nc, const Config& cfg, AckCounter* acks) {
  jsOptions o;
  need(jsOptions_Init(&o), "jsOptions_Init");
  o.Wait = 10000;  // ms
  if (acks != nullptr) {
    o.PublishAsync.MaxPending = cfg.max_pending;
    o.PublishAsync.AckHandler = &AckCounter::on_ack;
    o.PublishAsync.AckHandlerClosure = acks;
    o.PublishAsync.StallWait = 10000;  // ms: a stall this long is a failure, not back-pressure
  }
  jsCtx* js = nullptr;
  need(natsConnection_JetStream(&js, nc, &o), "natsConnection_JetStream");
  return JsPtr(js);
}

// A stream that exists from construction to destruction.
class ThrowawayStream {
 public:
  // `also`: a second subject the stream takes (hop --one-stream), "" for none.
  ThrowawayStream(jsCtx* js, std::string name, std::string subject, const Config& cfg, const std::string& also = "")
      : js_(js), name_(std::move(name)), subject_(std::move(subject)) {
    jsStreamConfig sc;
    need(jsStreamConfig_Init(&sc), "jsStreamConfig_Init");
    const char* subjects[] = {subject_.c_str(), also.c_str()};
    sc.Name = name_.c_str();
    sc.Subjects = subjects;
    sc.SubjectsLen = also.empty() ? 1 : 2;
    sc.Storage = cfg.storage == "memory" ? js_MemoryStorage : js_FileStorage;
    sc.Retention = cfg.retention == "limits" ? js_LimitsPolicy : js_WorkQueuePolicy;
    sc.Duplicates = 120LL * 1000 * 1000 * 1000;  // ns
    jsErrCode jerr = static_cast<jsErrCode>(0);
    need(js_AddStream(nullptr, js_, &sc, nullptr, &jerr), "create stream " + name_, jerr);
  }
  ~ThrowawayStream() {
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_DeleteStream(js_, name_.c_str(), nullptr, &jerr);
    if (s != NATS_OK)
      std::cerr << "weir-jsbench: could not delete stream " << name_ << ": " << natsStatus_GetText(s) << "\n";
  }
  ThrowawayStream(const ThrowawayStream&) = delete;
  ThrowawayStream& operator=(const ThrowawayStream&) = delete;

  const std::string& subject() const { return subject_; }
  const std::string& name() const { return name_; }

  // What the stream holds; with `subject`, only of that subject.
  uint64_t messages(const std::string& subject = "") const {
    jsOptions o;
    need(jsOptions_Init(&o), "jsOptions_Init");
    if (!subject.empty()) o.Stream.Info.SubjectsFilter = subject.c_str();
    jsStreamInfo* si = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    need(js_GetStreamInfo(&si, js_, name_.c_str(), &o, &jerr), "stream info " + name_, jerr);
    uint64_t n = si->State.Msgs;
    if (!subject.empty()) {
      n = 0;
      for (int i = 0; si->State.Subjects != nullptr && i < si->State.Subjects->Count; ++i) {
        n += si->State.Subjects->List[i].Msgs;
      }
    }
    jsStreamInfo_Destroy(si);
    return n;
  }

 private:
  jsCtx* js_;
  std::string name_;
  std::string subject_;
};

// Publishes n messages of `payload` asynchronously and waits for every PubAck.
// Returns the elapsed seconds.
double publish_all(jsCtx* js, const std::string& subject, const std::string& payload, int64_t n, bool msg_id,
                   const char* id_prefix) {
  jsPubOptions po;
  need(jsPubOptions_Init(&po), "jsPubOptions_Init");
  std::string id;
  const Clock::time_point t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) {
    if (msg_id) {
      id = id_prefix + std::to_string(i);
      po.MsgId = id.c_str();
    }
    need(js_PublishAsync(js, subject.c_str(), payload.data(), static_cast<int>(payload.size()), msg_id ? &po : nullptr),
         "js_PublishAsync");
  }
  jsPubOptions wait;
  need(jsPubOptions_Init(&wait), "jsPubOptions_Init");
  wait.MaxWait = 60000;  // ms
  need(js_PublishAsyncComplete(js, &wait), "js_PublishAsyncComplete");
  return seconds_since(t0);
}

SubPtr pull_subscribe(jsCtx* js, const ThrowawayStream& stream, const Config& cfg) {
  jsSubOptions so;
  need(jsSubOptions_Init(&so), "jsSubOptions_Init");
  so.Stream = stream.name().c_str();
  so.Config.AckPolicy = js_AckExplicit;
  so.Config.MaxAckPending = cfg.max_ack_pending;
  so.Config.AckWait = 30LL * 1000 * 1000 * 1000;  // ns
  natsSubscription* sub = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  need(js_PullSubscribe(&sub, js, stream.subject().c_str(), "jsbench", nullptr, &so, &jerr), "js_PullSubscribe", jerr);
  return SubPtr(sub);
}

// Fetches up to `batch` messages; an empty list after the timeout is not an error here.
natsMsgList fetch(natsSubscription* sub, int batch) {
  natsMsgList list{};
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = natsSubscription_Fetch(&list, sub, batch, 5000 /*ms*/, &jerr);
  if (s == NATS_TIMEOUT) return natsMsgList{};
  need(s, "natsSubscription_Fetch", jerr);
  return list;
}

std::string make_payload(int size) {
  // JSON-ish filler so compression or dedup cannot make it cheaper than a real event.
  std::string p = "{\"id\":\"jsbench\",\"pad\":\"";
  while (static_cast<int>(p.size()) < size - 2) p.push_back(static_cast<char>('a' + p.size() % 26));
  p += "\"}";
  p.resize(static_cast<size_t>(size));
  return p;
}

json base_result(const Config& cfg) {
  return {{"mode", cfg.mode},
          {"nats", cfg.nats_url},
          {"count", cfg.count},
          {"size", cfg.size},
          {"max_pending", cfg.max_pending},
          {"storage", cfg.storage},
          {"retention", cfg.retention},
          {"msg_id", cfg.msg_id},
          {"send_asap", {{"pub", cfg.pub_send_asap}, {"sub", cfg.sub_send_asap}}}};
}

std::string unique_tag() {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
                .count();
  return std::to_string(::getpid()) + "_" + std::to_string(ms % 100000000);
}

void check_acks(const AckCounter& acks, int64_t expected, json& out) {
  out["pub_acked"] = acks.ok.load();
  out["pub_failed"] = acks.failed.load();
  if (acks.failed.load() > 0) out["pub_first_error"] = acks.first_error;
  if (acks.ok.load() != expected || acks.failed.load() != 0) out["ok"] = false;
}

json run_publish(const Config& cfg, const std::string& tag) {
  ConnPtr pub = connect(cfg, cfg.pub_send_asap, "jsbench-pub");
  AckCounter acks;
  JsPtr js = jetstream(pub.get(), cfg, &acks);
  ThrowawayStream stream(js.get(), "JSBENCH_" + tag + "_A", "jsbench." + tag + ".a", cfg);
  const std::string payload = make_payload(cfg.size);
  double secs = publish_all(js.get(), stream.subject(), payload, cfg.count, cfg.msg_id, "p-");
  json out = base_result(cfg);
  out["ok"] = true;
  out["seconds"] = secs;
  out["rate"] = std::round(cfg.count / secs);
  check_acks(acks, cfg.count, out);
  out["stream_msgs"] = stream.messages();
  if (out["stream_msgs"] != static_cast<uint64_t>(cfg.count)) out["ok"] = false;
  return out;
}

json run_consume(const Config& cfg, const std::string& tag) {
  ConnPtr pub = connect(cfg, cfg.pub_send_asap, "jsbench-pub");
  ConnPtr sub_conn = connect(cfg, cfg.sub_send_asap, "jsbench-sub");
  AckCounter acks;
  JsPtr js = jetstream(pub.get(), cfg, &acks);
  JsPtr js_sub = jetstream(sub_conn.get(), cfg, nullptr);
  ThrowawayStream stream(js.get(), "JSBENCH_" + tag + "_A", "jsbench." + tag + ".a", cfg);
  const std::string payload = make_payload(cfg.size);
  double fill = publish_all(js.get(), stream.subject(), payload, cfg.count, cfg.msg_id, "c-");
  SubPtr sub = pull_subscribe(js_sub.get(), stream, cfg);

  int64_t received = 0, empty_fetches = 0, fetches = 0;
  const Clock::time_point t0 = Clock::now();
  while (received < cfg.count && empty_fetches < 3) {
    natsMsgList list = fetch(sub.get(), cfg.batch);
    ++fetches;
    if (list.Count == 0) ++empty_fetches;
    for (int i = 0; i < list.Count; ++i) need(natsMsg_Ack(list.Msgs[i], nullptr), "natsMsg_Ack");
    received += list.Count;
    natsMsgList_Destroy(&list);
  }
  // The acks are only done once the server has them: a PING/PONG after them proves it.
  need(natsConnection_Flush(sub_conn.get()), "flush acks");
  double secs = seconds_since(t0);

  json out = base_result(cfg);
  out["ok"] = received == cfg.count;
  out["batch"] = cfg.batch;
  out["received"] = received;
  out["fetches"] = fetches;
  out["seconds"] = secs;
  out["rate"] = std::round(received / secs);
  out["prefill_rate"] = std::round(cfg.count / fill);
  check_acks(acks, cfg.count, out);
  if (cfg.retention == "workqueue") {
    // Acked messages leave a work-queue stream; the server applies acks asynchronously, so
    // give it a moment before calling a leftover a failure.
    uint64_t left = stream.messages();
    for (int i = 0; i < 50 && left > 0; ++i) {
      ::usleep(20000);
      left = stream.messages();
    }
    out["left_in_stream"] = left;
    if (left != 0) out["ok"] = false;
  }
  return out;
}

json run_hop(const Config& cfg, const std::string& tag) {
  ConnPtr pub = connect(cfg, cfg.pub_send_asap, "jsbench-pub");
  ConnPtr sub_conn = connect(cfg, cfg.sub_send_asap, "jsbench-sub");
  AckCounter fill_acks;
  JsPtr js = jetstream(pub.get(), cfg, &fill_acks);
  JsPtr js_sub = jetstream(sub_conn.get(), cfg, nullptr);
  // --one-stream: B's subject is A's stream's second subject (weir's layout: a flow's `.in`
  // and `.out.*` in one stream, each consumer filtering its own subject).
  const std::string out_subject = "jsbench." + tag + ".b";
  ThrowawayStream in(js.get(), "JSBENCH_" + tag + "_A", "jsbench." + tag + ".a", cfg,
                     cfg.one_stream ? out_subject : "");
  std::optional<ThrowawayStream> own_out;
  if (!cfg.one_stream) own_out.emplace(js.get(), "JSBENCH_" + tag + "_B", out_subject, cfg);
  const ThrowawayStream& out_stream = cfg.one_stream ? in : *own_out;
  const std::string payload = make_payload(cfg.size);
  double fill = publish_all(js.get(), in.subject(), payload, cfg.count, cfg.msg_id, "f-");
  SubPtr sub = pull_subscribe(js_sub.get(), in, cfg);

  // Two publish contexts, alternating per batch: js_PublishAsyncComplete on one waits for
  // exactly that batch's PubAcks while the next batch is already in flight on the other.
  AckCounter hop_acks[2];
  JsPtr hop_js[2] = {jetstream(pub.get(), cfg, &hop_acks[0]), jetstream(pub.get(), cfg, &hop_acks[1])};
  natsMsgList pending_batch{};  // inputs whose outputs are in flight, acked once those are in
  int pending_ctx = -1;
  jsPubOptions po, wait;
  need(jsPubOptions_Init(&po), "jsPubOptions_Init");
  need(jsPubOptions_Init(&wait), "jsPubOptions_Init");
  wait.MaxWait = 60000;  // ms
  std::string id;

  auto settle = [&](natsMsgList& batch, int ctx) {
    need(js_PublishAsyncComplete(hop_js[ctx].get(), &wait), "js_PublishAsyncComplete");
    for (int i = 0; i < batch.Count; ++i) need(natsMsg_Ack(batch.Msgs[i], nullptr), "natsMsg_Ack");
    natsMsgList_Destroy(&batch);
    batch = natsMsgList{};
  };

  int64_t received = 0, empty_fetches = 0, fetches = 0, seq = 0;
  int ctx = 0;
  const Clock::time_point t0 = Clock::now();
  while (received < cfg.count && empty_fetches < 3) {
    natsMsgList batch = fetch(sub.get(), cfg.batch);
    ++fetches;
    if (batch.Count == 0) {
      ++empty_fetches;
      continue;
    }
    for (int i = 0; i < batch.Count; ++i) {
      natsMsg* m = batch.Msgs[i];
      if (cfg.msg_id) {
        id = "h-" + std::to_string(seq);
        po.MsgId = id.c_str();
      }
      ++seq;
      need(js_PublishAsync(hop_js[ctx].get(), out_subject.c_str(), natsMsg_GetData(m), natsMsg_GetDataLength(m),
                           cfg.msg_id ? &po : nullptr),
           "js_PublishAsync");
    }
    received += batch.Count;
    if (pending_ctx >= 0) settle(pending_batch, pending_ctx);
    pending_batch = batch;
    pending_ctx = ctx;
    ctx ^= 1;
  }
  if (pending_ctx >= 0) settle(pending_batch, pending_ctx);
  need(natsConnection_Flush(sub_conn.get()), "flush acks");
  double secs = seconds_since(t0);

  json out = base_result(cfg);
  out["batch"] = cfg.batch;
  out["received"] = received;
  out["fetches"] = fetches;
  out["seconds"] = secs;
  out["rate"] = std::round(received / secs);
  out["prefill_rate"] = std::round(cfg.count / fill);
  out["ok"] = received == cfg.count;
  check_acks(fill_acks, cfg.count, out);
  int64_t hop_ok = hop_acks[0].ok + hop_acks[1].ok;
  int64_t hop_failed = hop_acks[0].failed + hop_acks[1].failed;
  out["hop_pub_acked"] = hop_ok;
  out["hop_pub_failed"] = hop_failed;
  if (hop_ok != cfg.count || hop_failed != 0) out["ok"] = false;
  out["one_stream"] = cfg.one_stream;
  out["out_stream_msgs"] = out_stream.messages(out_subject);
  if (out["out_stream_msgs"] != static_cast<uint64_t>(cfg.count)) out["ok"] = false;
  return out;
}

// Acks `msg` on `nc`: a publish to its reply subject, which push and pull deliveries both
// carry (natsMsg_Ack needs a message of a JetStream subscription).
bool ack(natsConnection* nc, natsMsg* msg) {
  const char* reply = natsMsg_GetReply(msg);
  return reply != nullptr && natsConnection_PublishString(nc, reply, "+ACK") == NATS_OK;
}

// The flow leg of `pipeline`: each message of A is published to B and acked (cnats'
// subscription thread), at once or once B's PubAck is in (--ack-after-puback).
struct PipelineHop {
  jsCtx* js = nullptr;
  std::string subject;            // "": the message's own subject with `.in` replaced by `.out.<j>` (--flows)
  int sinks = 1;                  // --flows: output subjects (and sink consumers) per flow
  bool ack_after_puback = false;  // ack the input when the output's PubAck is in (AckCounter)
  std::atomic<int64_t> seen{0};
  std::atomic<int64_t> failed{0};
  static void on_msg(natsConnection* nc, natsSubscription*, natsMsg* msg, void* closure) {
    auto* self = static_cast<PipelineHop*>(closure);
    jsPubOptions po;
    jsPubOptions_Init(&po);
    const char* in_id = nullptr;
    natsMsgHeader_Get(msg, "Nats-Msg-Id", &in_id);
    const std::string out_id = std::string("h-") + (in_id != nullptr ? in_id : "");
    po.MsgId = out_id.c_str();
    std::string to = self->subject;
    if (to.empty()) {  // `<flow>.in` -> `<flow>.out.<j>`, the sinks taken in turn (a branch)
      to = natsMsg_GetSubject(msg);
      to.replace(to.size() - 2, 2, "out." + std::to_string(self->seen.load(std::memory_order_relaxed) % self->sinks));
    }
    if (self->ack_after_puback) {  // as weir's stage: the input is acked once its output is stored
      natsMsg* out = nullptr;
      const char* reply = natsMsg_GetReply(msg);
      if (natsMsg_Create(&out, to.c_str(), nullptr, natsMsg_GetData(msg), natsMsg_GetDataLength(msg)) != NATS_OK ||
          reply == nullptr || natsMsgHeader_Set(out, "Jsbench-Ack", reply) != NATS_OK ||
          js_PublishMsgAsync(self->js, &out, &po) != NATS_OK) {
        natsMsg_Destroy(out);
        self->failed.fetch_add(1, std::memory_order_relaxed);
      }
    } else if (js_PublishAsync(self->js, to.c_str(), natsMsg_GetData(msg), natsMsg_GetDataLength(msg), &po) !=
                   NATS_OK ||
               !ack(nc, msg)) {
      self->failed.fetch_add(1, std::memory_order_relaxed);
    }
    self->seen.fetch_add(1, std::memory_order_relaxed);
    natsMsg_Destroy(msg);
  }
};

// The sink leg of `pipeline`: acks each message of B.
struct PipelineSink {
  std::atomic<int64_t> seen{0};
  std::atomic<int64_t> failed{0};
  static void on_msg(natsConnection* nc, natsSubscription*, natsMsg* msg, void* closure) {
    auto* self = static_cast<PipelineSink*>(closure);
    if (!ack(nc, msg)) self->failed.fetch_add(1, std::memory_order_relaxed);
    self->seen.fetch_add(1, std::memory_order_relaxed);
    natsMsg_Destroy(msg);
  }
};

// `filter`: the subject the consumer takes; "" for the stream's first subject.
SubPtr push_subscribe(jsCtx* js, const ThrowawayStream& stream, const Config& cfg, natsMsgHandler cb, void* closure,
                      const std::string& filter = "") {
  jsSubOptions so;
  need(jsSubOptions_Init(&so), "jsSubOptions_Init");
  so.Stream = stream.name().c_str();
  so.ManualAck = true;
  so.Config.AckPolicy = js_AckExplicit;
  so.Config.MaxAckPending = cfg.max_ack_pending;
  so.Config.AckWait = 30LL * 1000 * 1000 * 1000;  // ns
  natsSubscription* sub = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  const std::string& subject = filter.empty() ? stream.subject() : filter;
  need(js_Subscribe(&sub, js, subject.c_str(), cb, closure, nullptr, &so, &jerr), "js_Subscribe", jerr);
  return SubPtr(sub);
}

// A pull consumer read the way weir reads one (runtime/nats/pull_consumer.cc): `in_flight`
// requests of `batch` messages each kept outstanding on the consumer's own inbox, a request
// ended by its last message or by the server's 408 at `expires`, which says how many it
// did not deliver. Each delivered message goes to `handler`, which acks it. Requests wait
// 5 s (weir's 2 s: under load a request fills long before either). Another status (a 409,
// say) ends nothing here: the feed then stops and the run reports the events it missed.
class PullFeed {
 public:
  PullFeed(natsConnection* nc, jsCtx* js, const ThrowawayStream& stream, const std::string& durable,
           const std::string& filter, const Config& cfg, natsMsgHandler handler, void* closure)
      : nc_(nc), handler_(handler), closure_(closure), batch_(cfg.batch), in_flight_(cfg.pulls_in_flight) {
    jsConsumerConfig cc;
    need(jsConsumerConfig_Init(&cc), "jsConsumerConfig_Init");
    cc.Durable = durable.c_str();
    cc.FilterSubject = filter.c_str();
    cc.AckPolicy = js_AckExplicit;
    cc.MaxAckPending = cfg.max_ack_pending;
    cc.AckWait = 30LL * 1000 * 1000 * 1000;  // ns
    cc.MemoryStorage = true;                 // as weir's durables on one server (ADR 0320)
    jsErrCode jerr = static_cast<jsErrCode>(0);
    jsConsumerInfo* ci = nullptr;
    need(js_AddConsumer(&ci, js, stream.name().c_str(), &cc, nullptr, &jerr), "create consumer " + durable, jerr);
    jsConsumerInfo_Destroy(ci);
    next_ = "$JS.API.CONSUMER.MSG.NEXT." + stream.name() + "." + durable;
    inbox_ = "_INBOX.jsbench." + durable;
    natsSubscription* sub = nullptr;
    need(natsConnection_Subscribe(&sub, nc_, inbox_.c_str(), &PullFeed::on_msg, this), "subscribe " + inbox_);
    need(natsSubscription_SetPendingLimits(sub, -1, -1), "pending limits");
    sub_.reset(sub);
    top_up();
  }

 private:
  static void on_msg(natsConnection* nc, natsSubscription* sub, natsMsg* msg, void* closure) {
    auto* self = static_cast<PullFeed*>(closure);
    const char* status = nullptr;
    if (natsMsg_GetDataLength(msg) == 0 && natsMsgHeader_Get(msg, "Status", &status) == NATS_OK) {
      const char* left = nullptr;
      int64_t undelivered = 0;
      if (natsMsgHeader_Get(msg, "Nats-Pending-Messages", &left) == NATS_OK) undelivered = std::atoll(left);
      self->outstanding_.fetch_sub(undelivered);
      natsMsg_Destroy(msg);
    } else {
      self->outstanding_.fetch_sub(1);
      self->handler_(nc, sub, msg, self->closure_);
    }
    self->top_up();
  }
  void top_up() {
    const int64_t window = int64_t{batch_} * in_flight_;
    while (outstanding_.load() + batch_ <= window) {
      outstanding_.fetch_add(batch_);
      char body[96];
      std::snprintf(body, sizeof body, "{\"batch\":%d,\"expires\":%lld}", batch_, 5'000'000'000LL);
      need(natsConnection_PublishRequestString(nc_, next_.c_str(), inbox_.c_str(), body), "pull request");
    }
  }

  natsConnection* nc_;
  natsMsgHandler handler_;
  void* closure_;
  int batch_;
  int in_flight_;
  std::string next_, inbox_;
  std::atomic<int64_t> outstanding_{0};
  SubPtr sub_;
};

// The three connections of `pipeline` (SendAsap on each): ingress publishes, the flow leg
// consumes and publishes, the sink leg consumes; PubAcks counted per publishing leg.
struct PipelineLegs {
  explicit PipelineLegs(const Config& cfg)
      : ingress(connect(cfg, true, "jsbench-ingress")),
        flow(connect(cfg, true, "jsbench-flow")),
        sink(connect(cfg, true, "jsbench-sink")),
        js(jetstream(ingress.get(), cfg, &pub_acks)),
        js_flow(jetstream(flow.get(), cfg, &hop_acks)),
        js_sink(jetstream(sink.get(), cfg, nullptr)) {}
  ConnPtr ingress, flow, sink;
  AckCounter pub_acks, hop_acks;
  JsPtr js, js_flow, js_sink;
};

// The paced load of `pipeline`: rate × seconds events published with a Nats-Msg-Id to
// `subjects` in turn, then the wait until the sink leg saw them all (30 s at most) and the
// acks' flush; the result's common fields. "load starts" / "load ends" on stderr mark it,
// so a caller can sample the server's CPU without the streams' set-up and removal
// (bench/layouts.py).
json pipeline_load(const Config& cfg, PipelineLegs& legs, const std::vector<std::string>& subjects, PipelineHop& hop,
                   PipelineSink& end) {
  std::cerr << "weir-jsbench: load starts" << std::endl;
  const std::string payload = make_payload(cfg.size);
  const auto n = static_cast<int64_t>(std::llround(cfg.rate * cfg.seconds));
  const auto interval = std::chrono::duration<double>(1.0 / cfg.rate);
  jsPubOptions po;
  need(jsPubOptions_Init(&po), "jsPubOptions_Init");
  std::string id;
  const Clock::time_point t0 = Clock::now();
  // --burst K: K events back to back every K intervals, as K clients that each wait for
  // their answer bunch up (weir's HTTP load); 1: evenly paced.
  const int64_t burst = std::max(1, cfg.burst);
  for (int64_t i = 0; i < n; ++i) {
    if (i % burst == 0) {
      std::this_thread::sleep_until(t0 +
                                    std::chrono::duration_cast<Clock::duration>(interval * static_cast<double>(i)));
    }
    id = "p-" + std::to_string(i);
    po.MsgId = id.c_str();
    const std::string& subject = subjects[static_cast<size_t>(i) % subjects.size()];
    need(js_PublishAsync(legs.js.get(), subject.c_str(), payload.data(), static_cast<int>(payload.size()), &po),
         "js_PublishAsync");
  }
  // The sink leg can see an output before the flow leg has its PubAck (another connection):
  // both PubAck counts are waited for too.
  const auto answered = [](const AckCounter& a) { return a.ok.load() + a.failed.load(); };
  const auto done = [&] {
    return end.seen.load() >= n && answered(legs.pub_acks) >= n && answered(legs.hop_acks) >= n;
  };
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(30);
  while (!done() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  need(natsConnection_Flush(legs.sink.get()), "flush acks");
  need(natsConnection_Flush(legs.flow.get()), "flush acks");
  const double secs = seconds_since(t0);
  std::cerr << "weir-jsbench: load ends" << std::endl;

  json out = base_result(cfg);
  out["count"] = n;
  out["offered_rate"] = cfg.rate;
  out["seconds"] = secs;
  out["received"] = end.seen.load();
  out["rate"] = std::round(static_cast<double>(end.seen.load()) / secs);
  out["ok"] = end.seen.load() == n && hop.failed.load() == 0 && end.failed.load() == 0;
  check_acks(legs.pub_acks, n, out);
  out["hop_pub_acked"] = legs.hop_acks.ok.load();
  if (legs.hop_acks.ok.load() != n || legs.hop_acks.failed.load() != 0) out["ok"] = false;
  return out;
}

json run_pipeline_flows(const Config& cfg, const std::string& tag);

json run_pipeline(const Config& cfg, const std::string& tag) {
  if (cfg.flows > 0) return run_pipeline_flows(cfg, tag);
  PipelineLegs legs(cfg);
  ThrowawayStream a(legs.js.get(), "JSBENCH_" + tag + "_A", "jsbench." + tag + ".a", cfg);
  ThrowawayStream b(legs.js.get(), "JSBENCH_" + tag + "_B", "jsbench." + tag + ".b", cfg);
  PipelineHop hop;
  hop.js = legs.js_flow.get();
  hop.subject = b.subject();
  PipelineSink end;
  SubPtr sub_a = push_subscribe(legs.js_flow.get(), a, cfg, &PipelineHop::on_msg, &hop);
  SubPtr sub_b = push_subscribe(legs.js_sink.get(), b, cfg, &PipelineSink::on_msg, &end);

  json out = pipeline_load(cfg, legs, {a.subject()}, hop, end);
  out["msg_id"] = true;
  out["send_asap"] = {{"pub", true}, {"sub", true}};
  return out;
}

// `pipeline --flows N`: the same three legs for N flows in weir's layout, events spread
// over the flows in turn. --layout streams: a stream per flow with its `.in` and `.out.*`
// subjects, a consumer of its input and one per sink (what weir runs, docs/architecture.md);
// shared-stream: one stream for all flows, the same consumers;
// shared-in: one stream, one consumer of all flows' inputs and one per flow and sink;
// split-in: one stream and one consumer for all flows' inputs, a stream per flow for its
// outputs with a consumer per sink;
// shared-consumers: one stream and two consumers for all flows; two-streams: a stream of all
// flows' inputs and one of all their outputs, a consumer each. What each layout costs
// nats-server per event, for the same work (docs/adr/0318-many-flows-cost.md,
// docs/adr/0322-a-model-of-the-bus.md).
json run_pipeline_flows(const Config& cfg, const std::string& tag) {
  PipelineLegs legs(cfg);
  const std::string base = "jsbench." + tag + ".";
  auto in_of = [&](int k) { return base + "f" + std::to_string(k) + ".in"; };
  auto out_of = [&](int k) { return base + "f" + std::to_string(k) + ".out.*"; };
  auto sink_of = [&](int k, int j) { return base + "f" + std::to_string(k) + ".out." + std::to_string(j); };
  std::vector<std::unique_ptr<ThrowawayStream>> streams;
  if (cfg.layout == "streams") {
    for (int k = 1; k <= cfg.flows; ++k)
      streams.push_back(std::make_unique<ThrowawayStream>(legs.js.get(), "JSBENCH_" + tag + "_F" + std::to_string(k),
                                                          in_of(k), cfg, out_of(k)));
  } else if (cfg.layout == "two-streams") {
    streams.push_back(std::make_unique<ThrowawayStream>(legs.js.get(), "JSBENCH_" + tag + "_IN", base + "*.in", cfg));
    streams.push_back(
        std::make_unique<ThrowawayStream>(legs.js.get(), "JSBENCH_" + tag + "_OUT", base + "*.out.*", cfg));
  } else if (cfg.layout == "split-in") {
    streams.push_back(std::make_unique<ThrowawayStream>(legs.js.get(), "JSBENCH_" + tag + "_IN", base + "*.in", cfg));
    for (int k = 1; k <= cfg.flows; ++k)
      streams.push_back(std::make_unique<ThrowawayStream>(legs.js.get(), "JSBENCH_" + tag + "_O" + std::to_string(k),
                                                          out_of(k), cfg));
  } else {
    streams.push_back(std::make_unique<ThrowawayStream>(legs.js.get(), "JSBENCH_" + tag + "_S", base + "*.in", cfg,
                                                        base + "*.out.*"));
  }
  PipelineHop hop;
  hop.js = legs.js_flow.get();
  hop.sinks = cfg.sinks;
  hop.ack_after_puback = cfg.ack_after_puback;
  if (cfg.ack_after_puback) legs.hop_acks.ack_on = legs.flow.get();
  PipelineSink end;
  std::vector<SubPtr> subs;
  const bool split = cfg.layout == "split-in";
  const bool shared_in = cfg.layout == "shared-consumers" || cfg.layout == "shared-in" || split ||
                         cfg.layout == "two-streams";
  const bool two = cfg.layout == "two-streams";
  const bool shared_out = cfg.layout == "shared-consumers" || two;
  std::vector<std::unique_ptr<PullFeed>> feeds;
  auto consume = [&](bool flow_leg, const ThrowawayStream& st, const std::string& filter) {
    natsConnection* nc = flow_leg ? legs.flow.get() : legs.sink.get();
    jsCtx* js = flow_leg ? legs.js_flow.get() : legs.js_sink.get();
    natsMsgHandler cb = flow_leg ? &PipelineHop::on_msg : &PipelineSink::on_msg;
    void* closure = flow_leg ? static_cast<void*>(&hop) : static_cast<void*>(&end);
    if (cfg.consumers == "pull") {
      const std::string durable = std::string(flow_leg ? "hop" : "sink") + std::to_string(feeds.size());
      feeds.push_back(std::make_unique<PullFeed>(nc, js, st, durable, filter, cfg, cb, closure));
    } else {
      subs.push_back(push_subscribe(js, st, cfg, cb, closure, filter));
    }
  };
  if (shared_in) consume(true, *streams[0], base + "*.in");
  if (shared_out) consume(false, *streams[two ? 1 : 0], base + "*.out.*");
  for (int k = 1; k <= cfg.flows; ++k) {
    const ThrowawayStream& st = *streams[cfg.layout == "streams" ? k - 1 : split ? k : 0];
    if (!shared_in) consume(true, st, in_of(k));
    for (int j = 0; j < cfg.sinks && !shared_out; ++j) consume(false, st, sink_of(k, j));
  }
  std::vector<std::string> subjects;
  for (int k = 1; k <= cfg.flows; ++k) subjects.push_back(in_of(k));
  json out = pipeline_load(cfg, legs, subjects, hop, end);
  const size_t consumers = subs.size() + feeds.size();
  subs.clear();  // before the streams go
  feeds.clear();
  out["flows"] = cfg.flows;
  out["layout"] = cfg.layout;
  out["consumer_kind"] = cfg.consumers;
  out["burst"] = cfg.burst;
  out["sinks"] = cfg.sinks;
  out["ack_after_puback"] = cfg.ack_after_puback;
  out["streams"] = streams.size();
  out["consumers"] = consumers;
  return out;
}

void add_common(CLI::App* sub, Config& cfg) {
  sub->add_option("--nats", cfg.nats_url, "NATS URL");
  sub->add_option("--count", cfg.count, "messages")->check(CLI::Range(int64_t{1}, int64_t{100000000}));
  sub->add_option("--size", cfg.size, "payload bytes")->check(CLI::Range(1, 8 << 20));
  sub->add_option("--max-pending", cfg.max_pending, "async publishes in flight")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}));
  sub->add_option("--storage", cfg.storage, "file | memory")->check(CLI::IsMember({"file", "memory"}));
  sub->add_option("--retention", cfg.retention, "workqueue | limits")->check(CLI::IsMember({"workqueue", "limits"}));
  sub->add_option("--pub-send-asap", cfg.pub_send_asap, "SendAsap on the publishing connection");
  sub->add_flag("--msg-id", cfg.msg_id, "set Nats-Msg-Id on every publish (dedup on)");
}

void add_consumer(CLI::App* sub, Config& cfg) {
  sub->add_option("--batch", cfg.batch, "fetch batch size")->check(CLI::Range(1, 100000));
  sub->add_option("--sub-send-asap", cfg.sub_send_asap, "SendAsap on the fetching connection");
  sub->add_option("--max-ack-pending", cfg.max_ack_pending, "consumer MaxAckPending")
      ->check(CLI::Range(int64_t{1}, int64_t{10000000}));
}

int run(int argc, char** argv) {
  CLI::App app{"weir-jsbench: raw JetStream publish / consume / hop rates (cnats)"};
  app.require_subcommand(1);
  Config cfg;
  CLI::App* publish = app.add_subcommand("publish", "async publish N messages");
  CLI::App* consume = app.add_subcommand("consume", "pre-fill N, pull-consume and ack them");
  CLI::App* hop = app.add_subcommand("hop", "consume from A, publish to B, ack after PubAcks");
  CLI::App* pipeline = app.add_subcommand("pipeline", "a weir event's three JetStream legs at a fixed rate");
  for (CLI::App* sub : {publish, consume, hop, pipeline}) add_common(sub, cfg);
  for (CLI::App* sub : {consume, hop}) add_consumer(sub, cfg);
  hop->add_flag("--one-stream", cfg.one_stream, "B is a second subject of A's stream (weir's layout)");
  pipeline->add_option("--rate", cfg.rate, "events per second")->check(CLI::Range(1.0, 1000000.0));
  pipeline->add_option("--seconds", cfg.seconds, "how long to publish")->check(CLI::Range(0.1, 3600.0));
  pipeline->add_option("--flows", cfg.flows, "N flows in weir's layout, events spread over them (0: streams A, B)")
      ->check(CLI::Range(0, 10000));
  pipeline
      ->add_option("--layout", cfg.layout,
                   "with --flows: streams | shared-stream | shared-in | split-in | shared-consumers | two-streams")
      ->check(CLI::IsMember({"streams", "shared-stream", "shared-in", "split-in", "shared-consumers", "two-streams"}));
  pipeline->add_option("--consumers", cfg.consumers, "with --flows: push | pull (requests as weir sends them)")
      ->check(CLI::IsMember({"push", "pull"}));
  pipeline->add_option("--sinks", cfg.sinks, "with --flows: sinks per flow, each output to one in turn")
      ->check(CLI::Range(1, 16));
  pipeline->add_flag("--ack-after-puback", cfg.ack_after_puback,
                     "with --flows: the flow leg acks an input once its output's PubAck is in, as weir does");
  pipeline->add_option("--burst", cfg.burst, "events published back to back per pacing step")
      ->check(CLI::Range(1, 100000));
  pipeline->add_option("--batch", cfg.batch, "pull: messages per request")->check(CLI::Range(1, 100000));
  pipeline->add_option("--pulls-in-flight", cfg.pulls_in_flight, "pull: requests outstanding per consumer")
      ->check(CLI::Range(1, 64));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  cfg.mode = app.get_subcommands().front()->get_name();

  const std::string tag = unique_tag();
  json out;
  try {
    if (cfg.mode == "publish") out = run_publish(cfg, tag);
    else if (cfg.mode == "consume") out = run_consume(cfg, tag);
    else if (cfg.mode == "pipeline") out = run_pipeline(cfg, tag);
    else out = run_hop(cfg, tag);
  } catch (const BenchError& e) {
    json err = base_result(cfg);
    err["ok"] = false;
    err["error"] = e.what();
    std::cout << err.dump() << std::endl;
    std::cerr << "weir-jsbench: " << e.what() << "\n";
    nats_Close();
    return 1;
  }
  std::cout << out.dump() << std::endl;
  nats_Close();
  return out.value("ok", false) ? 0 : 1;
}

}  // namespace
}  // namespace weir::bench

int main(int argc, char** argv) {
  try {
    return weir::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "weir-jsbench: " << e.what() << "\n";
    return 1;
  }
}

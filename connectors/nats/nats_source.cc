#include "connectors/nats/nats_source.h"

#include <nats/nats.h>
#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "flows/json_limits.h"
#include <openssl/evp.h>

#include "connectors/nats/nats_connection.h"
#include "runtime/nats/bus.h"
#include "runtime/base/log.h"
#include "runtime/base/thread_annotations.h"

namespace weir::connectors {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

bool is_utf8_text(std::string_view s) {
  try {
    (void)nlohmann::json(std::string(s)).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

std::string base64(std::string_view data) {
  std::string out(4 * ((data.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(data.data()), static_cast<int>(data.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

// Does NATS subject filter `filter` match the literal subject `subject`?
bool subject_matches(std::string_view filter, std::string_view subject) {
  for (;;) {
    size_t fd = filter.find('.');
    size_t sd = subject.find('.');
    std::string_view ft = filter.substr(0, fd);
    std::string_view st = subject.substr(0, sd);
    if (ft == ">") return true;
    if (ft != "*" && ft != st) return false;
    if (fd == std::string_view::npos || sd == std::string_view::npos) {
      return fd == std::string_view::npos && sd == std::string_view::npos;
    }
    filter.remove_prefix(fd + 1);
    subject.remove_prefix(sd + 1);
  }
}

struct Item {
  IngestEvent event;
  std::string reply;          // "" when the message was not a request
  std::string reject_reason;  // set: too deep, goes to the dead-letter stream
  int attempts = 0;
  Clock::time_point retry_at{};
};

// State shared by the cnats callback, the source thread and bus callbacks.
struct Shared {
  Mutex mu;
  std::condition_variable cv;
  std::deque<Item> fresh GUARDED_BY(mu);
  std::vector<Item> retrying GUARDED_BY(mu);
  size_t in_flight GUARDED_BY(mu) = 0;  // queued, publishing or retrying
  bool stopping GUARDED_BY(mu) = false;
  natsConnection* nc GUARDED_BY(mu) = nullptr;    // null once stopped (replies stop)
  bool failing GUARDED_BY(mu) = false;            // for one warning per outage
  bool subscription_done GUARDED_BY(mu) = false;  // cnats will not call on_message again
  int max_depth = 128;                            // set before the subscription; read-only after
  std::string flow;
  size_t max_in_flight = 4096;

  void reply(const std::string& subject, const std::string& body) {
    MutexLock lock(mu);
    if (nc && !subject.empty()) natsConnection_Publish(nc, subject.c_str(), body.data(), static_cast<int>(body.size()));
  }
};

class NatsSource final : public Source {
 public:
  NatsSource(flows::NatsSourceSpec spec, NatsSourceOptions options)
      : spec_(std::move(spec)), options_(std::move(options)) {}
  ~NatsSource() override { stop(); }

  Status start(SourceContext& ctx) override {
    if (started_) return Status::invalid("nats source: started twice");
    if (!ctx.ingest) return Status::internal("nats source: no ingest");
    if (options_.url.empty()) return Status::internal("nats source: the runtime gave no NATS URL");
    const std::string own = layout::input_subject(ctx.flow);
    if (subject_matches(spec_.subject, own)) {
      return Status::invalid("flow " + ctx.flow + ": nats.subject \"" + spec_.subject +
                             "\" would receive the flow's own input (" + own + "): a loop");
    }
    ctx_ = ctx;
    shared_ = std::make_shared<Shared>();
    shared_->flow = ctx.flow;
    shared_->max_depth = ctx.max_depth;
    shared_->max_in_flight = std::max<size_t>(1, options_.max_in_flight);
    // Replies should leave at once, not after cnats' ~1 ms flush timer.
    auto c = NatsConnection::open({options_.url, options_.creds_file, "weir-" + ctx.flow + "-nats-source", true});
    if (!c) return Status::unavailable("flow " + ctx.flow + ": " + c.status().message());
    conn_ = std::move(c.value());
    {
      MutexLock lock(shared_->mu);  // nobody else has shared_ yet; the lock is for the analysis
      shared_->nc = conn_->get();
    }
    thread_ = std::thread([this] { run(); });
    pthread_setname_np(thread_.native_handle(), "nats-src");
    natsStatus s = natsConnection_QueueSubscribe(&sub_, conn_->get(), spec_.subject.c_str(), spec_.queue.c_str(),
                                                 &NatsSource::on_message, shared_.get());
    if (s == NATS_OK) s = natsSubscription_SetOnCompleteCB(sub_, &NatsSource::on_complete, shared_.get());
    if (s == NATS_OK) s = natsConnection_Flush(conn_->get());  // the server has the interest now
    if (s != NATS_OK) {
      if (sub_) {
        natsSubscription_Destroy(sub_);
        sub_ = nullptr;
      }
      stop_thread();
      return Status::unavailable("flow " + ctx.flow + ": cannot subscribe to " + spec_.subject + ": " +
                                 natsStatus_GetText(s));
    }
    started_ = true;
    log::info("nats source subscribed", {{"flow", ctx.flow}, {"subject", spec_.subject}, {"queue", spec_.queue}});
    return Status::ok();
  }

  void stop() override {
    if (!started_) return;
    started_ = false;
    // Unsubscribe first so the callback (which may wait for room) is released and no new
    // message arrives; then finish the thread; then detach the connection from replies.
    {
      MutexLock lock(shared_->mu);
      shared_->stopping = true;
    }
    shared_->cv.notify_all();
    if (sub_) {
      // The callback may be running (or waiting for room) on cnats' delivery thread: wait
      // until cnats says the handler has returned for good before this object can go.
      if (natsSubscription_Unsubscribe(sub_) == NATS_OK) {
        UniqueLock lock(shared_->mu);
        lock.wait_for(shared_->cv, std::chrono::seconds(10),
                      [&]() REQUIRES(shared_->mu) { return shared_->subscription_done; });
      }
      natsSubscription_Destroy(sub_);
      sub_ = nullptr;
    }
    stop_thread();
  }

 private:
  void stop_thread() {
    {
      MutexLock lock(shared_->mu);
      shared_->stopping = true;
    }
    shared_->cv.notify_all();
    if (thread_.joinable()) thread_.join();
    // Give writes in flight a moment so their requesters get an answer.
    {
      UniqueLock lock(shared_->mu);
      lock.wait_for(shared_->cv, milliseconds(1000),
                    [&]() REQUIRES(shared_->mu) { return shared_->in_flight == shared_->retrying.size(); });
      shared_->nc = nullptr;
      if (!shared_->retrying.empty()) {
        log::warn("nats source stopped with unwritten messages",
                  {{"flow", shared_->flow}, {"count", std::to_string(shared_->retrying.size())}});
      }
    }
    if (conn_) natsConnection_Flush(conn_->get());
    conn_.reset();
  }

  static void on_complete(void* closure) {
    auto* sh = static_cast<Shared*>(closure);
    {
      MutexLock lock(sh->mu);
      sh->subscription_done = true;
    }
    sh->cv.notify_all();
  }

  static void on_message(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
    Shared& sh = *static_cast<Shared*>(closure);
    Item item;
    std::string_view data(natsMsg_GetData(msg) ? natsMsg_GetData(msg) : "",
                          static_cast<size_t>(natsMsg_GetDataLength(msg)));
    std::vector<std::pair<std::string, std::string>> headers;
    const char** keys = nullptr;
    int count = 0;
    if (natsMsgHeader_Keys(msg, &keys, &count) == NATS_OK) {
      for (int i = 0; i < count; ++i) {
        const char* v = nullptr;
        if (natsMsgHeader_Get(msg, keys[i], &v) == NATS_OK && v) headers.emplace_back(keys[i], v);
      }
      free(keys);
    }
    for (const auto& [k, v] : headers) {
      if (k == "Nats-Msg-Id" && !v.empty()) item.event.id = v;
    }
    if (item.event.id.empty()) {
      for (const auto& [k, v] : headers) {
        if (k == "Idempotency-Key" && !v.empty()) item.event.id = v;
      }
    }
    item.event.body = nats_event_body(natsMsg_GetSubject(msg), data, headers, sh.max_depth, &item.reject_reason);
    if (!item.reject_reason.empty()) item.event.body = std::string(data);  // dead-lettered as received
    if (const char* r = natsMsg_GetReply(msg)) item.reply = r;
    natsMsg_Destroy(msg);
    UniqueLock lock(sh.mu);
    lock.wait(sh.cv, [&]() REQUIRES(sh.mu) { return sh.stopping || sh.in_flight < sh.max_in_flight; });
    if (sh.stopping) {
      lock.unlock();
      sh.reply(item.reply, R"({"error":"weir is shutting down"})");
      return;
    }
    ++sh.in_flight;
    sh.fresh.push_back(std::move(item));
    lock.unlock();
    sh.cv.notify_all();
  }

  void run() {
    Shared& sh = *shared_;
    UniqueLock lock(sh.mu);
    while (!sh.stopping) {
      auto next_retry = Clock::time_point::max();
      for (const auto& r : sh.retrying) next_retry = std::min(next_retry, r.retry_at);
      if (sh.fresh.empty()) {
        if (next_retry == Clock::time_point::max()) {
          lock.wait(sh.cv);
        } else {
          lock.wait_until(sh.cv, next_retry);
        }
      }
      if (sh.stopping) break;
      std::vector<Item> batch(std::make_move_iterator(sh.fresh.begin()), std::make_move_iterator(sh.fresh.end()));
      sh.fresh.clear();
      const auto now = Clock::now();
      auto due = std::partition(sh.retrying.begin(), sh.retrying.end(),
                                [&](const Item& i) { return i.retry_at > now; });
      for (auto it = due; it != sh.retrying.end(); ++it) batch.push_back(std::move(*it));
      sh.retrying.erase(due, sh.retrying.end());
      lock.unlock();
      for (auto& item : batch) publish(std::move(item));
      lock.lock();
    }
  }

  void publish(Item item) {
    ++item.attempts;
    IngestEvent event = item.event;
    std::shared_ptr<Shared> sh = shared_;
    std::string reject = item.reject_reason;
    auto done = [sh, item = std::move(item)](const Status& s, const std::string& id) mutable {
      if (s) {
        sh->reply(item.reply, nlohmann::json{{"id", id}}.dump());
        MutexLock lock(sh->mu);
        --sh->in_flight;
        if (sh->failing) {
          sh->failing = false;
          log::info("nats source writes to JetStream again", {{"flow", sh->flow}});
        }
        sh->cv.notify_all();
        return;
      }
      if (!item.reply.empty()) {
        // The requester is waiting: let it decide to retry.
        sh->reply(item.reply, nlohmann::json{{"error", "not stored: " + s.message()}}.dump());
        MutexLock lock(sh->mu);
        --sh->in_flight;
        sh->cv.notify_all();
        return;
      }
      MutexLock lock(sh->mu);
      if (s.code() == Status::Code::kTooLarge) {
        // Over the NATS server's max_payload: no retry can store it (nor a dead letter,
        // which carries the body).
        --sh->in_flight;
        log::error("nats source: message dropped: it can never be stored",
                   {{"flow", sh->flow}, {"id", id}, {"reason", s.message()}});
        sh->cv.notify_all();
        return;
      }
      if (!sh->failing) {
        sh->failing = true;
        log::warn("nats source cannot write to JetStream; retrying", {{"flow", sh->flow}, {"error", s.message()}});
      }
      const int shift = std::min(item.attempts, 6);
      item.retry_at = Clock::now() + std::min(milliseconds(100) * (1 << shift), milliseconds(5000));
      sh->retrying.push_back(std::move(item));
      sh->cv.notify_all();
    };
    if (!reject.empty()) {
      ctx_.ingest->reject(std::move(event), std::move(reject), options_.publish_timeout, std::move(done));
      return;
    }
    ctx_.ingest->publish(std::move(event), options_.publish_timeout, std::move(done));
  }

  flows::NatsSourceSpec spec_;
  NatsSourceOptions options_;
  SourceContext ctx_;
  std::shared_ptr<Shared> shared_;
  std::unique_ptr<NatsConnection> conn_;
  natsSubscription* sub_ = nullptr;
  std::thread thread_;
  bool started_ = false;
};

}  // namespace

std::string nats_event_body(std::string_view subject, std::string_view data,
                            const std::vector<std::pair<std::string, std::string>>& headers, int max_depth,
                            std::string* too_deep) {
  nlohmann::json body = nlohmann::json::object();
  body["subject"] = std::string(subject);
  std::string deep;
  auto parsed = flows::parse_payload(data, max_depth, &deep);
  if (!deep.empty()) {
    if (too_deep) *too_deep = std::move(deep);
    return "";
  }
  if (parsed) {
    body["payload"] = std::move(*parsed);
  } else if (is_utf8_text(data)) {
    body["payload"] = std::string(data);
  } else {
    body["payload_base64"] = base64(data);
  }
  if (!headers.empty()) {
    nlohmann::json h = nlohmann::json::object();
    for (const auto& [k, v] : headers) {
      if (!h.contains(k) && is_utf8_text(k) && is_utf8_text(v)) h[k] = v;
    }
    body["headers"] = std::move(h);
  }
  return body.dump();
}

Result<std::unique_ptr<Source>> make_nats_source(const flows::NatsSourceSpec& spec, NatsSourceOptions options) {
  if (spec.subject.empty() || spec.subject.find_first_of(" \t\r\n") != std::string::npos) {
    return Status::invalid("nats source: subject must be a NATS subject without spaces");
  }
  if (spec.queue.find_first_of(" \t\r\n") != std::string::npos) {
    return Status::invalid("nats source: queue must not contain spaces");
  }
  return std::unique_ptr<Source>(new NatsSource(spec, std::move(options)));
}

}  // namespace weir::connectors

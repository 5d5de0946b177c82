#include "connectors/nats/nats_sink.h"

#include <nats/nats.h>
#include <pthread.h>

#include <condition_variable>
#include <thread>
#include <utility>
#include <vector>

#include "connectors/nats/nats_connection.h"
#include "runtime/nats/bus.h"
#include "runtime/base/log.h"
#include "runtime/base/thread_annotations.h"

namespace weir::connectors {
namespace {

std::string describe_down(const BrokerLink& l) {
  return "NATS at " + l.broker + " is not connected" + (l.last_error.empty() ? "" : ": " + l.last_error);
}

class NatsSink final : public weir::Sink {
 public:
  NatsSink(flows::NatsSinkSpec spec, std::string flow, std::string sink_name, NatsSinkOptions options)
      : spec_(std::move(spec)),
        flow_(std::move(flow)),
        sink_name_(std::move(sink_name)),
        options_(std::move(options)) {}
  ~NatsSink() override { stop(); }

  Status start() override {
    if (running_) return Status::invalid("nats sink: started twice");
    if (options_.url.empty()) return Status::internal("nats sink: the runtime gave no NATS URL");
    auto c = NatsConnection::open({options_.url, options_.creds_file, "weir-" + flow_ + "-" + sink_name_, false});
    if (!c) return Status::unavailable("flow " + flow_ + ": sink " + sink_name_ + ": " + c.status().message());
    {
      MutexLock lock(mu_);
      conn_ = std::move(c.value());
      stopping_ = false;
    }
    running_ = true;
    thread_ = std::thread([this] { run(); });
    pthread_setname_np(thread_.native_handle(), "nats-sink");
    return Status::ok();
  }

  void stop() override {
    if (!running_) return;
    {
      MutexLock lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();  // its last round flushes and completes what was published
    running_ = false;
    MutexLock lock(mu_);  // broker_link() reads it from other threads
    conn_.reset();
  }

  int max_in_flight() const override { return options_.max_in_flight; }
  int max_retries() const override { return options_.retries; }
  std::optional<BrokerLink> broker_link() const override {
    MutexLock lock(mu_);
    if (!running_ || !conn_) return std::nullopt;
    return conn_->link();
  }

  // Runs on a delivery loop: hands the delivery to the sink's thread, which does every
  // write (a cnats publish blocks when its buffer is full and the server does not read).
  void deliver(Delivery d, std::function<void(DeliveryResult)> done) override {
    if (!running_ || !conn_->connected()) {
      done(DeliveryResult::retry(running_ ? describe_down(conn_->link()) : "sink stopping"));
      return;
    }
    {
      MutexLock lock(mu_);
      queued_.push_back(Queued{std::move(d), std::move(done)});
    }
    cv_.notify_all();
  }

 private:
  struct Queued {
    Delivery d;
    std::function<void(DeliveryResult)> done;
  };

  natsStatus publish(const Delivery& d) {
    natsMsg* msg = nullptr;
    natsStatus s = natsMsg_Create(&msg, spec_.subject.c_str(), nullptr, d.body.data(), static_cast<int>(d.body.size()));
    if (s == NATS_OK && !d.event_id.empty()) {
      s = natsMsgHeader_Set(msg, "Nats-Msg-Id", d.event_id.c_str());
      if (s == NATS_OK) s = natsMsgHeader_Set(msg, "Idempotency-Key", d.event_id.c_str());
      if (s == NATS_OK) s = natsMsgHeader_Set(msg, "Weir-Id", d.event_id.c_str());
    }
    // Trace context of the sink span (ADR 0140), as W3C-named headers.
    if (s == NATS_OK && !d.traceparent.empty()) s = natsMsgHeader_Set(msg, "traceparent", d.traceparent.c_str());
    if (s == NATS_OK && !d.tracestate.empty()) s = natsMsgHeader_Set(msg, "tracestate", d.tracestate.c_str());
    if (s == NATS_OK) s = natsConnection_PublishMsg(conn_->get(), msg);
    natsMsg_Destroy(msg);
    return s;
  }

  // Publishes what was queued, then flushes: every publish made before a round's PING is
  // confirmed by its PONG. What is queued when stopping is still published and completed.
  void run() {
    UniqueLock lock(mu_);
    for (;;) {
      lock.wait(cv_, [&]() REQUIRES(mu_) { return stopping_ || !queued_.empty(); });
      if (queued_.empty() && stopping_) break;
      std::vector<Queued> round;
      round.swap(queued_);
      lock.unlock();
      std::vector<std::function<void(DeliveryResult)>> published;
      for (auto& q : round) {
        if (natsStatus s = publish(q.d); s != NATS_OK) {
          q.done(DeliveryResult::retry(std::string("NATS publish to ") + spec_.subject +
                                       " failed: " + natsStatus_GetText(s)));
        } else {
          published.push_back(std::move(q.done));
        }
      }
      if (!published.empty()) {
        natsStatus s = natsConnection_FlushTimeout(conn_->get(), options_.flush_timeout.count());
        if (s == NATS_OK) {
          for (auto& done : published) done(DeliveryResult::ok());
        } else {
          std::string why = std::string("NATS did not confirm the publish to ") + spec_.subject + ": " +
                            natsStatus_GetText(s);
          for (auto& done : published) done(DeliveryResult::retry(why));
        }
      }
      lock.lock();
    }
  }

  flows::NatsSinkSpec spec_;
  std::string flow_, sink_name_;
  NatsSinkOptions options_;
  std::unique_ptr<NatsConnection> conn_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  std::vector<Queued> queued_ GUARDED_BY(mu_);  // handed over by deliver(), not yet published
  bool stopping_ GUARDED_BY(mu_) = false;
  std::atomic<bool> running_{false};
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<weir::Sink>> make_nats_sink(const flows::NatsSinkSpec& spec, std::string flow,
                                                   std::string sink_name, NatsSinkOptions options) {
  if (spec.subject.empty() || spec.subject.find_first_of(" \t\r\n*>") != std::string::npos) {
    return Status::invalid("flow " + flow + ": sink " + sink_name +
                           ": nats.subject must be a plain subject (no spaces or wildcards)");
  }
  if (layout::is_internal_subject(spec.subject) || spec.subject.rfind("$JS.", 0) == 0) {
    return Status::invalid("flow " + flow + ": sink " + sink_name + ": nats.subject \"" + spec.subject +
                           "\" is inside weir's own or JetStream's subjects; use a flow sink to chain flows");
  }
  return std::unique_ptr<weir::Sink>(new NatsSink(spec, std::move(flow), std::move(sink_name), std::move(options)));
}

}  // namespace weir::connectors

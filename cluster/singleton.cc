#include "cluster/singleton.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

#include "runtime/nats/nats_kv.h"
#include "runtime/base/log.h"

namespace weir::cluster {

namespace {
// The driver wakes at least this often even when the lease has nothing due: it bounds how
// late a ManualClock-driven test or a lost wakeup can leave it.
constexpr std::chrono::milliseconds kMaxSleep{50};
constexpr std::chrono::milliseconds kWatchRetry{1000};
// A watch whose newest revision has disagreed with what the lease confirmed for this long
// is made anew: cnats' KV watcher can go silent for good when the server holding its
// consumer dies, or read a diverged replica (both seen on a 3-node cluster, server 2.9).
constexpr std::chrono::milliseconds kWatchStale{1000};
}  // namespace

// Lets events through only while the lease is held, stamped with its fencing token.
class Singleton::FencedIngest final : public Ingest {
 public:
  FencedIngest(Ingest* inner, const Lease& lease) : inner_(inner), lease_(lease) {}

  void publish(IngestEvent event, std::chrono::milliseconds timeout,
               std::function<void(const Status&, const std::string& id)> done) override {
    const std::optional<uint64_t> token = lease_.token();
    if (!token) {
      // Called synchronously: the caller must not hold a lock its done callback takes.
      done(Status::conflict("lease not held"), event.id);
      return;
    }
    const std::string fence = std::to_string(*token);
    bool stamped = false;
    for (auto& [name, value] : event.headers) {
      if (name == kFenceHeader) {
        value = fence;
        stamped = true;
      }
    }
    if (!stamped) event.headers.emplace_back(kFenceHeader, fence);
    inner_->publish(std::move(event), timeout, std::move(done));
  }

  void reject(IngestEvent event, std::string reason, std::chrono::milliseconds timeout,
              std::function<void(const Status&, const std::string& id)> done) override {
    inner_->reject(std::move(event), std::move(reason), timeout, std::move(done));
  }

  bool ready() const override { return inner_->ready(); }

 private:
  Ingest* inner_;
  const Lease& lease_;
};

Singleton::Singleton(KvStore& kv, SingletonOptions options, SourceFactory factory, const Clock& clock)
    : kv_(kv),
      options_(std::move(options)),
      factory_(std::move(factory)),
      clock_(clock),
      lease_(kv, clock, options_.key, options_.owner, options_.lease) {}

Singleton::~Singleton() { stop(); }

Status Singleton::start(SourceContext& context) {
  if (started_) return Status::invalid("singleton " + options_.key + " started twice");
  if (!valid_kv_key(options_.key)) return Status::invalid("singleton lease key '" + options_.key + "' is not valid");
  if (!factory_) return Status::invalid("singleton " + options_.key + ": no source factory");
  if (context.ingest == nullptr) return Status::invalid("singleton " + options_.key + ": no ingest");
  Status valid = options_.lease.validate();
  if (!valid) return valid;

  fenced_ingest_ = std::make_unique<FencedIngest>(context.ingest, lease_);
  inner_context_ = context;
  inner_context_.ingest = fenced_ingest_.get();
  inner_context_.fence = [this] { return lease_.token(); };

  started_ = true;
  driver_ = std::thread([this] { run(); });
  pthread_setname_np(driver_.native_handle(), "weir-singleton");
  return Status::ok();
}

void Singleton::stop() { shutdown(/*release=*/true); }

void Singleton::abandon() { shutdown(/*release=*/false); }

void Singleton::shutdown(bool release) {
  if (!started_) return;
  started_ = false;
  {
    MutexLock lock(mu_);
    stop_requested_ = true;
  }
  wake_.notify_all();
  driver_.join();
  watch_.reset();  // no more callbacks after this
  watching_.store(false, std::memory_order_release);
  // The inner source stops before the lease goes: it must not emit after a standby
  // may have taken over.
  stop_inner();
  if (release) {
    lease_.release();
  } else {
    lease_.abandon();
  }
}

void Singleton::ensure_watch() {
  if (watch_ || clock_.now() < watch_retry_at_) return;
  auto watch = kv_.watch(options_.key, [this](const KvEvent& event) {
    uint64_t seen = watched_revision_.load(std::memory_order_acquire);
    while (event.revision > seen &&
           !watched_revision_.compare_exchange_weak(seen, event.revision, std::memory_order_acq_rel)) {
    }
    {
      MutexLock lock(mu_);
      if (!pending_event_ || event.revision > pending_event_->revision) pending_event_ = event;
    }
    wake_.notify_all();
  });
  if (watch) {
    watch_ = std::move(watch.value());
    watching_.store(true, std::memory_order_release);
    return;
  }
  // Without a watch the lease still works (campaigns, takeover after the ttl); only a
  // release is noticed later. Try again shortly.
  log::warn("singleton watch failed", {{"key", options_.key}, {"error", watch.status().str()}});
  watch_retry_at_ = clock_.now() + kWatchRetry;
}

void Singleton::check_watch() {
  if (!watch_) return;
  // The lease confirms every revision the watch reports (a get), so the two agree within
  // a request's time. Behind: the watch went silent. Ahead: it reads a diverged replica.
  if (lease_.known_revision() == watched_revision_.load(std::memory_order_acquire)) {
    watch_disagrees_since_.reset();
    return;
  }
  const Clock::TimePoint now = clock_.now();
  if (!watch_disagrees_since_) {
    watch_disagrees_since_ = now;
    return;
  }
  if (now - *watch_disagrees_since_ < kWatchStale) return;
  log::warn("singleton watch disagrees with the stream leader; watching anew",
            {{"key", options_.key},
             {"known", std::to_string(lease_.known_revision())},
             {"watched", std::to_string(watched_revision_.load())}});
  watch_.reset();
  watching_.store(false, std::memory_order_release);
  watch_disagrees_since_.reset();
  watch_retry_at_ = now;
}

void Singleton::run() {
  UniqueLock lock(mu_);
  while (!stop_requested_) {
    std::optional<KvEvent> event = std::move(pending_event_);
    pending_event_.reset();
    lock.unlock();

    // Only a standby needs the watch; making one blocks for a request, which a holder's
    // renewals must not wait behind.
    if (lease_.role() != Lease::Role::kLeader) {
      check_watch();
      ensure_watch();
    }
    if (event) lease_.on_event(*event);
    lease_.tick();
    sync_inner();

    lock.lock();
    if (stop_requested_ || pending_event_) continue;
    const auto until = std::min(lease_.next_deadline(), clock_.now() + kMaxSleep);
    const auto wait = until - clock_.now();
    if (wait > Clock::Duration::zero()) lock.wait_for(wake_, wait);
  }
}

void Singleton::sync_inner() {
  const bool holding = lease_.holding();
  if (holding && !inner_) {
    std::unique_ptr<Source> source = factory_();
    Status started = source ? source->start(inner_context_) : Status::internal("source factory returned nothing");
    if (!started) {
      log::error("singleton source failed to start; stepping down", {{"key", options_.key}, {"error", started.str()}});
      lease_.step_down(options_.restart_pause);
      return;
    }
    inner_ = std::move(source);
    inner_running_.store(true, std::memory_order_release);
    starts_.fetch_add(1, std::memory_order_acq_rel);
    log::info("singleton started", {{"key", options_.key}, {"fence", std::to_string(lease_.token().value_or(0))}});
  } else if (!holding && inner_) {
    stop_inner();
    log::info("singleton stopped", {{"key", options_.key}});
  }
}

void Singleton::stop_inner() {
  if (!inner_) return;
  inner_->stop();
  inner_.reset();
  inner_running_.store(false, std::memory_order_release);
}

}  // namespace weir::cluster

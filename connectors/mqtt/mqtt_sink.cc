#include "connectors/mqtt/mqtt_sink.h"

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <mqtt/async_client.h>
#include <nlohmann/json.hpp>

#include "connectors/mqtt/mqtt_codec.h"
#include "connectors/mqtt/mqtt_errors.h"
#include "connectors/mqtt/mqtt_transport.h"
#include "runtime/base/log.h"
#include "runtime/base/thread_annotations.h"
#include "runtime/base/wall_clock.h"

namespace weir::connectors {
namespace paho = ::mqtt;  // Paho MQTT C++ (our own wire code is weir::connectors::mqtt)
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Pending {
  std::function<void(DeliveryResult)> done;
  Clock::time_point deadline;
};

}  // namespace

bool valid_publish_topic(std::string_view t) {
  return !t.empty() && t.size() <= 65535 && t.find_first_of(std::string_view("+#\0", 3)) == std::string_view::npos &&
         mqtt::valid_utf8(t);
}

struct MqttSink::Impl final : public paho::iaction_listener {
  flows::MqttSinkSpec spec;
  std::string flow, sink_name;
  MqttSinkOptions options;
  mqtt::BrokerAddress address;

  std::unique_ptr<paho::async_client> client;
  paho::connect_options connect_opts;
  std::atomic<bool> running{false};
  std::atomic<bool> connected{false};
  std::atomic<bool> connecting{false};
  std::atomic<uint64_t> refused{0};  // publishes Paho threw on (for rate-limited warnings)

  mutable Mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, Pending> pending GUARDED_BY(mu);  // keyed by a never-reused number
  uint64_t next_id GUARDED_BY(mu) = 1;
  bool stopping GUARDED_BY(mu) = false;
  std::thread thread;
  // The connection as /status shows it (Sink::broker_link).
  int64_t link_since_ms GUARDED_BY(mu) = 0;
  std::string link_error GUARDED_BY(mu);
  // A connect failed with this Paho code: the sink's thread finds out why (diagnose()).
  std::optional<int> failed_rc GUARDED_BY(mu);
  uint64_t connect_failures = 0;  // in a row (sink's thread)
  std::string logged_error;       // the last reason logged (sink's thread)

  // Paho's connect listener: the connect token has no user context of ours, so connects use
  // this separate listener.
  struct ConnectListener final : public paho::iaction_listener {
    Impl* self = nullptr;
    void on_success(const paho::token&) override {
      int64_t down_ms = 0;
      {
        MutexLock lock(self->mu);
        down_ms = self->link_since_ms > 0 ? wall_ms() - self->link_since_ms : 0;
        self->link_since_ms = wall_ms();
        self->failed_rc.reset();
      }
      self->connected = true;
      self->connecting = false;
      log::info("mqtt sink connected", {{"flow", self->flow},
                                        {"sink", self->sink_name},
                                        {"broker", self->address.str()},
                                        {"down_ms", std::to_string(down_ms)}});
    }
    // Why is found out on the sink's thread: it may take a TCP connect (diagnose()).
    void on_failure(const paho::token& tok) override {
      {
        MutexLock lock(self->mu);
        self->failed_rc = tok.get_return_code();
      }
      self->connecting = false;
      self->connected = false;
      self->cv.notify_all();
    }
  } connect_listener;

  // The link went down (or stays down) for `error`; `since` moves only on a change.
  void set_down(const std::string& error) {
    MutexLock lock(mu);
    if (connected.exchange(false) || link_since_ms == 0) link_since_ms = wall_ms();
    link_error = error;
  }

  std::string current_error() const {
    MutexLock lock(mu);
    return link_error;
  }

  // After a failed connect, on the sink's thread: Paho's code says little (-1 for every
  // TCP or TLS failure), so a plain TCP connect to the broker tells refused from timed out
  // from a handshake failure (mqtt_errors.h). Logged when the reason changes, then every
  // 60th attempt in a row.
  void diagnose(int rc) {
    Status tcp = Status::ok();
    if (rc == -1) {
      mqtt::BrokerAddress plain = address;
      plain.tls = false;
      auto t = mqtt::Transport::connect(plain, nullptr, milliseconds(1000));
      if (!t) tcp = t.status();
    }
    const std::string error = mqtt_connect_failure(rc, address.str(), address.tls, tcp);
    set_down(error);
    ++connect_failures;
    if (error == logged_error && connect_failures % 60 != 0) return;
    logged_error = error;
    log::warn("mqtt sink cannot connect", {{"flow", flow},
                                           {"sink", sink_name},
                                           {"broker", address.str()},
                                           {"error", error},
                                           {"attempts", std::to_string(connect_failures)}});
  }

  std::optional<Pending> take(uint64_t id) {
    MutexLock lock(mu);
    auto it = pending.find(id);
    if (it == pending.end()) return std::nullopt;
    Pending p = std::move(it->second);
    pending.erase(it);
    return p;
  }

  // Publish listener: the user context carries the pending number, not a pointer, so a
  // late callback for a delivery that already timed out finds nothing.
  void on_success(const paho::token& tok) override {
    auto id = reinterpret_cast<uintptr_t>(tok.get_user_context());
    if (auto p = take(id)) p->done(DeliveryResult::ok());
  }
  void on_failure(const paho::token& tok) override {
    auto id = reinterpret_cast<uintptr_t>(tok.get_user_context());
    if (auto p = take(id)) {
      p->done(DeliveryResult::retry("MQTT " + mqtt_publish_failure(tok.get_return_code(), address.str())));
    }
  }

  void start_connect() {
    if (connecting.exchange(true)) return;
    try {
      client->connect(connect_opts, nullptr, connect_listener);
    } catch (const paho::exception& e) {
      connecting = false;
      set_down(mqtt_connect_failure(e.get_return_code(), address.str(), address.tls, Status::ok()));
      log::warn("mqtt sink cannot connect",
                {{"flow", flow}, {"sink", sink_name}, {"broker", address.str()}, {"error", current_error()}});
    }
  }

  // Timeouts and (re)connects: the first attempt after a loss at once, then from
  // reconnect_min doubling to reconnect_max (500 ms by default: docs/adr/0315-broker-sink-health.md).
  void run() {
    milliseconds backoff = options.reconnect_min;
    auto next_connect = Clock::now();
    UniqueLock lock(mu);
    while (!stopping) {
      lock.wait_for(cv, milliseconds(100));
      if (stopping) break;
      if (failed_rc) {
        const int rc = *failed_rc;
        failed_rc.reset();
        lock.unlock();
        diagnose(rc);
        lock.lock();
        continue;
      }
      const auto now = Clock::now();
      std::vector<Pending> expired;
      for (auto it = pending.begin(); it != pending.end();) {
        if (it->second.deadline <= now) {
          expired.push_back(std::move(it->second));
          it = pending.erase(it);
        } else {
          ++it;
        }
      }
      lock.unlock();
      for (auto& p : expired) {
        p.done(DeliveryResult::retry("no confirmation from MQTT broker " + address.str() + " within " +
                                     std::to_string(options.ack_timeout.count()) + "ms"));
      }
      if (connected.load()) {
        backoff = options.reconnect_min;
        connect_failures = 0;
        next_connect = now;  // the first attempt after a loss goes at once
      } else if (!connecting.load() && now >= next_connect) {
        start_connect();
        next_connect = now + backoff;
        backoff = std::min(backoff * 2, options.reconnect_max);
      }
      lock.lock();
    }
  }
};

MqttSink::MqttSink(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MqttSink::~MqttSink() { stop(); }

Result<std::unique_ptr<MqttSink>> MqttSink::create(const flows::MqttSinkSpec& spec, std::string flow,
                                                   std::string sink_name, MqttSinkOptions options) {
  const std::string what = "flow " + flow + ": sink " + sink_name + ": ";
  auto addr = mqtt::parse_broker_url(spec.broker, flows::schema::kMqttSinkSchemes);
  if (!addr) return Status::invalid(what + addr.status().message());
  if (spec.qos < 0 || spec.qos > 1) return Status::invalid(what + "qos must be 0 or 1");
  if (spec.client_id.empty()) return Status::invalid(what + "client_id must not be empty");
  auto impl = std::make_unique<Impl>();
  impl->spec = spec;
  impl->flow = std::move(flow);
  impl->sink_name = std::move(sink_name);
  impl->options = options;
  impl->address = addr.value();
  impl->connect_listener.self = impl.get();
  // The topic as written, or `topic: {expr: …}` compiled by the loader (docs/adr/0181).
  if (!spec.topic_expr && !valid_publish_topic(spec.topic)) {
    return Status::invalid(what + "topic \"" + spec.topic +
                           "\" is not a topic one can publish to (empty, or has + or #)");
  }
  return std::unique_ptr<MqttSink>(new MqttSink(std::move(impl)));
}

Result<std::string> MqttSink::topic_for(const std::string& event_json, const std::string& meta) const {
  const Impl& m = *impl_;
  if (!m.spec.topic_expr) return m.spec.topic;
  auto event = nlohmann::json::parse(event_json, nullptr, false);
  if (event.is_discarded()) return Status::invalid("the event is not JSON");
  const std::string& text = m.spec.topic_expr->text();
  std::string topic, error;
  if (!m.spec.topic_expr->eval_string(event, &topic, &error, meta)) {
    return Status::invalid("topic expression `" + text + "` " + error);
  }
  if (!valid_publish_topic(topic)) {
    return Status::invalid("topic expression `" + text + "` gave \"" + topic.substr(0, 200) +
                           "\", which is not a topic one can publish to");
  }
  return topic;
}

bool MqttSink::connected() const { return impl_->connected.load(); }

std::optional<BrokerLink> MqttSink::broker_link() const {
  const Impl& m = *impl_;
  BrokerLink l;
  l.broker = m.address.str();
  l.connected = m.connected.load();
  MutexLock lock(m.mu);
  l.since_ms = m.link_since_ms;
  l.last_error = m.link_error;
  return l;
}

Status MqttSink::start() {
  Impl& m = *impl_;
  if (m.running) return Status::invalid("mqtt sink: started twice");
  const std::string what = "flow " + m.flow + ": sink " + m.sink_name + ": ";
  paho::connect_options_builder b;
  // Paho counts a message in flight until after our success callback ran: give it headroom
  // over the stage's own limit so the next delivery is never refused for that.
  b.clean_session(true).keep_alive_interval(std::chrono::seconds(30)).max_inflight(4 * m.options.max_in_flight);
  b.connect_timeout(std::chrono::seconds(10));
  if (!m.spec.username_env.empty()) {
    const char* u = std::getenv(m.spec.username_env.c_str());
    if (!u) return Status::invalid(what + "environment variable " + m.spec.username_env + " (username_env) is not set");
    b.user_name(u);
  }
  if (!m.spec.password_env.empty()) {
    const char* p = std::getenv(m.spec.password_env.c_str());
    if (!p) return Status::invalid(what + "environment variable " + m.spec.password_env + " (password_env) is not set");
    b.password(p);
  }
  if (m.address.tls) {
    paho::ssl_options ssl;
    ssl.set_enable_server_cert_auth(true);
    ssl.set_verify(true);
    b.ssl(ssl);
  }
  m.connect_opts = b.finalize();
  try {
    // Paho refuses a publish (-12, "no more messages can be buffered") once more than
    // maxBufferedMessages (default 100) wait in its command queue, even while connected:
    // leave room for every delivery in flight.
    paho::create_options co(MQTTVERSION_3_1_1);
    co.set_max_buffered_messages(4 * m.options.max_in_flight);
    co.set_send_while_disconnected(false);
    m.client = std::make_unique<paho::async_client>(m.spec.broker, m.spec.client_id, co, nullptr);
  } catch (const paho::exception& e) {
    return Status::invalid(what + "cannot create the MQTT client: " + e.what());
  }
  Impl* self = &m;
  m.client->set_connection_lost_handler([self](const std::string& cause) {
    const std::string error = mqtt_connection_lost(cause, self->address.str());
    self->set_down(error);
    log::warn("mqtt sink lost the broker",
              {{"flow", self->flow}, {"sink", self->sink_name}, {"broker", self->address.str()}, {"error", error}});
    self->cv.notify_all();
  });
  {
    MutexLock lock(m.mu);
    m.stopping = false;
  }
  m.running = true;
  m.thread = std::thread([self] { self->run(); });
  pthread_setname_np(m.thread.native_handle(), "mqtt-sink");
  return Status::ok();
}

void MqttSink::stop() {
  Impl& m = *impl_;
  if (!m.running.exchange(false)) return;
  {
    MutexLock lock(m.mu);
    m.stopping = true;
  }
  m.cv.notify_all();
  if (m.thread.joinable()) m.thread.join();
  // Give confirmations on the wire a moment to arrive, then let go of the client (after its
  // destruction Paho calls nothing of ours).
  const auto until = Clock::now() + milliseconds(1000);
  for (;;) {
    {
      MutexLock lock(m.mu);
      if (m.pending.empty() || Clock::now() >= until) break;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  try {
    if (m.client->is_connected()) m.client->disconnect(milliseconds(500))->wait_for(std::chrono::seconds(2));
  } catch (const paho::exception&) {
  }
  m.client.reset();
  std::map<uint64_t, Pending> left;
  {
    MutexLock lock(m.mu);
    left.swap(m.pending);
  }
  for (auto& [id, p] : left) p.done(DeliveryResult::retry("sink stopping"));
}

int MqttSink::max_in_flight() const { return impl_->options.max_in_flight; }
int MqttSink::max_retries() const { return impl_->spec.retries; }

void MqttSink::deliver(Delivery d, std::function<void(DeliveryResult)> done) {
  Impl& m = *impl_;
  if (!m.running.load()) {
    done(DeliveryResult::retry("sink stopping"));
    return;
  }
  auto topic = topic_for(d.body, d.meta);
  if (!topic) {
    done(DeliveryResult::dead(topic.status().message()));
    return;
  }
  if (!m.connected.load()) {
    const std::string why = m.current_error();
    done(DeliveryResult::retry("MQTT broker " + m.address.str() + " is not connected" +
                               (why.empty() ? "" : ": " + why)));
    return;
  }
  uint64_t id;
  {
    MutexLock lock(m.mu);
    id = m.next_id++;
    m.pending.emplace(id, Pending{std::move(done), Clock::now() + m.options.ack_timeout});
  }
  try {
    auto msg = paho::make_message(topic.value(), d.body.data(), d.body.size(), m.spec.qos, m.spec.retain);
    // Paho hands the context back as a void*; the pending id travels in it, never dereferenced.
    void* context = reinterpret_cast<void*>(static_cast<uintptr_t>(id));  // NOLINT(performance-no-int-to-ptr)
    m.client->publish(msg, context, m);
  } catch (const paho::exception& e) {
    const uint64_t n = m.refused.fetch_add(1, std::memory_order_relaxed);
    if (n < 5 || n % 1000 == 0) {
      log::warn("mqtt sink: Paho refused a publish",
                {{"flow", m.flow}, {"sink", m.sink_name}, {"error", e.what()}, {"count", std::to_string(n + 1)}});
    }
    if (auto p = m.take(id)) {
      p->done(DeliveryResult::retry("MQTT publish to " + m.address.str() + " failed: " + e.what()));
    }
  }
}

Result<std::unique_ptr<weir::Sink>> make_mqtt_sink(const flows::MqttSinkSpec& spec, std::string flow,
                                                   std::string sink_name, MqttSinkOptions options) {
  auto s = MqttSink::create(spec, std::move(flow), std::move(sink_name), options);
  if (!s) return s.status();
  return std::unique_ptr<weir::Sink>(std::move(s.value()));
}

}  // namespace weir::connectors

#include "connectors/mqtt/mqtt_source.h"

#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "flows/json_limits.h"
#include <openssl/evp.h>

#include "runtime/ports/mailbox.h"
#include "connectors/mqtt/mqtt_codec.h"
#include "connectors/mqtt/mqtt_transport.h"
#include "runtime/base/log.h"

namespace weir::connectors {
namespace {

using Clock = std::chrono::steady_clock;
using mqtt::Packet;
using mqtt::PacketType;
using mqtt::valid_utf8;
using std::chrono::milliseconds;

// The largest event body handed to JetStream: NATS' default max_payload (1 MiB) less room
// for the headers. A text payload full of characters JSON must escape can grow past it.
constexpr size_t kMaxEventBytes = 1024 * 1024 - 16 * 1024;
constexpr uint16_t kSubscribePacketId = 1;
constexpr size_t kReadChunk = 64 * 1024;

std::string base64(std::string_view data) {
  std::string out(4 * ((data.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(data.data()), static_cast<int>(data.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

// Header values may not carry CR/LF or other control bytes.
std::string header_safe(std::string_view s) {
  std::string out(s.substr(0, 1024));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out;
}

// ---- state shared with publish callbacks ----------------------------------------------

struct Entry {
  uint64_t generation = 0;  // the connection it arrived on; a PUBACK goes only on that one
  uint16_t packet_id = 0;
  int qos = 0;
  IngestEvent event;          // kept for retries
  std::string reject_reason;  // set: the event goes to the dead-letter stream instead
  // What mqtt_unstorable_body() needs should the event turn out too large to store.
  std::string topic;
  bool retain = false;
  size_t payload_size = 0;
  bool unstorable = false;  // the body is already mqtt_unstorable_body()
  bool done = false;
  int attempts = 0;
  Clock::time_point retry_at{};
};

using Completions = Mailbox<Entry>;

}  // namespace

// ---- pure helpers -----------------------------------------------------------------------

std::string mqtt_event_body(std::string_view topic, std::string_view payload, int qos, bool retain, int max_depth,
                            std::string* too_deep) {
  nlohmann::json body = nlohmann::json::object();
  body["topic"] = valid_utf8(topic) ? std::string(topic) : header_safe(topic);
  std::string deep;
  auto parsed = flows::parse_payload(payload, max_depth, &deep);
  if (!deep.empty()) {
    if (too_deep) *too_deep = std::move(deep);
    return "";
  }
  if (parsed) {
    body["payload"] = std::move(*parsed);
  } else if (valid_utf8(payload)) {
    body["payload"] = std::string(payload);
  } else {
    body["payload_base64"] = base64(payload);
  }
  body["qos"] = qos;
  body["retain"] = retain;
  // header_safe() leaves bytes >= 0x80 alone: a topic that is not UTF-8 (a broker that does
  // not check them) would make dump() throw on the session thread.
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string mqtt_unstorable_body(std::string_view topic, int qos, bool retain, size_t payload_size) {
  nlohmann::json body = nlohmann::json::object();
  body["topic"] = valid_utf8(topic) ? std::string(topic) : header_safe(topic);
  body["qos"] = qos;
  body["retain"] = retain;
  body["payload_size"] = payload_size;
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string mqtt_event_id(std::string_view client_id, std::string_view topic, uint16_t packet_id,
                          std::string_view payload, uint32_t generation) {
  EVP_MD_CTX* c = EVP_MD_CTX_new();
  EVP_DigestInit_ex(c, EVP_sha256(), nullptr);
  auto add = [&](std::string_view s) {
    uint64_t n = s.size();
    EVP_DigestUpdate(c, &n, sizeof n);  // length-prefixed: no two field splits hash alike
    EVP_DigestUpdate(c, s.data(), s.size());
  };
  add(client_id);
  add(topic);
  uint8_t pid[2] = {static_cast<uint8_t>(packet_id >> 8), static_cast<uint8_t>(packet_id & 0xff)};
  EVP_DigestUpdate(c, pid, 2);
  add(payload);
  if (generation != 0) EVP_DigestUpdate(c, &generation, sizeof generation);  // 0: the id of ADR 0061
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(c, digest, &len);
  EVP_MD_CTX_free(c);
  static const char* kHex = "0123456789abcdef";
  std::string out = "mqtt-";
  for (int i = 0; i < 16; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 0xf]);
  }
  return out;
}

std::string MqttIds::next(std::string_view client_id, std::string_view topic, uint16_t packet_id, bool dup,
                          std::string_view payload, std::chrono::steady_clock::time_point now) {
  if (!dup || !open_[packet_id]) {
    // A new message (a redelivery comes with DUP while its id is unacknowledged; after a
    // restart nothing is open and a redelivery outside a window gets generation 0 again).
    const bool recent = last_new_[packet_id] != std::chrono::steady_clock::time_point{} &&
                        now - last_new_[packet_id] < kWindow;
    generation_[packet_id] = recent ? generation_[packet_id] + 1 : 0;
    last_new_[packet_id] = now;
  }
  open_[packet_id] = true;
  return mqtt_event_id(client_id, topic, packet_id, payload, generation_[packet_id]);
}

bool valid_topic_filter(std::string_view f) {
  if (f.empty() || f.size() > 65535 || f.find('\0') != std::string_view::npos) return false;
  size_t start = 0;
  for (;;) {
    size_t end = f.find('/', start);
    std::string_view level = f.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (level.find('#') != std::string_view::npos && (level != "#" || end != std::string_view::npos)) return false;
    if (level.find('+') != std::string_view::npos && level != "+") return false;
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return valid_utf8(f);
}

// ---- the source -------------------------------------------------------------------------

struct MqttSource::Impl {
  flows::MqttSourceSpec spec;
  MqttSourceOptions options;
  mqtt::BrokerAddress address;
  std::shared_ptr<mqtt::TlsContext> tls;
  std::optional<std::string> username, password;
  SourceContext ctx;
  std::shared_ptr<Completions> mailbox = std::make_shared<Completions>();
  std::atomic<bool> stopping{false};
  std::thread thread;
  bool started = false;
  MqttSourceCounters counters;

  // Session-thread state.
  std::unique_ptr<mqtt::Transport> transport;
  mqtt::Decoder decoder{0};
  uint64_t generation = 0;
  MqttIds ids;
  std::deque<std::shared_ptr<Entry>> in_flight;  // arrival order: PUBACKs leave in this order
  std::vector<std::shared_ptr<Entry>> retrying;  // failed publishes waiting for retry_at
  std::string out;                               // bytes not yet written
  size_t out_off = 0;
  Clock::time_point last_sent{}, ping_sent{};
  bool ping_outstanding = false;
  bool subscribed_logged = false;
  bool publish_failing = false;
  std::vector<char> read_buf = std::vector<char>(kReadChunk);
  std::mt19937 rng{std::random_device{}()};

  Impl(flows::MqttSourceSpec s, MqttSourceOptions o) : spec(std::move(s)), options(o), decoder(o.max_payload) {}

  const std::string& flow() const { return ctx.flow; }

  // ---- lifecycle ----
  void run() {
    milliseconds backoff = options.reconnect_min;
    while (!stopping.load()) {
      if (ctx.fence && !ctx.fence()) {
        pump_for(milliseconds(250));  // not the lease holder (any more): do not take the session
        continue;
      }
      Status s = connect_session();
      if (!s) {
        drop_connection();
        log::warn("mqtt source cannot connect", {{"flow", flow()},
                                                 {"broker", address.str()},
                                                 {"error", s.message()},
                                                 {"retry_in_ms", std::to_string(backoff.count())}});
        pump_for(jittered(backoff));
        backoff = std::min(backoff * 2, options.reconnect_max);
        continue;
      }
      const auto connected_at = Clock::now();
      s = serve();
      if (stopping.load()) break;
      drop_connection();
      // A session that lived a while resets the backoff: this is a new outage, not the same.
      if (Clock::now() - connected_at > std::chrono::seconds(10)) backoff = options.reconnect_min;
      log::warn("mqtt source lost the broker", {{"flow", flow()},
                                                {"broker", address.str()},
                                                {"error", s.message()},
                                                {"retry_in_ms", std::to_string(backoff.count())}});
      pump_for(jittered(backoff));
      backoff = std::min(backoff * 2, options.reconnect_max);
    }
    finish();
  }

  milliseconds jittered(milliseconds d) {
    std::uniform_int_distribution<int64_t> j(0, std::max<int64_t>(1, d.count() / 4));
    return d + milliseconds(j(rng));
  }

  // Waits `d` (or until stop) while finishing publishes of messages already read.
  void pump_for(milliseconds d) {
    const auto until = Clock::now() + d;
    while (!stopping.load() && Clock::now() < until) {
      pump_mailbox();
      run_due_retries();
      emit_pubacks();
      pollfd p{mailbox->event_fd(), POLLIN, 0};
      ::poll(&p, 1, poll_timeout(until));
      if (p.revents & POLLIN) mailbox->drain_fd();
    }
  }

  int poll_timeout(Clock::time_point until) const {
    auto t = until;
    for (const auto& e : retrying) t = std::min(t, e->retry_at);
    auto ms = std::chrono::duration_cast<milliseconds>(t - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(ms, 0, 1000));
  }

  // TCP (+TLS), CONNECT, CONNACK, SUBSCRIBE. Packets that follow the CONNACK stay in the
  // decoder for serve().
  Status connect_session() {
    auto t = mqtt::Transport::connect(address, tls.get(), options.connect_timeout);
    if (!t) return t.status();
    transport = std::move(t.value());
    decoder.reset();
    out.clear();
    out_off = 0;
    ++generation;
    mqtt::ConnectFields f;
    f.client_id = spec.client_id;
    f.clean_session = spec.clean_session;
    f.keep_alive_s = static_cast<uint16_t>(options.keep_alive.count());
    f.username = username;
    f.password = password;
    out = mqtt::encode_connect(f);
    const auto deadline = Clock::now() + options.connect_timeout;
    std::optional<Packet> connack;
    while (!connack) {
      if (stopping.load()) return Status::unavailable("stopping");
      if (Clock::now() > deadline) return Status::timeout("no CONNACK from " + address.str());
      if (Status s = flush(); !s) return s;
      pollfd p{transport->fd(), static_cast<short>(POLLIN | (pending_out() ? POLLOUT : 0)), 0};
      if (!transport->has_buffered_input()) ::poll(&p, 1, 100);
      if (Status s = read_available(); !s) return s;
      auto pk = decoder.next();
      if (!pk) return pk.status();
      if (!pk.value()) continue;
      if (pk.value()->type != PacketType::kConnack) {
        return Status::invalid("the broker sent packet type " + std::to_string(static_cast<int>(pk.value()->type)) +
                               " before CONNACK");
      }
      connack = std::move(pk.value());
    }
    if (connack->return_code != 0) {
      return Status::unavailable("the broker refused the connection: " + mqtt::connack_reason(connack->return_code));
    }
    counters.connects.fetch_add(1);
    const bool first = counters.connects.load() == 1;
    if (!spec.clean_session && !connack->session_present && !first) {
      log::warn(
          "mqtt broker had no session for this client id: messages published while weir was away "
          "may be missing (is the broker's persistence on?)",
          {{"flow", flow()}, {"client_id", spec.client_id}});
    }
    log::info("mqtt source connected", {{"flow", flow()},
                                        {"broker", address.str()},
                                        {"client_id", spec.client_id},
                                        {"session_present", connack->session_present ? "true" : "false"}});
    std::vector<std::pair<std::string, int>> filters;
    for (const auto& t : spec.topics) filters.emplace_back(t, spec.qos);
    out += mqtt::encode_subscribe(kSubscribePacketId, filters);
    last_sent = Clock::now();
    ping_outstanding = false;
    return Status::ok();
  }

  void drop_connection() {
    transport.reset();
    decoder.reset();
    out.clear();
    out_off = 0;
  }

  bool pending_out() const { return out_off < out.size(); }

  Status flush() {
    while (pending_out()) {
      size_t n = 0;
      auto r = transport->write(out.data() + out_off, out.size() - out_off, &n);
      if (r == mqtt::Transport::Io::kWouldBlock) break;
      if (r != mqtt::Transport::Io::kOk)
        return Status::unavailable("write to broker failed: " + transport->last_error());
      out_off += n;
      last_sent = Clock::now();
    }
    if (out_off == out.size()) {
      out.clear();
      out_off = 0;
    }
    return Status::ok();
  }

  // Reads what the socket has (at most a few chunks, so the loop stays responsive).
  Status read_available() {
    for (int i = 0; i < 4; ++i) {
      size_t n = 0;
      auto r = transport->read(read_buf.data(), read_buf.size(), &n);
      if (r == mqtt::Transport::Io::kWouldBlock) return Status::ok();
      if (r == mqtt::Transport::Io::kClosed) return Status::unavailable("the broker closed the connection");
      if (r == mqtt::Transport::Io::kError)
        return Status::unavailable("read from broker failed: " + transport->last_error());
      decoder.feed(read_buf.data(), n);
      if (n < read_buf.size() && !transport->has_buffered_input()) return Status::ok();
    }
    return Status::ok();
  }

  Status serve() {
    while (!stopping.load()) {
      pump_mailbox();
      run_due_retries();
      emit_pubacks();
      const bool can_take = in_flight.size() < options.max_in_flight;
      if (can_take) {
        // Packets already buffered come first (those that followed the CONNACK, or a big read).
        for (;;) {
          if (in_flight.size() >= options.max_in_flight) break;
          auto pk = decoder.next();
          if (!pk) return pk.status();
          if (!pk.value()) break;
          if (Status s = handle(*pk.value()); !s) return s;
        }
      }
      if (Status s = flush(); !s) return s;
      const auto now = Clock::now();
      if (now - last_sent >= options.keep_alive && !ping_outstanding) {
        out += mqtt::encode_pingreq();
        ping_outstanding = true;
        ping_sent = now;
        if (Status s = flush(); !s) return s;
      }
      // Not reading (window full) means a PINGRESP could sit unread: only judge while reading.
      if (ping_outstanding && can_take && now - ping_sent > options.keep_alive) {
        return Status::unavailable("no PINGRESP from the broker within the keep-alive");
      }
      const bool reading = in_flight.size() < options.max_in_flight;
      if (reading && transport->has_buffered_input()) {
        if (Status s = read_available(); !s) return s;
        continue;
      }
      pollfd p[2] = {{transport->fd(), 0, 0}, {mailbox->event_fd(), POLLIN, 0}};
      if (reading) p[0].events |= POLLIN;
      if (pending_out() || transport->read_wants_write()) p[0].events |= POLLOUT;
      auto keepalive_due = (ping_outstanding ? ping_sent : last_sent) + options.keep_alive;
      int r = ::poll(p, 2, poll_timeout(keepalive_due));
      if (r < 0) continue;
      if (p[1].revents & POLLIN) mailbox->drain_fd();
      if (p[0].revents & (POLLERR | POLLHUP | POLLNVAL) && !(p[0].revents & POLLIN)) {
        return Status::unavailable("connection to the broker failed");
      }
      if (reading && (p[0].revents & POLLIN || (transport->read_wants_write() && p[0].revents & POLLOUT))) {
        if (Status s = read_available(); !s) return s;
      }
    }
    return Status::ok();
  }

  Status handle(const Packet& pk) {
    switch (pk.type) {
      case PacketType::kPublish: return on_publish(pk);
      case PacketType::kSuback: on_suback(pk); return Status::ok();
      case PacketType::kPingresp: ping_outstanding = false; return Status::ok();
      case PacketType::kPuback:
      case PacketType::kPubrec:
      case PacketType::kPubcomp:
      case PacketType::kUnsuback: return Status::ok();  // answers to nothing we sent; harmless
      case PacketType::kPubrel:
        // Only follows a QoS 2 PUBLISH, which a QoS <= 1 subscription never receives.
        return Status::invalid("the broker sent PUBREL, but this client does not take QoS 2");
      default:
        return Status::invalid("unexpected packet type " + std::to_string(static_cast<int>(pk.type)) +
                               " from the broker");
    }
  }

  void on_suback(const Packet& pk) {
    if (pk.packet_id != kSubscribePacketId) return;
    counters.subscribed.fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < pk.granted.size() && i < spec.topics.size(); ++i) {
      if (pk.granted[i] == 0x80) {
        log::error("mqtt broker refused the subscription", {{"flow", flow()}, {"topic", spec.topics[i]}});
      } else if (static_cast<int>(pk.granted[i]) < spec.qos) {
        log::warn("mqtt broker granted a lower QoS than asked",
                  {{"flow", flow()}, {"topic", spec.topics[i]}, {"granted", std::to_string(pk.granted[i])}});
      }
    }
    if (!subscribed_logged) {
      subscribed_logged = true;
      std::string topics;
      for (const auto& t : spec.topics) topics += (topics.empty() ? "" : " ") + t;
      log::info("mqtt source subscribed", {{"flow", flow()}, {"topics", topics}, {"qos", std::to_string(spec.qos)}});
    }
  }

  Status on_publish(const Packet& pk) {
    if (pk.qos == 2) return Status::invalid("the broker sent a QoS 2 message on a QoS <= 1 subscription");
    counters.received.fetch_add(1, std::memory_order_relaxed);
    std::optional<uint64_t> fence;
    if (ctx.fence) {
      fence = ctx.fence();
      // The lease moved on: leave the message unacknowledged for the next holder's session.
      if (!fence) return Status::unavailable("the lease is no longer held");
    }
    auto e = std::make_shared<Entry>();
    e->generation = generation;
    e->packet_id = pk.packet_id;
    e->qos = pk.qos;
    e->topic = pk.topic;
    e->retain = pk.retain;
    e->payload_size = pk.oversized ? pk.payload_size : pk.payload.size();
    // The id comes first, also for a message that will be dead-lettered: the broker's
    // redelivery of it (the dead letter's write failed) is then one dead letter, not two.
    if (pk.qos > 0) e->event.id = ids.next(spec.client_id, pk.topic, pk.packet_id, pk.dup, pk.payload, Clock::now());
    e->event.headers.emplace_back("Weir-Topic", header_safe(pk.topic));
    if (fence) e->event.headers.emplace_back("Weir-Fence", std::to_string(*fence));
    in_flight.push_back(e);
    if (pk.oversized) {
      // The codec kept none of the payload.
      make_unstorable(*e, "payload of " + std::to_string(pk.payload_size) + " bytes is over the limit of " +
                              std::to_string(options.max_payload) + " bytes (mqtt max_payload)");
      submit(e);
      return Status::ok();
    }
    std::string too_deep;
    e->event.body = mqtt_event_body(pk.topic, pk.payload, pk.qos, pk.retain, ctx.max_depth, &too_deep);
    if (!too_deep.empty()) {
      // Never stored in the flow: dead-lettered as received, then acknowledged.
      e->event.body = std::string(pk.payload);
      e->reject_reason = std::move(too_deep);
    }
    if (e->event.body.size() > kMaxEventBytes) {
      make_unstorable(*e, "event of " + std::to_string(e->event.body.size()) + " bytes (payload " +
                              std::to_string(pk.payload.size()) + " bytes, escaped as JSON) is over the limit of " +
                              std::to_string(kMaxEventBytes) + " bytes");
    }
    submit(e);
    return Status::ok();
  }

  // Turns the entry into a dead letter whose body stands in for the message: the payload
  // itself can never be stored, neither in the flow nor in the dead-letter stream. The
  // PUBACK still waits for that dead letter, so the broker's resend covers a failed write.
  void make_unstorable(Entry& e, const std::string& why) {
    e.event.body = mqtt_unstorable_body(e.topic, e.qos, e.retain, e.payload_size);
    e.reject_reason = e.reject_reason.empty() ? why : e.reject_reason + "; " + why;
    e.unstorable = true;
  }

  // Only when not even the stand-in dead letter fits the NATS server's max_payload.
  void drop(Entry& e, const std::string& why) {
    counters.dropped.fetch_add(1, std::memory_order_relaxed);
    log::error("mqtt message dropped: it can never be stored, not even as a dead letter",
               {{"flow", flow()}, {"topic", header_safe(e.topic)}, {"reason", why}});
    e.done = true;  // acknowledged in order with the others, so the broker does not resend it forever
  }

  void submit(const std::shared_ptr<Entry>& e) {
    ++e->attempts;
    IngestEvent copy = e->event;
    auto done = [mb = mailbox, e](const Status& s, const std::string&) { mb->post(e, s); };
    if (!e->reject_reason.empty()) {
      ctx.ingest->reject(std::move(copy), e->reject_reason, options.publish_timeout, std::move(done));
      return;
    }
    ctx.ingest->publish(std::move(copy), options.publish_timeout, std::move(done));
  }

  void pump_mailbox() {
    for (auto& c : mailbox->take()) {
      if (c.status) {
        c.item->done = true;
        counters.published.fetch_add(1, std::memory_order_relaxed);
        if (!c.item->reject_reason.empty()) counters.dead_lettered.fetch_add(1, std::memory_order_relaxed);
        if (publish_failing) {
          publish_failing = false;
          log::info("mqtt source writes to JetStream again", {{"flow", flow()}});
        }
        continue;
      }
      if (c.status.code() == Status::Code::kTooLarge) {
        // Over the NATS server's max_payload: no retry can store it. Its stand-in can
        // (a server whose max_payload is under a topic's size cannot even take that).
        if (c.item->unstorable) {
          drop(*c.item, c.status.message());
        } else {
          make_unstorable(*c.item, c.status.message());
          submit(c.item);
        }
        continue;
      }
      if (!publish_failing) {
        publish_failing = true;
        log::warn("mqtt source cannot write to JetStream; holding the PUBACKs and retrying",
                  {{"flow", flow()}, {"error", c.status.message()}});
      }
      counters.retries.fetch_add(1, std::memory_order_relaxed);
      c.item->retry_at = Clock::now() + write_retry_delay(c.item->attempts);
      retrying.push_back(std::move(c.item));
    }
  }

  void run_due_retries() {
    if (retrying.empty() || stopping.load()) return;
    const auto now = Clock::now();
    std::vector<std::shared_ptr<Entry>> due;
    auto it = std::partition(retrying.begin(), retrying.end(), [&](const auto& e) { return e->retry_at > now; });
    due.assign(std::make_move_iterator(it), std::make_move_iterator(retrying.end()));
    retrying.erase(it, retrying.end());
    for (auto& e : due) submit(e);
  }

  // PUBACKs leave in the order the messages came (MQTT 3.1.1 §4.6), each once its write is
  // acknowledged, and only on the connection the message came on.
  void emit_pubacks() {
    while (!in_flight.empty() && in_flight.front()->done) {
      const auto& e = *in_flight.front();
      if (e.qos == 1 && transport && e.generation == generation) {
        out += mqtt::encode_puback(e.packet_id);
        ids.acknowledged(e.packet_id);
        counters.acked.fetch_add(1, std::memory_order_relaxed);
      }
      in_flight.pop_front();
    }
  }

  // After stop: no more reads; let writes in flight finish and acknowledge them, then say
  // goodbye. Whatever is left unacknowledged the broker redelivers to the next session.
  void finish() {
    const auto until = Clock::now() + options.stop_grace;
    while (!in_flight.empty() && Clock::now() < until) {
      pump_mailbox();
      emit_pubacks();
      if (transport && !flush()) drop_connection();
      if (in_flight.empty()) break;
      pollfd p{mailbox->event_fd(), POLLIN, 0};
      ::poll(&p, 1, 50);
      if (p.revents & POLLIN) mailbox->drain_fd();
    }
    if (transport) {
      out += mqtt::encode_disconnect();
      const auto deadline = Clock::now() + milliseconds(500);
      while (transport && pending_out() && Clock::now() < deadline) {
        if (!flush()) break;
        if (pending_out()) {
          pollfd p{transport->fd(), POLLOUT, 0};
          ::poll(&p, 1, 50);
        }
      }
    }
    drop_connection();
    log::info("mqtt source stopped", {{"flow", flow()},
                                      {"received", std::to_string(counters.received.load())},
                                      {"acked", std::to_string(counters.acked.load())},
                                      {"unacked", std::to_string(in_flight.size())}});
    in_flight.clear();
    retrying.clear();
  }
};

Result<std::unique_ptr<MqttSource>> MqttSource::create(const flows::MqttSourceSpec& spec, MqttSourceOptions options) {
  auto addr = mqtt::parse_broker_url(spec.broker);
  if (!addr) return Status::invalid("mqtt source: " + addr.status().message());
  if (spec.topics.empty()) return Status::invalid("mqtt source: no topic");
  for (const auto& t : spec.topics) {
    if (!valid_topic_filter(t)) return Status::invalid("mqtt source: invalid topic filter \"" + t + "\"");
  }
  if (spec.qos < 0 || spec.qos > 1) return Status::invalid("mqtt source: qos must be 0 or 1");
  if (spec.client_id.empty() || spec.client_id.size() > 65535) {
    return Status::invalid("mqtt source: client_id must not be empty");
  }
  if (spec.clean_session == false && spec.qos == 0) {
    // Allowed, but worth saying: a QoS 0 subscription keeps nothing for an absent client.
    log::debug("mqtt source: a persistent session with qos 0 queues nothing while weir is away");
  }
  auto impl = std::make_unique<Impl>(spec, options);
  impl->address = addr.value();
  const bool tls_settings = !spec.ca_file.empty() || !spec.cert_file.empty() || !spec.key_file.empty() ||
                            spec.insecure_skip_verify;
  if (tls_settings && !impl->address.tls) {
    return Status::invalid("mqtt source: TLS settings need an ssl:// or mqtts:// broker");
  }
  if (impl->address.tls) {
    mqtt::TlsSettings ts{spec.ca_file, spec.cert_file, spec.key_file, spec.insecure_skip_verify};
    auto ctx = mqtt::TlsContext::create(ts);
    if (!ctx) return Status::invalid("mqtt source: " + ctx.status().message());
    impl->tls = std::move(ctx.value());
  }
  if (impl->mailbox->event_fd() < 0) return Status::internal("mqtt source: cannot create an eventfd");
  return std::unique_ptr<MqttSource>(new MqttSource(std::move(impl)));
}

MqttSource::MqttSource(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MqttSource::~MqttSource() { stop(); }

const MqttSourceCounters& MqttSource::counters() const { return impl_->counters; }

Status MqttSource::start(SourceContext& context) {
  Impl& m = *impl_;
  if (m.started) return Status::invalid("mqtt source: started twice");
  if (!context.ingest) return Status::internal("mqtt source: no ingest");
  auto env = [&](const std::string& name, const char* key, std::optional<std::string>* out) -> Status {
    if (name.empty()) return Status::ok();
    const char* v = std::getenv(name.c_str());
    if (!v) {
      return Status::invalid("flow " + context.flow + ": environment variable " + name + " (mqtt." + key +
                             ") is not set");
    }
    *out = v;
    return Status::ok();
  };
  if (Status s = env(m.spec.username_env, "username_env", &m.username); !s) return s;
  if (Status s = env(m.spec.password_env, "password_env", &m.password); !s) return s;
  if (m.password && !m.username) {
    return Status::invalid("flow " + context.flow + ": mqtt.password_env needs username_env too (MQTT 3.1.1)");
  }
  m.ctx = context;
  m.stopping = false;
  m.started = true;
  m.thread = std::thread([&m] { m.run(); });
  pthread_setname_np(m.thread.native_handle(), "mqtt-src");
  return Status::ok();
}

void MqttSource::stop() {
  Impl& m = *impl_;
  if (!m.started) return;
  m.stopping = true;
  m.mailbox->wake();
  if (m.thread.joinable()) m.thread.join();
  m.started = false;
}

Result<std::unique_ptr<Source>> make_mqtt_source(const flows::MqttSourceSpec& spec, MqttSourceOptions options) {
  auto s = MqttSource::create(spec, options);
  if (!s) return s.status();
  return std::unique_ptr<Source>(std::move(s.value()));
}

}  // namespace weir::connectors

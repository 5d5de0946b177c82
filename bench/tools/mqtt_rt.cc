// weir-mqtt-rt: MQTT round-trip client for bench/broker-mqtt.sh and the connector tests.
//
// It subscribes (QoS 1, persistent session) to --sub-topic, then publishes --count QoS 1
// messages to --pub-topic, each a JSON object {"seq": n, "t": <send time, µs since the
// epoch>, "run": "<run id>", "pad": "..."}, keeping at most --window unconfirmed publishes
// (and at most --rate per second when given). A message counts as *acked* once the broker
// answered its PUBACK; a publish that fails (broker gone, timeout) is sent again, same seq,
// until it is acked. Every message received on --sub-topic is matched by its `seq` (at the
// top level, or under "payload" when weir's mqtt source wrapped it) and `run`: the first
// arrival is timed (arrival − t), later ones count as duplicates.
//
// With --sub-topic equal to --pub-topic this measures the broker alone (client → broker →
// client), the ceiling; with a weir flow between the two topics it measures weir.
//
// Ends when every acked message has arrived, or --timeout after the last ack. Output: one
// JSON object on stdout (count, acked, received, unique, duplicates, lost, republished,
// seconds, rt_per_s, latency_ms {p50, p90, p99, p999, max, mean}); progress on stderr.
// Exit 0 when lost == 0, 1 when messages were lost or the broker could not be reached,
// 2 on a usage error.
//
// Threading: Paho's callback threads record arrivals and acks under one mutex; the main
// thread paces, publishes, re-publishes and waits.

#include <mqtt/async_client.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <iostream>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bench/tools/histogram.h"

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

int64_t system_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

enum : uint8_t { kIdle = 0, kInFlight = 1, kAcked = 2 };
// A publish with no answer after this is sent again (Paho may never call back for a publish
// caught in a lost connection).
constexpr auto kPublishTimeout = 5s;

struct Shared {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint8_t> state;           // per seq: kIdle, kInFlight or kAcked
  std::vector<Clock::time_point> sent;  // per seq: last publish
  std::vector<uint8_t> received;        // per seq: arrivals so far (saturating)
  std::deque<int64_t> republish;        // seqs whose publish failed
  int64_t in_flight = 0;
  int64_t acked_count = 0;
  int64_t unique = 0;
  int64_t duplicates = 0;
  int64_t foreign = 0;  // messages that are not ours (other run, unparsable)
  int64_t republished = 0;
  weir::bench::LogLinearHistogram latency_us;
  Clock::time_point first_send{}, last_arrival{}, last_ack{};
};

class PublishListener : public mqtt::iaction_listener {
 public:
  explicit PublishListener(Shared& s) : s_(s) {}
  void on_success(const mqtt::token& tok) override {
    auto seq = static_cast<int64_t>(reinterpret_cast<intptr_t>(tok.get_user_context()));
    std::lock_guard lock(s_.mu);
    if (s_.state[seq] == kInFlight) --s_.in_flight;
    if (s_.state[seq] != kAcked) {
      s_.state[seq] = kAcked;
      ++s_.acked_count;
    }
    s_.last_ack = Clock::now();
    s_.cv.notify_all();
  }
  void on_failure(const mqtt::token& tok) override {
    auto seq = static_cast<int64_t>(reinterpret_cast<intptr_t>(tok.get_user_context()));
    std::lock_guard lock(s_.mu);
    if (s_.state[seq] == kInFlight) {
      --s_.in_flight;
      s_.state[seq] = kIdle;
      s_.republish.push_back(seq);
    }
    s_.cv.notify_all();
  }

 private:
  Shared& s_;
};

const json* find_key(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  if (it != j.end()) return &*it;
  auto p = j.find("payload");
  if (p != j.end() && p->is_object()) {
    auto q = p->find(key);
    if (q != p->end()) return &*q;
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"weir-mqtt-rt: MQTT QoS 1 round trips (publish -> ... -> subscribe)"};
  std::string broker = "tcp://127.0.0.1:1883";
  std::string pub_topic = "weir/rt/in";
  std::string sub_topic;
  std::string client_prefix;
  int64_t count = 1000;
  int window = 256;
  double rate = 0;
  double timeout_s = 30;
  int pad = 64;
  int qos = 1;
  bool quiet = false;
  app.add_option("--broker", broker, "broker URL (tcp://host:port)");
  app.add_option("--count", count, "messages to publish")->check(CLI::Range(int64_t{1}, int64_t{100'000'000}));
  app.add_option("--pub-topic", pub_topic, "topic to publish to");
  app.add_option("--sub-topic", sub_topic, "topic to receive on (default: the publish topic = broker alone)");
  app.add_option("--window", window, "unconfirmed publishes at most")->check(CLI::Range(1, 65535));
  app.add_option("--rate", rate, "publishes per second at most (0 = as the window allows)");
  app.add_option("--timeout", timeout_s, "seconds to wait for the last arrivals after the last ack");
  app.add_option("--pad", pad, "bytes of padding in each message")->check(CLI::Range(0, 1 << 20));
  app.add_option("--qos", qos, "QoS of publish and subscription")->check(CLI::Range(0, 1));
  app.add_option("--client-id", client_prefix, "client id prefix (default: weir-rt-<random>)");
  app.add_flag("--quiet", quiet, "no progress on stderr");
  CLI11_PARSE(app, argc, argv);
  if (sub_topic.empty()) sub_topic = pub_topic;

  std::mt19937_64 rng{std::random_device{}()};
  char run_buf[20];
  std::snprintf(run_buf, sizeof run_buf, "%08llx", static_cast<unsigned long long>(rng() & 0xffffffffULL));
  const std::string run_id = run_buf;
  if (client_prefix.empty()) client_prefix = "weir-rt-" + run_id;

  Shared s;
  s.state.assign(static_cast<size_t>(count), kIdle);
  s.sent.assign(static_cast<size_t>(count), Clock::time_point{});
  s.received.assign(static_cast<size_t>(count), 0);

  // Subscriber first, with a persistent session, so nothing published is missed even
  // across a broker restart (the broker keeps the session and its queue).
  mqtt::async_client sub(broker, client_prefix + "-sub", nullptr);
  mqtt::async_client pub(broker, client_prefix + "-pub", nullptr);
  sub.set_message_callback([&](mqtt::const_message_ptr m) {
    const auto now = Clock::now();
    const int64_t now_us = system_now_us();
    json j = json::parse(m->get_payload_str(), nullptr, false);
    const json* seq = find_key(j, "seq");
    const json* t = find_key(j, "t");
    const json* run = find_key(j, "run");
    std::lock_guard lock(s.mu);
    if (!seq || !seq->is_number_integer() || (run && run->is_string() && run->get<std::string>() != run_id)) {
      ++s.foreign;
      return;
    }
    int64_t n = seq->get<int64_t>();
    if (n < 0 || n >= count) {
      ++s.foreign;
      return;
    }
    if (s.received[n] == 0) {
      ++s.unique;
      if (t && t->is_number_integer()) s.latency_us.record(now_us - t->get<int64_t>());
      s.last_arrival = now;
      s.cv.notify_all();
    } else {
      ++s.duplicates;
    }
    if (s.received[n] < 255) ++s.received[n];
  });
  auto connect = [&](mqtt::async_client& c, bool clean) -> bool {
    auto opts = mqtt::connect_options_builder()
                    .clean_session(clean)
                    .automatic_reconnect(100ms, 2s)
                    .keep_alive_interval(30s)
                    .max_inflight(std::max(window, 20))
                    .connect_timeout(5s)
                    .finalize();
    for (int attempt = 0; attempt < 50; ++attempt) {
      try {
        c.connect(opts)->wait();
        return true;
      } catch (const mqtt::exception& e) {
        if (attempt == 49) std::cerr << "weir-mqtt-rt: cannot connect to " << broker << ": " << e.what() << "\n";
        std::this_thread::sleep_for(100ms);
      }
    }
    return false;
  };
  if (!connect(sub, false) || !connect(pub, true)) return 1;
  try {
    sub.subscribe(sub_topic, qos)->wait();
  } catch (const mqtt::exception& e) {
    std::cerr << "weir-mqtt-rt: cannot subscribe to " << sub_topic << ": " << e.what() << "\n";
    return 1;
  }

  PublishListener listener(s);
  const std::string padding(static_cast<size_t>(pad), 'x');
  auto send = [&](int64_t seq) {
    json body = {{"seq", seq}, {"t", system_now_us()}, {"run", run_id}, {"pad", padding}};
    std::string text = body.dump();
    try {
      pub.publish(pub_topic, text.data(), text.size(), qos, false, reinterpret_cast<void*>(static_cast<intptr_t>(seq)),
                  listener);
      return true;
    } catch (const mqtt::exception&) {
      return false;
    }
  };

  const auto started = Clock::now();
  s.first_send = started;
  auto last_progress = started;
  auto last_sweep = started;
  int64_t next = 0;
  // Called with the lock held; returns with it held.
  auto publish_locked = [&](std::unique_lock<std::mutex>& lock, int64_t seq) {
    s.state[seq] = kInFlight;
    s.sent[seq] = Clock::now();
    ++s.in_flight;
    lock.unlock();
    bool ok = pub.is_connected() && send(seq);
    lock.lock();
    if (!ok && s.state[seq] == kInFlight) {
      --s.in_flight;
      s.state[seq] = kIdle;
      s.republish.push_back(seq);
      s.cv.wait_for(lock, 50ms);  // the publisher is reconnecting
    }
  };
  {
    std::unique_lock lock(s.mu);
    while (s.acked_count < count) {
      const auto now = Clock::now();
      if (now - last_sweep >= 1s) {
        last_sweep = now;
        for (int64_t i = 0; i < next; ++i) {
          if (s.state[i] == kInFlight && now - s.sent[i] > kPublishTimeout) {
            --s.in_flight;
            s.state[i] = kIdle;
            s.republish.push_back(i);
          }
        }
      }
      if (!quiet && now - last_progress >= 1s) {
        last_progress = now;
        std::cerr << "weir-mqtt-rt: sent " << next << " acked " << s.acked_count << " received " << s.unique << " dup "
                  << s.duplicates << " republished " << s.republished << "\n";
      }
      if (s.in_flight >= window) {
        s.cv.wait_for(lock, 100ms);
      } else if (!s.republish.empty()) {
        int64_t seq = s.republish.front();
        s.republish.pop_front();
        if (s.state[seq] != kIdle) continue;  // acked after all
        ++s.republished;
        publish_locked(lock, seq);
      } else if (next < count) {
        if (rate > 0) {
          auto due = started + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(next / rate));
          if (now < due) {
            s.cv.wait_until(lock, due);
            continue;
          }
        }
        publish_locked(lock, next++);
      } else {
        s.cv.wait_for(lock, 100ms);
      }
    }
    // Every message is acked: wait for the arrivals, up to --timeout without progress.
    auto deadline = Clock::now() +
                    std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
    int64_t seen = s.unique;
    while (s.unique < s.acked_count && Clock::now() < deadline) {
      s.cv.wait_for(lock, 100ms);
      if (s.unique != seen) {
        seen = s.unique;
        deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
      }
      if (!quiet && Clock::now() - last_progress >= 1s) {
        last_progress = Clock::now();
        std::cerr << "weir-mqtt-rt: waiting: acked " << s.acked_count << " received " << s.unique << "\n";
      }
    }
    // Duplicates may trail the last first arrival a little.
    s.cv.wait_for(lock, 200ms);
  }

  std::lock_guard lock(s.mu);
  int64_t lost = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (s.state[i] == kAcked && !s.received[i]) ++lost;
  }
  const double seconds = s.unique > 0 ? std::chrono::duration<double>(s.last_arrival - s.first_send).count() : 0.0;
  auto ms = [&](double q) { return static_cast<double>(s.latency_us.quantile(q)) / 1000.0; };
  json out = {{"broker", broker},
              {"pub_topic", pub_topic},
              {"sub_topic", sub_topic},
              {"count", count},
              {"window", window},
              {"rate", rate},
              {"acked", s.acked_count},
              {"received", s.unique + s.duplicates},
              {"unique", s.unique},
              {"duplicates", s.duplicates},
              {"foreign", s.foreign},
              {"lost", lost},
              {"republished", s.republished},
              {"seconds", seconds},
              {"rt_per_s", seconds > 0 ? static_cast<double>(s.unique) / seconds : 0.0},
              {"latency_ms",
               {{"p50", ms(0.5)},
                {"p90", ms(0.9)},
                {"p99", ms(0.99)},
                {"p999", ms(0.999)},
                {"max", static_cast<double>(s.latency_us.max()) / 1000.0},
                {"mean", s.latency_us.mean() / 1000.0}}}};
  std::cout << out.dump() << std::endl;
  try {
    pub.disconnect()->wait_for(2s);
    // Leave no session behind on the broker for this throwaway client id.
    sub.unsubscribe(sub_topic)->wait_for(2s);
    sub.disconnect()->wait_for(2s);
  } catch (const mqtt::exception&) {
  }
  return lost == 0 ? 0 : 1;
}

// The mqtt, exec and nats connectors through the weir binary, black-box: a real mosquitto,
// a real nats-server, weir-sink and weir-mqtt-rt, all on free loopback ports.
//   - MQTT round trip of 5,000 QoS 1 messages: none lost;
//   - the same while mosquitto restarts (persistence on): none lost;
//   - kill -9 of weir mid-run: every message the broker acknowledged is delivered;
//   - a payload over max_payload, or an event over the NATS server's: one dead letter
//     (reason, topic, size), the next message delivered;
//   - exec: 10,000 lines then exit → 10,000 events, restarted after a backoff;
//   - exec: an over-long line → a clear error, the other lines delivered;
//   - exec: stopping weir ends the command's whole process group (a shell's background job);
//   - nats: requests answered after the PubAck, round trip to a nats sink.
#include <nats/nats.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "tests/support/mosquitto.h"
#include "tests/support/test_mqtt_client.h"
#include "tests/support/harness.h"

using namespace std::chrono_literals;
using weir::ctest::Mosquitto;
using weir::ctest::TestMqttClient;
using weir::itest::SinkProcess;
using weir::itest::WeirOptions;
using weir::itest::WeirProcess;
using weir::testing::NatsServer;
using weir::testing::Process;
using weir::testing::TempDir;
using weir::testing::wait_until;
using weir::testing::write_file;
using json = nlohmann::json;

namespace {

std::string mqtt_rt_binary() {
  if (const char* env = std::getenv("WEIR_MQTT_RT_BINARY"); env && *env) return env;
#ifdef WEIR_MQTT_RT_BINARY
  return WEIR_MQTT_RT_BINARY;
#else
  return "";
#endif
}

std::string mqtt_flow(const Mosquitto& m) {
  return "flow: mqtt_rt\n"
         "from: { mqtt: { broker: \"" +
         m.url() +
         "\", topic: rt/in, qos: 1 } }\n"
         "steps:\n"
         "  - map: { seq: this.payload.seq, t: this.payload.t, run: this.payload.run, topic: this.topic }\n"
         "to:\n"
         "  out: { mqtt: { broker: \"" +
         m.url() + "\", topic: rt/out, qos: 1, retries: 100 } }\n";
}

// weir-mqtt-rt as a child; its JSON report is the last line of its log.
class RoundTrips {
 public:
  RoundTrips(const Mosquitto& m, int count, double rate, const std::string& client_id) {
    REQUIRE_FALSE(mqtt_rt_binary().empty());
    proc_ = Process::spawn(
        {mqtt_rt_binary(), "--broker", m.url(), "--count", std::to_string(count), "--pub-topic", "rt/in", "--sub-topic",
         "rt/out", "--rate", std::to_string(rate), "--timeout", "60", "--client-id", client_id, "--quiet"},
        {}, dir_.file("rt.log"));
  }
  json finish(std::chrono::milliseconds timeout) {
    auto code = proc_.wait_exit(timeout);
    std::string log = proc_.read_log();
    INFO("weir-mqtt-rt log:\n" << log);
    REQUIRE(code.has_value());
    std::istringstream in(log);
    std::string line, last;
    while (std::getline(in, line)) {
      if (!line.empty() && line[0] == '{') last = line;
    }
    REQUIRE_FALSE(last.empty());
    return json::parse(last);
  }

 private:
  TempDir dir_;
  Process proc_;
};

void start_mqtt_weir(WeirProcess& w) {
  w.start();
  // The session and its subscription must exist before anything is published to rt/in.
  REQUIRE(w.process().wait_log("mqtt source subscribed", 15s));
}

// GET /dlq?flow=F once it lists something (an empty array after 30 s).
json dead_letters(const WeirProcess& w, const std::string& flow) {
  json letters = json::array();
  wait_until(
      [&] {
        auto r = w.admin("GET", "/dlq?flow=" + flow);
        if (r.status != 200) return false;
        letters = json::parse(r.body);
        return !letters.empty();
      },
      30s);
  return letters;
}

}  // namespace

TEST_CASE("weir mqtt: 5000 QoS 1 round trips - none lost", "[integration][mqtt]") {
  NatsServer nats;
  Mosquitto broker;
  WeirProcess w(WeirOptions{nats.url(), {{"rt.yaml", mqtt_flow(broker)}}});
  start_mqtt_weir(w);
  RoundTrips rt(broker, 5000, 0, "rt-plain");
  json r = rt.finish(120s);
  INFO(r.dump() << "\n" << w.describe());
  CHECK(r["acked"] == 5000);
  CHECK(r["unique"] == 5000);
  CHECK(r["lost"] == 0);
  CHECK(r["foreign"] == 0);
}

TEST_CASE("weir mqtt: mosquitto restarts mid-run - none lost", "[integration][mqtt]") {
  NatsServer nats;
  Mosquitto broker;
  WeirProcess w(WeirOptions{nats.url(), {{"rt.yaml", mqtt_flow(broker)}}});
  start_mqtt_weir(w);
  TestMqttClient watch(broker.url(), "watch-restart");
  watch.subscribe("rt/out");
  RoundTrips rt(broker, 5000, 1000, "rt-restart");
  REQUIRE(wait_until([&] { return watch.count() >= 1000; }, 30s));
  broker.stop();  // SIGTERM: mosquitto saves sessions and queued messages
  broker.start();
  json r = rt.finish(180s);
  INFO(r.dump() << "\n" << w.describe() << "\nmosquitto:\n" << broker.log());
  CHECK(r["acked"] == 5000);
  CHECK(r["lost"] == 0);
  CHECK(r["unique"] == 5000);
  CHECK(r["republished"].get<int>() > 0);  // the broker really went away under the publisher
}

TEST_CASE("weir mqtt: kill -9 of weir mid-run - every message the broker acknowledged is delivered",
          "[integration][mqtt]") {
  NatsServer nats;
  Mosquitto broker;
  WeirProcess w(WeirOptions{nats.url(), {{"rt.yaml", mqtt_flow(broker)}}});
  start_mqtt_weir(w);
  TestMqttClient watch(broker.url(), "watch-kill");
  watch.subscribe("rt/out");
  RoundTrips rt(broker, 5000, 1000, "rt-kill");
  REQUIRE(wait_until([&] { return watch.count() >= 1000; }, 30s));
  w.kill9();
  const size_t at_kill = watch.count();
  w.start();
  json r = rt.finish(180s);
  INFO(r.dump() << "\n" << w.describe());
  CHECK(at_kill < 5000);  // the kill happened mid-run
  CHECK(r["acked"] == 5000);
  CHECK(r["lost"] == 0);
  CHECK(r["unique"] == 5000);
}

namespace {

std::set<std::string> with_prefix(const std::set<std::string>& ids, const std::string& prefix) {
  std::set<std::string> out;
  for (const auto& id : ids) {
    if (id.rfind(prefix, 0) == 0) out.insert(id);
  }
  return out;
}

std::vector<int64_t> read_numbers(const std::string& path) {
  std::vector<int64_t> out;
  std::ifstream in(path);
  for (int64_t v; in >> v;) out.push_back(v);
  return out;
}

std::string exec_flow(const std::string& command_json, const std::string& sink_url, const std::string& extra = "") {
  return "flow: lines\n"
         "from: { exec: { command: " +
         command_json + ", format: json" + extra +
         " } }\n"
         "to:\n"
         "  out: { http: { url: \"" +
         sink_url + "\", retries: 8, timeout: 2s } }\n";
}

}  // namespace

TEST_CASE("weir mqtt: a payload over max_payload is a dead letter with its topic - a replay runs its stand-in",
          "[integration][mqtt]") {
  NatsServer nats;
  Mosquitto broker;
  WeirProcess w(WeirOptions{nats.url(), {{"rt.yaml", mqtt_flow(broker)}}});
  start_mqtt_weir(w);
  TestMqttClient watch(broker.url(), "watch-big");
  watch.subscribe("rt/out");
  TestMqttClient pub(broker.url(), "pub-big");
  pub.publish("rt/in", std::string(1100000, 'x'));  // over the source's max_payload, 1000 KiB
  pub.publish("rt/in", R"({"seq": 1})");
  REQUIRE(wait_until([&] { return watch.count() >= 1; }, 30s));
  CHECK(json::parse(watch.arrivals()[0].payload)["seq"] == 1);  // the next message is delivered
  json letters = dead_letters(w, "mqtt_rt");
  INFO(letters.dump() << "\n" << w.describe());
  REQUIRE(letters.size() == 1);
  CHECK(letters[0]["stage"] == "source");
  CHECK(letters[0]["reason"] == "payload of 1100000 bytes is over the limit of 1024000 bytes (mqtt max_payload)");
  CHECK(letters[0]["event"] == json{{"topic", "rt/in"}, {"qos", 1}, {"retain", false}, {"payload_size", 1100000}});
  CHECK(letters[0]["id"].get<std::string>().rfind("mqtt-", 0) == 0);
  // A replay puts the stand-in into the flow once: `this.payload` is missing (null), so
  // the map writes nulls, and the dead letter is gone.
  auto replayed = w.admin("POST", "/dlq/replay", R"({"flow": "mqtt_rt"})");
  REQUIRE(replayed.status == 200);
  CHECK(json::parse(replayed.body)["replayed"] == 1);
  REQUIRE(wait_until([&] { return watch.count() >= 2; }, 30s));
  json out = json::parse(watch.arrivals()[1].payload);
  CHECK(out["topic"] == "rt/in");
  CHECK(out["seq"].is_null());
  CHECK(json::parse(w.admin("GET", "/dlq?flow=mqtt_rt").body).empty());
}

TEST_CASE("weir mqtt: an event the NATS server refuses as too large is a dead letter with its topic",
          "[integration][mqtt]") {
  NatsServer nats("", 0, 65536);
  Mosquitto broker;
  WeirProcess w(WeirOptions{nats.url(), {{"rt.yaml", mqtt_flow(broker)}}});
  start_mqtt_weir(w);
  TestMqttClient watch(broker.url(), "watch-nats-big");
  watch.subscribe("rt/out");
  TestMqttClient pub(broker.url(), "pub-nats-big");
  pub.publish("rt/in", std::string(100000, 'y'));  // within the source's limit, over the server's
  pub.publish("rt/in", R"({"seq": 2})");
  REQUIRE(wait_until([&] { return watch.count() >= 1; }, 30s));
  CHECK(json::parse(watch.arrivals()[0].payload)["seq"] == 2);
  json letters = dead_letters(w, "mqtt_rt");
  INFO(letters.dump() << "\n" << w.describe());
  REQUIRE(letters.size() == 1);
  CHECK(letters[0]["stage"] == "source");
  CHECK_THAT(letters[0]["reason"].get<std::string>(),
             Catch::Contains("is larger than the NATS server accepts (max_payload 65536 bytes)"));
  CHECK(letters[0]["event"] == json{{"topic", "rt/in"}, {"qos", 1}, {"retain", false}, {"payload_size", 100000}});
}

TEST_CASE("weir exec: 10000 lines then exit give 10000 events - restarted after a backoff", "[integration][exec]") {
  NatsServer nats;
  SinkProcess sink;
  TempDir work;
  // Run 1 prints 10,000 JSON lines; later runs print one line each. Start and end times
  // (ns) go to files so the test can see the restart and its delay.
  write_file(work.file("gen.sh"),
             "d=\"$1\"\n"
             "date +%s%N >> \"$d/starts\"\n"
             "n=$(wc -l < \"$d/starts\")\n"
             "if [ \"$n\" -eq 1 ]; then\n"
             "  seq 1 10000 | awk '{printf \"{\\\"id\\\":\\\"r1-%d\\\",\\\"n\\\":%d}\\n\", $1, $1}'\n"
             "else\n"
             "  echo \"{\\\"id\\\":\\\"r$n-1\\\"}\"\n"
             "fi\n"
             "echo \"run $n done\" >&2\n"
             "date +%s%N >> \"$d/ends\"\n");
  json cmd = {"/bin/sh", work.file("gen.sh"), work.path()};
  WeirProcess w(WeirOptions{nats.url(), {{"lines.yaml", exec_flow(cmd.dump(), sink.url("/out"))}}});
  w.start();
  REQUIRE(wait_until([&] { return with_prefix(sink.ids(), "r1-").size() == 10000; }, 60s));
  REQUIRE(wait_until([&] { return read_numbers(work.file("starts")).size() >= 2; }, 30s));
  auto starts = read_numbers(work.file("starts"));
  auto ends = read_numbers(work.file("ends"));
  REQUIRE(ends.size() >= 1);
  const double gap_ms = static_cast<double>(starts[1] - ends[0]) / 1e6;
  INFO("restart gap " << gap_ms << " ms\n" << w.describe());
  CHECK(gap_ms >= 900);  // the first restart waits restart_min (1 s)
  CHECK(w.process().wait_log("exec command ended; restarting it", 5s));
  CHECK(w.process().wait_log("run 1 done", 5s));  // stderr reaches the log
  REQUIRE(wait_until([&] { return sink.ids().count("r2-1") == 1; }, 30s));
  auto stats = sink.stats();
  CHECK(stats["duplicates"] == 0);
  // A clean stop ends the command too (SIGTERM by PID) and exits 0.
  auto code = w.terminate(20s);
  REQUIRE(code.has_value());
  CHECK(*code == 0);
}

TEST_CASE("weir exec: an over-long line is a clear error - the lines around it are delivered", "[integration][exec]") {
  NatsServer nats;
  SinkProcess sink;
  TempDir work;
  write_file(work.file("long.sh"),
             "echo '{\"id\":\"before\"}'\n"
             "head -c 5000 /dev/zero | tr '\\0' x; echo\n"
             "echo '{\"id\":\"after\"}'\n"
             "exec sleep 60\n");  // stays up: no restart in this test; stopped by weir on exit
  json cmd = {"/bin/sh", work.file("long.sh")};
  WeirProcess w(WeirOptions{nats.url(), {{"lines.yaml", exec_flow(cmd.dump(), sink.url("/out"), ", max_line: 1KiB")}}});
  w.start();
  REQUIRE(wait_until([&] { return sink.ids().count("after") == 1; }, 30s));
  CHECK(sink.ids() == std::set<std::string>{"before", "after"});
  CHECK(w.process().wait_log("output line over max_line", 5s));
  CHECK(w.log().find("bytes=5000") != std::string::npos);
  auto code = w.terminate(20s);
  REQUIRE(code.has_value());
  CHECK(*code == 0);
}

namespace {

// Live (not zombie) processes whose process group is `pgid`, from /proc.
std::vector<int> live_in_group(int pgid) {
  std::vector<int> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(entry.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    // pid (comm) state ppid pgrp …; comm may hold spaces and parentheses: parse after the last ')'.
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    char state = 0;
    int ppid = 0, pgrp = 0;
    rest >> state >> ppid >> pgrp;
    if (pgrp == pgid && state != 'Z' && state != 'X') out.push_back(std::stoi(name));
  }
  return out;
}

int read_int_file(const std::string& path) {
  std::ifstream f(path);
  int v = 0;
  f >> v;
  return v;
}

}  // namespace

// The command runs in a process group of its own (ADR 0285), and weir stopping ends all of
// it: a shell's background job too (it outlived weir when only the shell was signalled),
// also when weir is killed with SIGKILL and cannot signal anything itself.
TEST_CASE("weir exec: stopping weir ends the command's whole process group", "[integration][exec]") {
  NatsServer nats;
  SinkProcess sink;
  TempDir work;
  write_file(work.file("bg.sh"),
             "d=\"$1\"\n"
             "sleep 600 &\n"
             "echo $! > \"$d/bg.tmp\" && mv \"$d/bg.tmp\" \"$d/bg\"\n"
             "echo $$ > \"$d/sh.tmp\" && mv \"$d/sh.tmp\" \"$d/sh\"\n"
             "echo '{\"id\":\"up\"}'\n"
             "wait\n");
  json cmd = {"/bin/sh", work.file("bg.sh"), work.path()};
  WeirProcess w(WeirOptions{nats.url(), {{"lines.yaml", exec_flow(cmd.dump(), sink.url("/out"))}}});
  w.start();
  REQUIRE(wait_until([&] { return sink.ids().count("up") == 1; }, 30s));
  const int sh = read_int_file(work.file("sh"));
  const int bg = read_int_file(work.file("bg"));
  const int group = ::getpgid(sh);
  INFO("sh " << sh << ", background sleep " << bg << ", group " << group << "\n" << w.describe());
  REQUIRE(sh > 0);
  REQUIRE(bg > 0);
  // A group of its own (not weir's, not this test's), and the background job is in it.
  REQUIRE(group > 0);
  CHECK(group != ::getpgid(0));
  CHECK(group != ::getpgid(w.process().pid()));
  CHECK(::getpgid(bg) == group);
  CHECK(live_in_group(group).size() >= 2);
  SECTION("SIGTERM") {
    auto code = w.terminate(20s);
    REQUIRE(code.has_value());
    CHECK(*code == 0);
  }
  SECTION("SIGKILL") { w.kill9(); }
  CHECK(wait_until([&] { return live_in_group(group).empty(); }, 10s));
  // Clean up after a failure: nothing of this test may run on.
  for (int pid : live_in_group(group)) ::kill(pid, SIGKILL);
}

namespace {

struct NatsClient {
  natsConnection* nc = nullptr;
  explicit NatsClient(const std::string& url) { REQUIRE(natsConnection_ConnectTo(&nc, url.c_str()) == NATS_OK); }
  ~NatsClient() {
    natsConnection_Close(nc);
    natsConnection_Destroy(nc);
  }
};

}  // namespace

TEST_CASE("weir nats: requests are answered after the PubAck - events reach the nats sink", "[integration][nats]") {
  NatsServer nats;
  const std::string flow =
      "flow: natsrt\n"
      "from: { nats: { subject: \"in.orders.*\" } }\n"
      "steps:\n"
      "  - map: { id: this.payload.id, subject: this.subject, trace: 'this.headers[\"X-Trace\"]' }\n"
      "to:\n"
      "  out: { nats: { subject: out.orders } }\n";
  WeirProcess w(WeirOptions{nats.url(), {{"natsrt.yaml", flow}}});
  w.start();
  NatsClient c(nats.url());
  natsSubscription* sub = nullptr;
  REQUIRE(natsConnection_SubscribeSync(&sub, c.nc, "out.orders") == NATS_OK);
  REQUIRE(natsConnection_Flush(c.nc) == NATS_OK);

  // 100 requests, each with a header; the answer names the stored event's id.
  std::set<std::string> reply_ids;
  for (int i = 0; i < 100; ++i) {
    natsMsg* req = nullptr;
    std::string body = "{\"id\":\"o-" + std::to_string(i) + "\"}";
    REQUIRE(natsMsg_Create(&req, "in.orders.eu", nullptr, body.data(), static_cast<int>(body.size())) == NATS_OK);
    natsMsgHeader_Set(req, "X-Trace", ("t" + std::to_string(i)).c_str());
    if (i % 2 == 0) natsMsgHeader_Set(req, "Nats-Msg-Id", ("key-" + std::to_string(i)).c_str());
    natsMsg* reply = nullptr;
    REQUIRE(natsConnection_RequestMsg(&reply, c.nc, req, 5000) == NATS_OK);
    json r = json::parse(std::string(natsMsg_GetData(reply), natsMsg_GetDataLength(reply)));
    REQUIRE(r.contains("id"));
    if (i % 2 == 0) CHECK(r["id"] == "key-" + std::to_string(i));  // Nats-Msg-Id is the event id
    reply_ids.insert(r["id"].get<std::string>());
    natsMsg_Destroy(reply);
    natsMsg_Destroy(req);
  }
  CHECK(reply_ids.size() == 100);
  // 50 plain publishes (no reply subject): at most once from the publisher's side.
  for (int i = 100; i < 150; ++i) {
    std::string body = "{\"id\":\"o-" + std::to_string(i) + "\"}";
    REQUIRE(natsConnection_PublishString(c.nc, "in.orders.us", body.c_str()) == NATS_OK);
  }
  REQUIRE(natsConnection_Flush(c.nc) == NATS_OK);

  std::set<std::string> got, msg_ids, trace_ids;
  int traced = 0;
  while (got.size() < 150) {
    natsMsg* m = nullptr;
    natsStatus s = natsSubscription_NextMsg(&m, sub, 15000);
    INFO(w.describe());
    REQUIRE(s == NATS_OK);
    json e = json::parse(std::string(natsMsg_GetData(m), natsMsg_GetDataLength(m)));
    got.insert(e["id"].get<std::string>());
    if (e["trace"].is_string()) ++traced;
    const char* id = nullptr;
    if (natsMsgHeader_Get(m, "Nats-Msg-Id", &id) == NATS_OK && id) msg_ids.insert(id);
    // A NATS source starts a trace per event; the sink sends it on (ADR 0140).
    const char* tp = nullptr;
    if (natsMsgHeader_Get(m, "traceparent", &tp) == NATS_OK && tp && std::string(tp).size() == 55) {
      trace_ids.insert(std::string(tp).substr(3, 32));
    }
    CHECK(e["subject"].get<std::string>().rfind("in.orders.", 0) == 0);
    natsMsg_Destroy(m);
  }
  CHECK(got.size() == 150);
  CHECK(traced == 100);
  CHECK(msg_ids.size() == 150);    // every delivery carries its event id
  CHECK(trace_ids.size() == 150);  // and a trace of its own
  for (const auto& id : reply_ids) CHECK(msg_ids.count(id) == 1);
  natsSubscription_Destroy(sub);
}

TEST_CASE("weir nats: a subject that would read the flow's own input is refused at start", "[integration][nats]") {
  NatsServer nats;
  const std::string flow =
      "flow: loop\n"
      "from: { nats: { subject: \">\" } }\n"
      "to:\n"
      "  out: { nats: { subject: out.loop } }\n";
  WeirProcess w(WeirOptions{nats.url(), {{"loop.yaml", flow}}});
  w.spawn();
  auto code = w.process().wait_exit(30s);
  REQUIRE(code.has_value());
  CHECK(*code == 2);
  // The loader refuses a source subject that starts with a wildcard (it would match weir's
  // own subjects, docs/adr/0274) before the connector's own loop check is reached.
  CHECK(w.log().find("starts with a wildcard") != std::string::npos);
}

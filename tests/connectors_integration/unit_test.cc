// Unit tests of the mqtt, nats and exec connectors' pure parts: the MQTT 3.1.1 codec, broker
// URLs, topic filters, event bodies and ids, the line splitter. No network, no processes.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "connectors/exec/exec_source.h"
#include "connectors/exec/line_splitter.h"
#include "connectors/mqtt/mqtt_codec.h"
#include "connectors/mqtt/mqtt_sink.h"
#include "connectors/mqtt/mqtt_source.h"
#include "connectors/mqtt/mqtt_transport.h"
#include "connectors/nats/nats_connection.h"
#include "connectors/nats/nats_source.h"

using namespace weir::connectors;
using json = nlohmann::json;

namespace {

std::vector<mqtt::Packet> decode_all(mqtt::Decoder& d) {
  std::vector<mqtt::Packet> out;
  for (;;) {
    auto r = d.next();
    REQUIRE(r.is_ok());
    if (!r.value()) return out;
    out.push_back(std::move(*r.value()));
  }
}

}  // namespace

TEST_CASE("mqtt codec: a PUBLISH survives encoding and byte-by-byte decoding", "[mqtt][codec]") {
  std::string wire = mqtt::encode_publish("sensors/1/temp", R"({"c":21.5})", 1, true, true, 4242);
  wire += mqtt::encode_publish("a", "", 0, false, false, 0);
  mqtt::Decoder d(1024);
  std::vector<mqtt::Packet> got;
  for (char c : wire) {
    d.feed(&c, 1);
    auto more = decode_all(d);
    for (auto& p : more) got.push_back(std::move(p));
  }
  REQUIRE(got.size() == 2);
  CHECK(got[0].type == mqtt::PacketType::kPublish);
  CHECK(got[0].topic == "sensors/1/temp");
  CHECK(got[0].payload == R"({"c":21.5})");
  CHECK(got[0].qos == 1);
  CHECK(got[0].dup);
  CHECK(got[0].retain);
  CHECK(got[0].packet_id == 4242);
  CHECK(got[1].topic == "a");
  CHECK(got[1].qos == 0);
  CHECK(got[1].payload.empty());
  CHECK(d.buffered() == 0);
}

TEST_CASE("mqtt codec: remaining lengths of 1 to 4 bytes", "[mqtt][codec]") {
  for (size_t n : {0u, 10u, 127u, 128u, 16383u, 16384u, 2097151u, 2097152u}) {
    std::string payload(n, 'p');
    std::string wire = mqtt::encode_publish("t", payload, 1, false, false, 7);
    mqtt::Decoder d(3u << 20);
    d.feed(wire.data(), wire.size());
    auto got = decode_all(d);
    REQUIRE(got.size() == 1);
    CHECK(got[0].payload.size() == n);
    CHECK_FALSE(got[0].oversized);
  }
}

TEST_CASE("mqtt codec: an oversized PUBLISH is reported with its id and skipped without buffering", "[mqtt][codec]") {
  const size_t limit = 1000;
  std::string big = mqtt::encode_publish("big/topic", std::string(200000, 'x'), 1, false, false, 99);
  std::string next = mqtt::encode_publish("small", "ok", 1, false, false, 100);
  std::string wire = big + next;
  mqtt::Decoder d(limit);
  std::vector<mqtt::Packet> got;
  size_t max_buffered = 0;
  for (size_t off = 0; off < wire.size(); off += 4096) {
    size_t n = std::min<size_t>(4096, wire.size() - off);
    d.feed(wire.data() + off, n);
    max_buffered = std::max(max_buffered, d.buffered());
    for (auto& p : decode_all(d)) got.push_back(std::move(p));
  }
  REQUIRE(got.size() == 2);
  CHECK(got[0].oversized);
  CHECK(got[0].packet_id == 99);
  CHECK(got[0].topic == "big/topic");
  CHECK(got[0].payload_size == 200000);
  CHECK(got[0].payload.empty());
  CHECK(got[1].payload == "ok");
  CHECK(got[1].packet_id == 100);
  CHECK(max_buffered <= 8192);
}

TEST_CASE("mqtt codec: a complete PUBLISH over the limit is oversized too", "[mqtt][codec]") {
  std::string wire = mqtt::encode_publish("t", std::string(50, 'x'), 1, false, false, 5);
  mqtt::Decoder d(10);
  d.feed(wire.data(), wire.size());
  auto got = decode_all(d);
  REQUIRE(got.size() == 1);
  CHECK(got[0].oversized);
  CHECK(got[0].payload_size == 50);
}

TEST_CASE("mqtt codec: CONNACK SUBACK PINGRESP and malformed input", "[mqtt][codec]") {
  mqtt::Decoder d(100);
  const char connack[] = {0x20, 0x02, 0x01, 0x05};
  const char suback[] = {static_cast<char>(0x90), 0x04, 0x00, 0x01, 0x01, static_cast<char>(0x80)};
  const char pingresp[] = {static_cast<char>(0xd0), 0x00};
  d.feed(connack, sizeof connack);
  d.feed(suback, sizeof suback);
  d.feed(pingresp, sizeof pingresp);
  auto got = decode_all(d);
  REQUIRE(got.size() == 3);
  CHECK(got[0].type == mqtt::PacketType::kConnack);
  CHECK(got[0].session_present);
  CHECK(got[0].return_code == 5);
  CHECK(mqtt::connack_reason(5) == "not authorized");
  CHECK(got[1].type == mqtt::PacketType::kSuback);
  CHECK(got[1].packet_id == 1);
  CHECK(got[1].granted == std::vector<uint8_t>{0x01, 0x80});
  CHECK(got[2].type == mqtt::PacketType::kPingresp);

  mqtt::Decoder bad(100);
  const char five_byte_length[] = {
      0x30, static_cast<char>(0xff), static_cast<char>(0xff), static_cast<char>(0xff), static_cast<char>(0xff), 0x01};
  bad.feed(five_byte_length, sizeof five_byte_length);
  CHECK_FALSE(bad.next().is_ok());
  CHECK_FALSE(bad.next().is_ok());  // stays failed

  mqtt::Decoder qos3(100);
  const char q3[] = {0x36, 0x03, 0x00, 0x01, 't'};
  qos3.feed(q3, sizeof q3);
  CHECK_FALSE(qos3.next().is_ok());

  mqtt::Decoder zero_id(100);
  std::string z = mqtt::encode_publish("t", "x", 1, false, false, 0);
  zero_id.feed(z.data(), z.size());
  CHECK_FALSE(zero_id.next().is_ok());
}

TEST_CASE("mqtt codec: CONNECT SUBSCRIBE and PUBACK bytes", "[mqtt][codec]") {
  mqtt::ConnectFields f;
  f.client_id = "weir-x";
  f.clean_session = false;
  f.keep_alive_s = 30;
  f.username = "u";
  f.password = "p";
  std::string c = mqtt::encode_connect(f);
  // fixed header, length, "MQTT", level 4, flags (user|pass, no clean), keep-alive 30
  CHECK(static_cast<uint8_t>(c[0]) == 0x10);
  CHECK(c.substr(2, 6) == std::string("\0\4MQTT", 6));
  CHECK(c[8] == 4);
  CHECK(static_cast<uint8_t>(c[9]) == 0xc0);
  CHECK(c[10] == 0);
  CHECK(c[11] == 30);
  CHECK(c.size() == 2 + 10 + 2 + 6 + 2 + 1 + 2 + 1);
  CHECK(mqtt::encode_puback(0x1234) == std::string("\x40\x02\x12\x34", 4));
  std::string s = mqtt::encode_subscribe(1, {{"a/#", 1}});
  CHECK(s == std::string("\x82\x08\x00\x01\x00\x03"
                         "a/#"
                         "\x01",
                         10));
}

TEST_CASE("mqtt: UTF-8 validation", "[mqtt]") {
  CHECK(mqtt::valid_utf8("plain"));
  CHECK(mqtt::valid_utf8("grüße €"));
  CHECK(mqtt::valid_utf8("\xf0\x9f\x98\x80"));
  CHECK_FALSE(mqtt::valid_utf8("\xff"));
  CHECK_FALSE(mqtt::valid_utf8("\xc3"));          // truncated
  CHECK_FALSE(mqtt::valid_utf8("\xc0\xaf"));      // overlong
  CHECK_FALSE(mqtt::valid_utf8("\xed\xa0\x80"));  // surrogate
}

TEST_CASE("mqtt: broker URLs", "[mqtt]") {
  auto a = mqtt::parse_broker_url("tcp://127.0.0.1:1884");
  REQUIRE(a.is_ok());
  CHECK(a->host == "127.0.0.1");
  CHECK(a->port == 1884);
  CHECK_FALSE(a->tls);
  auto b = mqtt::parse_broker_url("mqtts://broker.example");
  REQUIRE(b.is_ok());
  CHECK(b->tls);
  CHECK(b->port == 8883);
  auto c = mqtt::parse_broker_url("ssl://[::1]:8884");
  REQUIRE(c.is_ok());
  CHECK(c->host == "::1");
  CHECK(c->port == 8884);
  CHECK(c->str() == "[::1]:8884");
  auto creds = mqtt::parse_broker_url("tcp://user:s3cret@host:1883");
  REQUIRE_FALSE(creds.is_ok());
  CHECK(creds.status().message().find("s3cret") == std::string::npos);
  CHECK_FALSE(mqtt::parse_broker_url("ws://host:80").is_ok());
  CHECK_FALSE(mqtt::parse_broker_url("tcp://host:99999").is_ok());
  CHECK_FALSE(mqtt::parse_broker_url("tcp://host/path").is_ok());
  CHECK_FALSE(mqtt::parse_broker_url("host:1883").is_ok());
}

// Every scheme of the one list (flows/schema.h) parses, with its TLS flag and default
// port; what the loader refuses the connectors refuse too (once `tls://` was accepted
// here and refused by the loader, `ws://` the reverse).
TEST_CASE("mqtt: every broker scheme of the one list, source and sink", "[mqtt]") {
  namespace schema = weir::flows::schema;
  struct Want {
    const char* scheme;
    bool tls;
    int port;
  };
  const Want wants[] = {{"tcp", false, 1883},  {"mqtt", false, 1883}, {"ssl", true, 8883},
                        {"mqtts", true, 8883}, {"ws", false, 80},     {"wss", true, 443}};
  for (const Want& w : wants) {
    INFO(w.scheme);
    auto sink = mqtt::parse_broker_url(std::string(w.scheme) + "://h", schema::kMqttSinkSchemes);
    REQUIRE(sink.is_ok());
    CHECK(sink->tls == w.tls);
    CHECK(sink->port == w.port);
    CHECK(sink->host == "h");
    bool source_speaks = std::string_view(w.scheme).rfind("ws", 0) != 0;
    auto source = mqtt::parse_broker_url(std::string(w.scheme) + "://h:1");
    CHECK(source.is_ok() == source_speaks);
    if (!source_speaks) CHECK(source.status().message().find("WebSocket") != std::string::npos);
  }
  CHECK(std::size(schema::kMqttSinkSchemes) == std::size(wants));
  auto path = mqtt::parse_broker_url("wss://h:8443/mqtt", schema::kMqttSinkSchemes);
  REQUIRE(path.is_ok());
  CHECK(path->port == 8443);
  CHECK_FALSE(mqtt::parse_broker_url("tcp://h/mqtt", schema::kMqttSinkSchemes).is_ok());
  for (const char* bad : {"tls://h", "TCP://h", "http://h", "mqtt+ssl://h"}) {
    INFO(bad);
    CHECK_FALSE(mqtt::parse_broker_url(bad, schema::kMqttSinkSchemes).is_ok());
    CHECK_FALSE(mqtt::parse_broker_url(bad).is_ok());
  }
}

TEST_CASE("mqtt: topic filters and publish topics", "[mqtt]") {
  CHECK(valid_topic_filter("a/b/c"));
  CHECK(valid_topic_filter("a/+/c"));
  CHECK(valid_topic_filter("a/#"));
  CHECK(valid_topic_filter("#"));
  CHECK(valid_topic_filter("+"));
  CHECK_FALSE(valid_topic_filter(""));
  CHECK_FALSE(valid_topic_filter("a/#/b"));
  CHECK_FALSE(valid_topic_filter("a/b#"));
  CHECK_FALSE(valid_topic_filter("a/b+/c"));
  CHECK(valid_publish_topic("out/orders"));
  CHECK_FALSE(valid_publish_topic("out/+"));
  CHECK_FALSE(valid_publish_topic("out/#"));
  CHECK_FALSE(valid_publish_topic(""));
}

TEST_CASE("mqtt source: what a flow sees", "[mqtt]") {
  json j = json::parse(mqtt_event_body("s/1", R"({"temp": 21.5})", 1, false));
  CHECK(j == json{{"topic", "s/1"}, {"payload", {{"temp", 21.5}}}, {"qos", 1}, {"retain", false}});
  j = json::parse(mqtt_event_body("s/1", "42", 0, true));
  CHECK(j["payload"] == 42);
  CHECK(j["retain"] == true);
  j = json::parse(mqtt_event_body("s/1", "ON", 1, false));
  CHECK(j["payload"] == "ON");
  j = json::parse(mqtt_event_body("s/1", std::string("\x00\xff\x10", 3), 1, false));
  CHECK_FALSE(j.contains("payload"));
  CHECK(j["payload_base64"] == "AP8Q");
  // A topic that is not UTF-8 (a broker that does not check topics) still gives JSON.
  j = json::parse(mqtt_event_body(std::string("a/\xff", 3), "1", 1, false));
  CHECK(j["topic"] == "a/\xef\xbf\xbd");
}

TEST_CASE("mqtt source: the dead letter of a message too big to store stands in for it", "[mqtt]") {
  json j = json::parse(mqtt_unstorable_body("s/1", 1, true, 2000000));
  CHECK(j == json{{"topic", "s/1"}, {"qos", 1}, {"retain", true}, {"payload_size", 2000000}});
  // A topic that is not UTF-8 is made printable, as in the Weir-Topic header: the body stays JSON.
  j = json::parse(mqtt_unstorable_body(std::string("a/\xff\n", 4), 0, false, 7));
  CHECK(j["topic"] == "a/\xef\xbf\xbd?");  // U+FFFD for the byte that is not UTF-8
  CHECK(j["qos"] == 0);
  CHECK(j["payload_size"] == 7);
}

TEST_CASE("mqtt source: a QoS 1 message's id is stable for its redelivery and differs otherwise", "[mqtt]") {
  std::string id = mqtt_event_id("weir-f", "s/1", 17, "hello");
  CHECK(id.rfind("mqtt-", 0) == 0);
  CHECK(id.size() == 5 + 32);
  CHECK(id == mqtt_event_id("weir-f", "s/1", 17, "hello"));  // the broker's redelivery
  CHECK(id != mqtt_event_id("weir-f", "s/1", 18, "hello"));  // the same payload sent again
  CHECK(id != mqtt_event_id("weir-f", "s/2", 17, "hello"));
  CHECK(id != mqtt_event_id("weir-g", "s/1", 17, "hello"));
  CHECK(id != mqtt_event_id("weir-f", "s/1", 17, "hello!"));
  // Length-prefixed fields: moving bytes between topic and payload changes the id.
  CHECK(mqtt_event_id("c", "ab", 1, "c") != mqtt_event_id("c", "a", 1, "bc"));
}

// A session above ~182 messages/s reuses every packet id inside JetStream's 360 s dedup
// window: the same reading sent again on a reused id must not be taken for a redelivery.
TEST_CASE("mqtt source: a packet id reused for a new message inside the dedup window gets a new id", "[mqtt]") {
  using namespace std::chrono_literals;
  const auto t0 = std::chrono::steady_clock::now();
  MqttIds ids;
  const std::string first = ids.next("weir-f", "s/1", 17, false, "21.5", t0);
  CHECK(first == mqtt_event_id("weir-f", "s/1", 17, "21.5"));            // the id of ADR 0061
  CHECK(ids.next("weir-f", "s/1", 17, true, "21.5", t0 + 1s) == first);  // the broker's redelivery (DUP)
  ids.acknowledged(17);
  // 65,535 messages later (6 s at 11k/s) the broker reuses 17 for the same reading.
  const std::string wrapped = ids.next("weir-f", "s/1", 17, false, "21.5", t0 + 6s);
  CHECK(wrapped != first);
  CHECK(ids.next("weir-f", "s/1", 17, true, "21.5", t0 + 7s) == wrapped);
  ids.acknowledged(17);
  // A DUP for an id already acknowledged is a new message (its first copy was lost).
  const std::string third = ids.next("weir-f", "s/1", 17, true, "21.5", t0 + 8s);
  CHECK(third != wrapped);
  CHECK(third != first);
  ids.acknowledged(17);
  // Past the window the id is ADR 0061's again: what a restarted weir computes for the
  // broker's redelivery after a kill -9.
  CHECK(ids.next("weir-f", "s/1", 17, false, "21.5", t0 + 8s + MqttIds::kWindow) == first);
  MqttIds restarted;
  CHECK(restarted.next("weir-f", "s/1", 17, true, "21.5", t0 + 9s) == first);
}

TEST_CASE("mqtt source: bad specs are clear start-up errors", "[mqtt]") {
  weir::flows::MqttSourceSpec s;
  s.broker = "tcp://127.0.0.1:1883";
  s.topics = {"a/#"};
  s.client_id = "weir-x";
  CHECK(make_mqtt_source(s).is_ok());
  auto bad_topic = s;
  bad_topic.topics = {"a/#/b"};
  auto r = make_mqtt_source(bad_topic);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message().find("a/#/b") != std::string::npos);
  auto tls_on_tcp = s;
  tls_on_tcp.ca_file = "/etc/ssl/certs/ca-certificates.crt";
  CHECK_FALSE(make_mqtt_source(tls_on_tcp).is_ok());
  auto missing_ca = s;
  missing_ca.broker = "ssl://127.0.0.1:8883";
  missing_ca.ca_file = "/nonexistent/ca.pem";
  r = make_mqtt_source(missing_ca);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message().find("/nonexistent/ca.pem") != std::string::npos);
  auto ws = s;
  ws.broker = "ws://127.0.0.1:9001";
  CHECK_FALSE(make_mqtt_source(ws).is_ok());
}

namespace {
// The MQTT sink spec of a flow whose `to.out.mqtt.topic` is `topic` (as YAML), through the loader.
weir::flows::MqttSinkSpec mqtt_sink_spec(const std::string& topic) {
  auto loaded = weir::flows::load_flow_text(
      "flow: f\nfrom: { http: { path: /f } }\nto: { out: { mqtt: { broker: \"tcp://127.0.0.1:1883\", topic: " + topic +
          " } } }\n",
      "f.yaml");
  REQUIRE(loaded.diagnostics.empty());
  return std::get<weir::flows::MqttSinkSpec>(loaded.flow->sinks()[0].kind);
}
}  // namespace

// docs/adr/0181: text is the topic; an expression only when written `topic: {expr: …}`.
TEST_CASE("mqtt sink: a plain topic is text, an expression only when written as one", "[mqtt]") {
  auto plain = MqttSink::create(mqtt_sink_spec("out/orders"), "f", "out");
  REQUIRE(plain.is_ok());
  CHECK(plain.value()->topic_for(R"({"a":1})").value() == "out/orders");

  auto expr = MqttSink::create(mqtt_sink_spec(R"({expr: "'devices/' + this.device + '/cmd'"})"), "f", "out");
  REQUIRE(expr.is_ok());
  CHECK(expr.value()->topic_for(R"({"device":"d7"})").value() == "devices/d7/cmd");
  auto missing = expr.value()->topic_for(R"({"other":1})");
  REQUIRE_FALSE(missing.is_ok());  // null + string: a type error, or a null topic
  auto wildcard = expr.value()->topic_for(R"({"device":"+"})");
  REQUIRE_FALSE(wildcard.is_ok());
  CHECK(wildcard.status().message().find("not a topic") != std::string::npos);

  auto path = MqttSink::create(mqtt_sink_spec("{expr: this.topic}"), "f", "out");
  REQUIRE(path.is_ok());
  CHECK(path.value()->topic_for(R"({"topic":"x/y"})").value() == "x/y");
  auto number = path.value()->topic_for(R"({"topic":5})");
  REQUIRE_FALSE(number.is_ok());
  CHECK(number.status().message().find("not a string") != std::string::npos);

  weir::flows::MqttSinkSpec wild = mqtt_sink_spec("out/orders");
  wild.topic = "out/#";  // the loader refuses it too (tests/flows/loader_test.cc)
  CHECK_FALSE(MqttSink::create(wild, "f", "out").is_ok());
}

TEST_CASE("line splitter: lines CRLF partial lines and the length bound", "[exec]") {
  LineSplitter sp(10);
  std::vector<Line> out;
  sp.feed("one\r\ntw", &out);
  sp.feed("o\n\nthree", &out);
  REQUIRE(out.size() == 3);
  CHECK(out[0].text == "one");
  CHECK(out[1].text == "two");
  CHECK(out[2].text.empty());
  CHECK(out[2].number == 3);
  sp.finish(&out);
  REQUIRE(out.size() == 4);
  CHECK(out[3].text == "three");

  LineSplitter lim(10);
  std::vector<Line> l;
  lim.feed("0123456789\n", &l);    // exactly max_line: kept
  lim.feed("0123456789\r\n", &l);  // max_line plus CR: kept
  lim.feed("0123456789A\n", &l);   // one over: oversized
  lim.feed(std::string(100000, 'z'), &l);
  lim.feed("z\nafter\n", &l);
  REQUIRE(l.size() == 5);
  CHECK(l[0].text == "0123456789");
  CHECK_FALSE(l[0].oversized);
  CHECK(l[1].text == "0123456789");
  CHECK(l[2].oversized);
  CHECK(l[2].length == 11);
  CHECK(l[3].oversized);
  CHECK(l[3].length == 100001);
  CHECK(l[3].text.empty());
  CHECK(l[4].text == "after");
  CHECK(l[4].number == 5);
}

TEST_CASE("exec source: event bodies", "[exec]") {
  bool was_json = false;
  CHECK(exec_event_body(R"({"a": 1})", true, &was_json) == R"({"a": 1})");
  CHECK(was_json);
  CHECK(json::parse(exec_event_body("[1,2]", true, &was_json)) == json{{"line", {1, 2}}});
  CHECK(json::parse(exec_event_body("hello world", true, &was_json)) == json{{"line", "hello world"}});
  CHECK_FALSE(was_json);
  CHECK(json::parse(exec_event_body(R"({"a": 1})", false, &was_json)) == json{{"line", R"({"a": 1})"}});
  CHECK(json::parse(exec_event_body("bad \xff byte", false, &was_json))["line"].is_string());
}

TEST_CASE("exec source: program lookup and bad specs", "[exec]") {
  const std::string sh = resolve_program("sh");
  CHECK(sh.size() > 3);
  CHECK(sh.substr(sh.size() - 3) == "/sh");
  CHECK(resolve_program("/bin/sh") == "/bin/sh");
  CHECK(resolve_program("no-such-program-weir") == "");
  weir::flows::ExecSourceSpec s;
  s.command = {"no-such-program-weir", "--x"};
  auto r = make_exec_source(s);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message().find("not found in PATH") != std::string::npos);
  s.command = {"sh", "-c", "true"};
  s.format = "yaml";
  CHECK_FALSE(make_exec_source(s).is_ok());
  s.format = "text";
  auto ok = make_exec_source(s);
  REQUIRE(ok.is_ok());
  CHECK(ok.value()->singleton());
}

TEST_CASE("nats source: what a flow sees", "[nats]") {
  json j = json::parse(nats_event_body("in.orders", R"({"id":1})", {{"X-Trace", "t1"}}));
  CHECK(j == json{{"subject", "in.orders"}, {"payload", {{"id", 1}}}, {"headers", {{"X-Trace", "t1"}}}});
  j = json::parse(nats_event_body("in.x", "plain", {}));
  CHECK(j["payload"] == "plain");
  CHECK_FALSE(j.contains("headers"));
  j = json::parse(nats_event_body("in.x", std::string("\xff\xfe", 2), {}));
  CHECK(j["payload_base64"] == "//4=");
}

TEST_CASE("broker payloads past the depth limit are refused, not wrapped", "[unit][depth]") {
  auto nested = [](int depth) {
    std::string v = "1";
    for (int i = 0; i < depth; ++i) v = "[" + v + "]";
    return v;
  };
  std::string why;
  // The event wraps the payload one level down: a payload of depth 7 fits a limit of 8.
  CHECK(json::parse(mqtt_event_body("t", nested(7), 1, false, 8, &why))["payload"].is_array());
  CHECK(why.empty());
  CHECK(mqtt_event_body("t", nested(8), 1, false, 8, &why).empty());
  CHECK(why.find("nested deeper than 7 levels") != std::string::npos);
  why.clear();
  CHECK(json::parse(nats_event_body("s", nested(7), {}, 8, &why))["payload"].is_array());
  CHECK(nats_event_body("s", std::string(100000, '[') + std::string(100000, ']'), {}, 8, &why).empty());
  CHECK(why.find("(http.max_depth 8)") != std::string::npos);
  why.clear();
  bool was_json = false;
  CHECK(!exec_event_body(nested(7), true, &was_json, 8, &why).empty());  // {"line": [...]} is 8 deep
  CHECK(exec_event_body(nested(8), true, &was_json, 8, &why).empty());
  CHECK(!why.empty());
  why.clear();
  // An object line is the event itself: it may use the whole depth.
  std::string obj = "{\"a\":" + nested(7) + "}";
  CHECK(exec_event_body(obj, true, &was_json, 8, &why) == obj);
  CHECK(why.empty());
}

// Trace context (ADR 0140): a W3C traceparent given to http-in reaches
// the HTTP sink in the same trace with a new span id; without one (or with a malformed
// one) weir starts a trace; dead letters keep it. Through the real binary and weir-sink.
#include <catch2/catch.hpp>

#include <map>
#include <regex>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

const std::regex kTraceparent("00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})");

struct Parsed {
  std::string trace_id, span_id, flags;
};

// The traceparent weir-sink saw on the delivery of the event whose "id" is `id`.
std::optional<std::string> sink_header(const SinkProcess& sink, const std::string& id, const std::string& name) {
  for (const auto& r : sink.requests(200)) {
    if (body_of(r).value("id", "") != id) continue;
    const json& h = r.at("headers");
    if (!h.contains(name)) return std::string();
    return h.at(name).get<std::string>();
  }
  return std::nullopt;
}

Parsed parse(const std::string& tp) {
  std::smatch m;
  REQUIRE(std::regex_match(tp, m, kTraceparent));
  Parsed p{m[1], m[2], m[3]};
  CHECK(p.trace_id != std::string(32, '0'));
  CHECK(p.span_id != std::string(16, '0'));
  return p;
}

}  // namespace

TEST_CASE("trace context: http-in's traceparent reaches the http sink in the same trace, or a new trace starts",
          "[integration][trace]") {
  NatsServer nats;
  SinkProcess sink({"--record", "200"});
  std::string shaped =
      "flow: shaped\nfrom: { http: { path: /in/shaped } }\nsteps:\n  - set: { seen: true }\n"
      "to: { out: { http: { url: \"" +
      sink.url("/out") + "\", retries: 2, timeout: 2s } } }\n";
  // A chain: `first` hands its events to `second` through a flow sink.
  std::string first =
      "flow: first\nfrom: { http: { path: /in/first } }\nsteps:\n  - set: { hop: 1 }\n"
      "to: { next: { flow: {} } }\n";
  std::string second =
      "flow: second\nfrom: { flow: first.next }\nsteps:\n  - set: { hop: 2 }\n"
      "to: { out: { http: { url: \"" +
      sink.url("/out") + "\", retries: 2, timeout: 2s } } }\n";
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"plain.yaml", http_flow("plain", "/in/plain", sink.url("/out"))},
                              {"shaped.yaml", shaped},
                              {"first.yaml", first},
                              {"second.yaml", second}}});
  weir.start();
  INFO(weir.describe());

  const std::string trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  const std::string parent = "00f067aa0ba902b7";
  const std::string given = "00-" + trace_id + "-" + parent + "-01";
  REQUIRE(weir.post("/in/plain", R"({"id":"tr-a"})", {"traceparent: " + given, "tracestate: vendor=abc,x=1"}).status ==
          202);
  REQUIRE(weir.post("/in/shaped", R"({"id":"tr-steps"})", {"traceparent: " + given}).status == 202);
  REQUIRE(weir.post("/in/first", R"({"id":"tr-chain"})", {"traceparent: " + given}).status == 202);
  // (b) none given; a malformed one (upper case, all-zero ids, another version) is never a 4xx.
  REQUIRE(weir.post("/in/plain", R"({"id":"tr-b"})").status == 202);
  REQUIRE(weir.post("/in/plain", R"({"id":"tr-upper"})",
                    {"traceparent: 00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "tracestate: a=b"})
              .status == 202);
  REQUIRE(weir.post("/in/plain", R"({"id":"tr-zero"})",
                    {"traceparent: 00-00000000000000000000000000000000-00f067aa0ba902b7-01"})
              .status == 202);
  REQUIRE(weir.post("/in/plain", R"({"id":"tr-zero-span"})", {"traceparent: 00-" + trace_id + "-0000000000000000-01"})
              .status == 202);
  REQUIRE(weir.post("/in/plain", R"({"id":"tr-v1"})", {"traceparent: 01-" + trace_id + "-" + parent + "-01"}).status ==
          202);

  const std::vector<std::string> ids = {"tr-a",     "tr-steps", "tr-chain",     "tr-b",
                                        "tr-upper", "tr-zero",  "tr-zero-span", "tr-v1"};
  REQUIRE(wait_until(
      [&] {
        auto got = sink.ids();
        for (const auto& id : ids) {
          if (!got.count(id)) return false;
        }
        return true;
      },
      20s, 50ms));

  // (a) same trace id, another span id (each stage made a child span), flags kept;
  // tracestate travels with it.
  for (const std::string id : {"tr-a", "tr-steps", "tr-chain"}) {
    INFO(id);
    auto tp = sink_header(sink, id, "traceparent");
    REQUIRE(tp.has_value());
    Parsed p = parse(*tp);
    CHECK(p.trace_id == trace_id);
    CHECK(p.span_id != parent);
    CHECK(p.flags == "01");
  }
  CHECK(sink_header(sink, "tr-a", "tracestate") == std::optional<std::string>("vendor=abc,x=1"));

  // (b) a new, valid trace for each; an invalid traceparent's tracestate is dropped.
  std::set<std::string> traces;
  for (const std::string id : {"tr-b", "tr-upper", "tr-zero", "tr-zero-span", "tr-v1"}) {
    INFO(id);
    auto tp = sink_header(sink, id, "traceparent");
    REQUIRE(tp.has_value());
    Parsed p = parse(*tp);
    CHECK(p.trace_id != trace_id);
    traces.insert(p.trace_id);
  }
  CHECK(traces.size() == 5);
  CHECK(sink_header(sink, "tr-upper", "tracestate") == std::optional<std::string>(""));
}

TEST_CASE("trace context: a dead-lettered event keeps its trace id", "[integration][trace][dlq]") {
  NatsServer nats;
  // The first delivery is answered 400: dead at once.
  SinkProcess sink({"--record", "50", "--fail-first", "1", "--fail-status", "400"});
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"dead.yaml", http_flow("dead", "/in/dead", sink.url("/out"),
                                                      "retries: 2, " WEIR_TEST_RETRY ", timeout: 2s")}}});
  weir.start();
  INFO(weir.describe());

  const std::string trace_id = "0af7651916cd43dd8448eb211c80319c";
  const std::string given = "00-" + trace_id + "-b7ad6b7169203331-01";
  REQUIRE(weir.post("/in/dead", R"({"id":"tr-dead"})", {"traceparent: " + given}).status == 202);

  json dead;
  REQUIRE(wait_until(
      [&] {
        auto r = weir.admin("GET", "/dlq");
        if (r.status != 200) return false;
        dead = json::parse(r.body);
        return dead.size() >= 1;
      },
      20s, 100ms));
  INFO("dlq: " << dead.dump());
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].at("event").value("id", "") == "tr-dead");
  Parsed p = parse(dead[0].value("traceparent", ""));
  CHECK(p.trace_id == trace_id);

  // Replayed, it is delivered (the sink now answers 2xx) in the same trace.
  REQUIRE(weir.admin("POST", "/dlq/replay", "{}", {"Content-Type: application/json"}).status / 100 == 2);
  REQUIRE(wait_until([&] { return sink.ids().count("tr-dead") > 0; }, 20s, 50ms));
  bool found = false;
  for (const auto& r : sink.requests(50)) {
    if (body_of(r).value("id", "") == "tr-dead" && r.value("status", 0) / 100 == 2) {
      found = true;
      CHECK(parse(r.at("headers").value("traceparent", "")).trace_id == trace_id);
    }
  }
  INFO("requests: " << sink.requests(50).dump());
  CHECK(found);
}

namespace {

// Every span in the OTLP/JSON bodies the collector (a second weir-sink) received.
std::vector<json> collected_spans(const SinkProcess& collector, const std::string& service = "weir-test") {
  std::vector<json> out;
  for (const auto& r : collector.requests(1000)) {
    if (r.value("path", "") != "/v1/traces") continue;
    json doc = json::parse(r.at("body").get<std::string>());
    for (const auto& rs : doc.at("resourceSpans")) {
      CHECK(rs.at("resource").at("attributes").dump().find("\"stringValue\":\"" + service + "\"") != std::string::npos);
      for (const auto& ss : rs.at("scopeSpans")) {
        for (const auto& s : ss.at("spans")) out.push_back(s);
      }
    }
  }
  return out;
}

int64_t metric(const WeirProcess& weir, const std::string& name) {
  auto r = weir.admin("GET", "/metrics");
  REQUIRE(r.status == 200);
  auto at = r.body.find("\n" + name + " ");
  REQUIRE(at != std::string::npos);
  return std::stoll(r.body.substr(at + name.size() + 2));
}

}  // namespace

TEST_CASE("trace export: the OTLP collector gets ingress → flow → sink spans linked parent to child",
          "[integration][trace][otlp]") {
  NatsServer nats;
  SinkProcess sink({"--record", "50"});
  SinkProcess collector({"--record", "1000"});
  std::string shaped =
      "flow: shaped\nfrom: { http: { path: /in/shaped } }\nsteps:\n  - set: { seen: true }\n"
      "to: { out: { http: { url: \"" +
      sink.url("/out") + "\", retries: 2, timeout: 2s } } }\n";
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"shaped.yaml", shaped}},
                    .config = "trace: { otlp_endpoint: \"" + collector.url("/v1/traces") +
                              "\", service_name: weir-test, max_queue: 2048 }\n"});
  weir.start();
  INFO(weir.describe());

  const std::string trace_id = "5bf92f3577b34da6a3ce929d0e0e4737";
  const std::string parent = "10f067aa0ba902b8";
  REQUIRE(
      weir.post("/in/shaped", R"({"id":"otlp-1"})", {"traceparent: 00-" + trace_id + "-" + parent + "-01"}).status ==
      202);
  REQUIRE(weir.post("/in/shaped", R"({"id":"otlp-2"})").status == 202);
  REQUIRE(wait_until([&] { return sink.ids().count("otlp-1") && sink.ids().count("otlp-2"); }, 20s, 50ms));

  // Spans of one trace by name; waits until all three arrived (batches leave every second).
  auto spans_of = [&](const std::string& trace) {
    std::map<std::string, std::vector<json>> by_name;
    for (const auto& s : collected_spans(collector)) {
      if (s.value("traceId", "") == trace) by_name[s.value("name", "")].push_back(s);
    }
    return by_name;
  };
  std::map<std::string, std::vector<json>> got;
  REQUIRE(wait_until(
      [&] {
        got = spans_of(trace_id);
        return got.size() == 3;
      },
      20s, 100ms));
  INFO("spans: " << json(got).dump());
  REQUIRE(got["ingress"].size() == 1);
  REQUIRE(got["flow"].size() == 1);
  REQUIRE(got["sink"].size() == 1);
  const json &in = got["ingress"][0], &fl = got["flow"][0], &sk = got["sink"][0];
  CHECK(in.value("parentSpanId", "") == parent);
  CHECK(fl.value("parentSpanId", "") == in.value("spanId", "x"));
  CHECK(sk.value("parentSpanId", "") == fl.value("spanId", "x"));
  for (const json* s : {&in, &fl, &sk}) {
    CHECK(std::regex_match(s->value("spanId", ""), std::regex("[0-9a-f]{16}")));
    CHECK(s->at("status").value("code", 0) == 1);
    CHECK(std::stoll(s->value("startTimeUnixNano", "0")) > 0);
    CHECK(std::stoll(s->value("endTimeUnixNano", "0")) >= std::stoll(s->value("startTimeUnixNano", "0")));
  }
  CHECK(std::stoll(fl.value("startTimeUnixNano", "0")) >= std::stoll(in.value("startTimeUnixNano", "0")));
  // What the sink received names the sink span as its parent.
  auto tp = sink_header(sink, "otlp-1", "traceparent");
  REQUIRE(tp.has_value());
  CHECK(parse(*tp).span_id == sk.value("spanId", "x"));

  // Without a traceparent the ingress span is the root of a new trace.
  Parsed p2 = parse(sink_header(sink, "otlp-2", "traceparent").value_or(""));
  std::map<std::string, std::vector<json>> second;
  REQUIRE(wait_until(
      [&] {
        second = spans_of(p2.trace_id);
        return second.size() == 3;
      },
      20s, 100ms));
  CHECK_FALSE(second["ingress"].at(0).contains("parentSpanId"));
  CHECK(second["flow"].at(0).value("parentSpanId", "") == second["ingress"].at(0).value("spanId", "x"));

  CHECK(metric(weir, "weir_trace_spans_dropped_total") == 0);
  CHECK(metric(weir, "weir_trace_spans_exported_total") >= 6);
}

TEST_CASE("trace export: a collector that is down drops spans and counts them, events still flow",
          "[integration][trace][otlp]") {
  NatsServer nats;
  SinkProcess sink({"--record", "50"});
  // Nothing listens on port 9 (discard) on loopback: every export fails at once.
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"plain.yaml", http_flow("plain", "/in/plain", sink.url("/out"))}},
                    .config = "trace: { otlp_endpoint: \"http://127.0.0.1:9/v1/traces\" }\n"});
  weir.start();
  INFO(weir.describe());
  REQUIRE(weir.post("/in/plain", R"({"id":"down-1"})").status == 202);
  REQUIRE(wait_until([&] { return sink.ids().count("down-1") > 0; }, 20s, 50ms));
  REQUIRE(wait_until([&] { return metric(weir, "weir_trace_spans_dropped_total") >= 3; }, 20s, 100ms));
  CHECK(metric(weir, "weir_trace_export_failures_total") >= 1);
  CHECK(metric(weir, "weir_trace_spans_exported_total") == 0);
}

TEST_CASE("trace: a trace.otlp_endpoint that is not an http(s) URL exits 2", "[integration][trace][config]") {
  NatsServer nats;
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"plain.yaml", http_flow("plain", "/in/plain", "http://127.0.0.1:9/out")}},
                    .config = "trace: { otlp_endpoint: \"ftp://127.0.0.1/x\" }\n"});
  weir.spawn();
  auto code = weir.process().wait_exit(15s);
  INFO(weir.describe());
  REQUIRE(code.has_value());
  CHECK(*code == 2);
  CHECK(weir.log().find("trace.otlp_endpoint") != std::string::npos);
}

TEST_CASE("trace export: past trace.max_queue spans are dropped and counted, every span is accounted for",
          "[integration][trace][otlp]") {
  NatsServer nats;
  SinkProcess sink({"--record", "50"});
  SinkProcess collector({"--record", "1000"});
  // One span may wait; the exporter empties the queue once a second, so most of the 60
  // spans (3 per event: ingress, flow, sink) of 20 events posted back to back are dropped.
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"plain.yaml", http_flow("plain", "/in/plain", sink.url("/out"))}},
                    .config = "trace: { otlp_endpoint: \"" + collector.url("/v1/traces") + "\", max_queue: 1 }\n"});
  weir.start();
  INFO(weir.describe());
  for (int i = 0; i < 20; ++i) {
    REQUIRE(weir.post("/in/plain", json{{"id", "q-" + std::to_string(i)}}.dump()).status == 202);
  }
  REQUIRE(wait_until([&] { return sink.ids().size() == 20; }, 20s, 50ms));
  int64_t exported = 0, dropped = 0;
  REQUIRE(wait_until(
      [&] {
        exported = metric(weir, "weir_trace_spans_exported_total");
        dropped = metric(weir, "weir_trace_spans_dropped_total");
        return exported + dropped == 60;
      },
      20s, 100ms));
  CHECK(dropped >= 1);
  CHECK(exported >= 1);
  CHECK(static_cast<int64_t>(collected_spans(collector, "weir").size()) == exported);
  CHECK(metric(weir, "weir_trace_export_failures_total") == 0);
}

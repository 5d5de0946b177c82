// The admin API's guard rails (docs/admin-api.md) through the
// weir binary — no start off loopback without a token (exit 2); the token on every call
// but /healthz and /readyz (PUT /flows, GET /flows, /status, promote, rollback included);
// 403 for a foreign Origin or a non-loopback Host without a token; 415 for a write that
// is not JSON (YAML allowed for PUT /flows); a network deploy reads no environment
// variable outside a running flow's from:/to: and never echoes one; a new flow sent over
// the API runs no command, names no server file, reaches no NATS system subject and only
// admin.allow_hosts unless the operator allows it (docs/adr/0274); an alias cycle is a
// 422; credentials in the NATS URL and exec arguments stay out of logs and /status; exec
// sees only its environment allowlist.
#include <filesystem>

#include <catch2/catch.hpp>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::http_request;
using weir::testing::NatsServer;
using weir::testing::Process;
using weir::testing::TempDir;
using weir::testing::wait_until;
using weir::testing::write_file;

namespace {

const std::string kToken = "adm-7f2c9e-token";
const std::string kSecret = "s3cret-value-9a8b7c";  // an environment variable a deploy must not read

// `flow` (from http_flow, which writes `steps: []`) with other steps.
std::string with_steps(std::string flow, const std::string& steps) {
  flow.replace(flow.find("steps: []\n"), 10, steps);
  return flow;
}

// The body weir-sink received for the event whose "id" is `id` (null when none).
json delivered_body(const SinkProcess& sink, const std::string& id) {
  for (const auto& r : sink.requests(1000)) {
    json b = body_of(r);
    if (b.is_object() && b.value("id", "") == id) return b;
  }
  return json();
}

}  // namespace

TEST_CASE("admin off loopback without a token: weir exits 2 with a clear message", "[integration][admin]") {
  TempDir dir;
  write_file(dir.file("flows/plain.yaml"), http_flow("plain", "/in/plain", "http://127.0.0.1:9/out"));
  // 0.0.0.0 is never bound: the check comes before any listener or NATS connection.
  Process p = Process::spawn({weir_binary(), "run", "--flows", dir.file("flows"), "--data-dir", dir.file("data"),
                              "--nats", "nats://127.0.0.1:1", "--http", "127.0.0.1:0", "--admin", "0.0.0.0:0"},
                             {}, dir.file("weir.log"));
  auto code = p.wait_exit(20s);
  std::string log = p.read_log();
  INFO(log);
  REQUIRE(code.has_value());
  CHECK(*code == 2);
  CHECK(log.find("0.0.0.0:0 is not a loopback address") != std::string::npos);
  CHECK(log.find("admin.token_env") != std::string::npos);
}

TEST_CASE("the admin token guards every call but healthz and readyz", "[integration][admin]") {
  NatsServer nats;
  SinkProcess sink;
  WeirOptions o;
  o.nats_url = nats.url();
  o.flows = {{"plain.yaml", http_flow("plain", "/in/plain", sink.url("/plain"))}};
  o.config = "admin: { token_env: WEIR_ADMIN_TOKEN }\n";
  o.env = {{"WEIR_ADMIN_TOKEN", kToken}};
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());
  const std::string v2 = with_steps(http_flow("plain", "/in/plain", sink.url("/plain")), "steps:\n  - set: { v: 2 }\n");
  struct Call {
    std::string method, path, body;
  };
  const std::vector<Call> calls = {
      {"GET", "/flows", ""},
      {"GET", "/flows/plain", ""},
      {"PUT", "/flows/plain", v2},
      {"POST", "/flows/plain/promote", R"({"version": 2})"},
      {"POST", "/flows/plain/rollback", ""},
      {"GET", "/status", ""},
      {"GET", "/metrics", ""},
      {"GET", "/dlq", ""},
      {"POST", "/dlq/replay", "{}"},
  };
  for (const auto& c : calls) {
    INFO(c.method << " " << c.path);
    auto none = weir.admin(c.method, c.path, c.body);
    CHECK(none.status == 401);
    CHECK(none.header("www-authenticate") == "Bearer");
    CHECK(weir.admin(c.method, c.path, c.body, {"Authorization: Bearer " + kToken + "x"}).status == 401);
    CHECK(weir.admin(c.method, c.path, c.body, {"Authorization: bearer " + kToken}).status == 401);
    CHECK(weir.admin(c.method, c.path, c.body, {"Authorization: Basic " + base64("u:" + kToken)}).status == 401);
  }
  // Nothing changed without the token: still version 1, the flow as started.
  auto flows = weir.admin("GET", "/flows/plain", "", {"Authorization: Bearer " + kToken});
  REQUIRE(flows.status == 200);
  INFO(flows.body);
  CHECK(json::parse(flows.body).dump().find("\"version\":2") == std::string::npos);
  // With the token each call gets past the check (standalone: promote and rollback are 501).
  std::map<std::string, int> want = {{"GET /flows", 200},
                                     {"GET /flows/plain", 200},
                                     {"PUT /flows/plain", 201},
                                     {"POST /flows/plain/promote", 501},
                                     {"POST /flows/plain/rollback", 501},
                                     {"GET /status", 200},
                                     {"GET /metrics", 200},
                                     {"GET /dlq", 200},
                                     {"POST /dlq/replay", 200}};
  for (const auto& c : calls) {
    std::string key = c.method + " " + c.path;
    auto r = weir.admin(c.method, c.path, c.body, {"Authorization: Bearer " + kToken});
    INFO(key << " → " << r.status << " " << r.body);
    CHECK(r.status == want.at(key));
  }
  CHECK(http_request("GET", weir.admin_url("/healthz")).status == 200);
  CHECK(http_request("GET", weir.admin_url("/readyz")).status == 200);
  CHECK(weir.log().find(kToken) == std::string::npos);
}

TEST_CASE("admin: a foreign Origin or Host is 403, a write that is not JSON is 415", "[integration][admin]") {
  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir(
      {.nats_url = nats.url(), .flows = {{"plain.yaml", http_flow("plain", "/in/plain", sink.url("/plain"))}}});
  weir.start();
  INFO(weir.describe());
  const std::string own = "http://127.0.0.1:" + std::to_string(weir.admin_port());
  auto call = [&](const std::string& method, const std::string& path, const std::string& body,
                  std::vector<std::string> headers) {
    return http_request(method, weir.admin_url(path), body, headers, 10s);
  };
  // CSRF: a page elsewhere posting to the admin API.
  for (const std::string& origin : std::vector<std::string>{"http://evil.example", "http://127.0.0.1:1", "null",
                                                            "https://127.0.0.1:" + std::to_string(weir.admin_port())}) {
    INFO("Origin: " << origin);
    CHECK(call("POST", "/dlq/replay", "{}", {"Origin: " + origin, "Content-Type: application/json"}).status == 403);
    CHECK(call("GET", "/dlq", "", {"Origin: " + origin}).status == 403);
    CHECK(call("GET", "/status", "", {"Origin: " + origin}).status == 403);
  }
  // The admin's own origin (the dashboard's fetches) is served.
  CHECK(call("GET", "/status", "", {"Origin: " + own}).status == 200);
  CHECK(call("POST", "/dlq/replay", "{}", {"Origin: " + own, "Content-Type: application/json"}).status == 200);
  // DNS rebinding: same-origin in the browser, but the Host is not loopback (no token).
  CHECK(call("GET", "/dlq", "", {"Host: rebind.example:" + std::to_string(weir.admin_port())}).status == 403);
  CHECK(call("GET", "/dlq", "", {"Host: localhost:" + std::to_string(weir.admin_port())}).status == 200);

  // Writes must say they are JSON (HTML forms can only send these other types).
  for (std::string type : {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""}) {
    INFO("Content-Type: " << type);
    std::vector<std::string> h;
    if (!type.empty()) h.push_back("Content-Type: " + type);
    else h.push_back("Content-Type:");  // curl: drop the header it would add
    CHECK(call("POST", "/dlq/replay", "{}", h).status == 415);
    CHECK(call("POST", "/flows/plain/promote", R"({"version": 2})", h).status == 415);
  }
  CHECK(call("POST", "/dlq/replay", "{}", {"Content-Type: application/json; charset=utf-8"}).status == 200);
  // No body: nothing to interpret, any type (curl sends a form type by default).
  CHECK(call("POST", "/flows/plain/rollback", "", {"Content-Type:"}).status == 501);
  CHECK(call("POST", "/flows/plain/rollback", "", {}).status == 501);
  // PUT /flows may carry YAML.
  const std::string v2 = with_steps(http_flow("plain", "/in/plain", sink.url("/plain")), "steps:\n  - set: { v: 2 }\n");
  CHECK(call("PUT", "/flows/plain", v2, {"Content-Type: text/plain"}).status == 415);
  for (std::string type : {"application/yaml", "text/yaml", "application/x-yaml", "application/json"}) {
    INFO("PUT with " << type);
    CHECK(call("PUT", "/flows/plain", v2, {"Content-Type: " + type}).status == 201);
  }
  CHECK(weir.running());
}

TEST_CASE("admin: a network deploy reads no environment variable and never echoes one", "[integration][admin]") {
  NatsServer nats;
  SinkProcess sink;
  TempDir tables;
  write_file(tables.file("t.csv"), "k,v\na,1\n");
  // The running flow names its sink through ${SINK_URL}: from:/to: keep substitution.
  const std::string base =
      "flow: plain\n"
      "from: { http: { path: /in/plain } }\n"
      "to:\n"
      "  out: { http: { url: \"${SINK_URL}/plain\", retries: 8, " WEIR_TEST_RETRY ", timeout: 2s } }\n";
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"plain.yaml", base}},
                    .env = {{"SINK_URL", sink.url("")}, {"LEAKY_SECRET", kSecret}}});
  weir.start();
  INFO(weir.describe());
  auto put = [&](const std::string& text) { return weir.admin("PUT", "/flows/plain", text); };

  const std::vector<std::pair<std::string, std::string>> hostile = {
      {"in a step", base + "steps:\n  - set: { leak: \"'${LEAKY_SECRET}'\" }\n"},
      {"with a default", base + "steps:\n  - set: { leak: \"'${LEAKY_SECRET:-x}'\" }\n"},
      {"as the flow name", "flow: \"${LEAKY_SECRET}\"\n" + base.substr(base.find('\n') + 1)},
      {"in a sink url",
       "flow: plain\nfrom: { http: { path: /in/plain } }\nto:\n"
       "  out: { http: { url: \"http://127.0.0.1:9/${LEAKY_SECRET}\" } }\n"},
      {"in a test case", base + "tests:\n  - name: t\n    in: { a: \"${LEAKY_SECRET}\" }\n    out: { a: 1 }\n"},
      {"a table file", base + "tables:\n  t: { file: " + tables.file("t.csv") + ", key: k }\n"},
  };
  for (const auto& [what, text] : hostile) {
    INFO(what);
    auto r = put(text);
    INFO(r.status << " " << r.body);
    CHECK(r.status == 422);
    CHECK(r.body.find(kSecret) == std::string::npos);
  }
  // The step case names the variable (not its value) and says why.
  auto named = put(hostile[0].second);
  CHECK(named.body.find("${LEAKY_SECRET}") != std::string::npos);
  CHECK(named.body.find("admin.allow_env") != std::string::npos);

  // `$$` is a literal `$`, as when the file is read again from disk; from:/to: keep
  // ${SINK_URL}; the new version runs and delivers there.
  auto ok = put(base + "steps:\n  - set: { price: \"'$$5'\", v: 2 }\n");
  INFO(ok.body);
  REQUIRE(ok.status == 201);
  auto r = weir.post("/in/plain", R"({"id":"after-deploy"})");
  REQUIRE(r.status == 202);
  REQUIRE(wait_until([&] { return sink.ids().count("after-deploy") == 1; }, 20s, 50ms));
  json got = delivered_body(sink, "after-deploy");
  INFO(got.dump());
  CHECK(got.value("price", "") == "$5");
  CHECK(got.value("v", 0) == 2);
  CHECK(weir.log().find(kSecret) == std::string::npos);

  // Restarted from the file the deploy wrote: the same text, the same result.
  REQUIRE(weir.terminate().value_or(-1) == 0);
  weir.start();
  auto r2 = weir.post("/in/plain", R"({"id":"after-restart"})");
  REQUIRE(r2.status == 202);
  REQUIRE(wait_until([&] { return sink.ids().count("after-restart") == 1; }, 20s, 50ms));
}

TEST_CASE("credentials in the NATS URL and exec arguments stay out of logs and status, and exec gets an env allowlist",
          "[integration][admin]") {
  NatsServer nats;  // no auth: it ignores the user and password weir sends
  SinkProcess sink;
  TempDir work;
  // One JSON line naming which of the variables it was asked about the command can see.
  write_file(work.file("env.sh"),
             "found=''\n"
             "for v in PATH HOME SHOWN_VAR HIDDEN_SECRET WEIR_ADMIN_TOKEN; do\n"
             "  if printenv \"$v\" > /dev/null; then found=\"$found $v\"; fi\n"
             "done\n"
             "echo \"{\\\"id\\\":\\\"env\\\",\\\"found\\\":\\\"$found\\\"}\"\n"
             "exec sleep 600\n");
  json cmd = {"/bin/sh", work.file("env.sh"), "--token=argv-" + kSecret};
  std::string url = nats.url();
  std::string with_creds = "nats://natsuser:pw-" + kSecret + "@" + url.substr(std::string("nats://").size());
  WeirOptions o;
  o.nats_url = with_creds;
  o.flows = {{"env.yaml",
              "flow: envs\n"
              "from: { exec: { command: " +
                  cmd.dump() +
                  ", format: json, env: [SHOWN_VAR] } }\n"
                  "to:\n"
                  "  out: { http: { url: \"" +
                  sink.url("/env") + "\", retries: 8, " WEIR_TEST_RETRY ", timeout: 2s } }\n"}};
  o.config = "admin: { token_env: WEIR_ADMIN_TOKEN }\n";
  o.env = {{"WEIR_ADMIN_TOKEN", kToken}, {"SHOWN_VAR", "shown"}, {"HIDDEN_SECRET", kSecret}};
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());
  REQUIRE(wait_until([&] { return sink.ids().count("env") == 1; }, 20s, 50ms));
  json got = delivered_body(sink, "env");
  std::string found = got.value("found", "");
  INFO("the command saw:" << found);
  CHECK(found.find("PATH") != std::string::npos);
  CHECK(found.find("SHOWN_VAR") != std::string::npos);
  CHECK(found.find("HIDDEN_SECRET") == std::string::npos);
  CHECK(found.find("WEIR_ADMIN_TOKEN") == std::string::npos);

  auto status = weir.admin("GET", "/status", "", {"Authorization: Bearer " + kToken});
  REQUIRE(status.status == 200);
  CHECK(status.body.find(kSecret) == std::string::npos);
  CHECK(status.body.find("natsuser") == std::string::npos);
  CHECK(weir.process().wait_log("exec command started", 10s));
  std::string log = weir.log();
  CHECK(log.find(kSecret) == std::string::npos);
  CHECK(log.find("natsuser") == std::string::npos);
  CHECK(log.find("***@127.0.0.1") != std::string::npos);  // the URL is logged, redacted
}

TEST_CASE("admin: a new flow sent over the API runs no command, reads no environment and names no server file",
          "[integration][admin]") {
  NatsServer nats;
  SinkProcess sink;
  TempDir work;
  const std::string marker = work.file("ran");
  // A flow on disk whose path reads the environment: answers show it as written.
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"plain.yaml", http_flow("plain", "/in/plain", sink.url("/plain"))},
                              {"hidden.yaml", http_flow("hidden", "/in/${LEAKY_SECRET}", sink.url("/hidden"))}},
                    .env = {{"LEAKY_SECRET", kSecret}}});
  weir.start();
  INFO(weir.describe());
  auto put = [&](const std::string& name, const std::string& text) {
    return weir.admin("PUT", "/flows/" + name, text);
  };
  const std::string to_sink = "to: { out: { http: { url: \"" + sink.url("/x") + "\" } } }\n";
  struct Case {
    std::string what, name, text, says;
  };
  const std::vector<Case> refused = {
      {"an exec source", "pwn",
       "flow: pwn\nfrom: { exec: { command: [/bin/sh, -c, \"touch " + marker + "\"] } }\n" + to_sink,
       "admin.allow_exec"},
      {"a secret in the new flow's path", "leak",
       "flow: leak\nfrom: { http: { path: \"/in/${LEAKY_SECRET}\" } }\n" + to_sink, "${LEAKY_SECRET}"},
      {"secrets in the new flow's sink url", "leak2",
       "flow: leak2\nfrom: { http: { path: /in/leak2 } }\nto: { out: { http: { url: \"${LEAKY_SECRET}${HOME}\" } } }\n",
       "${LEAKY_SECRET}"},
      {"an MQTT key file", "certs",
       "flow: certs\nfrom: { mqtt: { broker: \"ssl://127.0.0.1:8883\", topic: t, key_file: /etc/shadow } }\n" + to_sink,
       "may not name files on the server"},
      {"the JetStream API as a sink", "js",
       "flow: js\nfrom: { http: { path: /in/js } }\nto: { out: { nats: { subject: \"$JS.API.STREAM.DELETE.weir_plain\" "
       "} } "
       "}\n",
       "NATS system subject"},
      {"weir's own subjects as a source", "tap",
       "flow: tap\nfrom: { nats: { subject: \"weir.plain.in\" } }\n" + to_sink, "inside weir's own subjects"},
  };
  for (const auto& c : refused) {
    INFO(c.what);
    auto r = put(c.name, c.text);
    INFO(r.status << " " << r.body);
    CHECK(r.status == 422);
    CHECK(r.body.find(c.says) != std::string::npos);
    CHECK(r.body.find(kSecret) == std::string::npos);
    CHECK(weir.admin("GET", "/flows/" + c.name).status == 404);
    CHECK_FALSE(std::filesystem::exists(weir.flow_path(c.name + ".yaml")));
  }
  // An alias cycle and an alias bomb, to a running flow and as a new one: 422, weir serving.
  std::string bomb = "flow: plain\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) bomb += std::string(k ? ", " : "") + "*a" + std::to_string(i - 1);
    bomb += "]\n";
  }
  for (const std::string& hostile : {std::string("flow: plain\nfrom: &a [*a]\n"), bomb}) {
    for (const std::string name : {"plain", "fresh"}) {
      INFO(name << ": " << hostile.substr(0, 60));
      auto r = put(name, hostile);
      INFO(r.status << " " << r.body);
      CHECK(r.status == 422);
    }
  }
  REQUIRE(weir.running());
  CHECK(http_request("GET", weir.admin_url("/healthz")).status == 200);

  // No answer carries the value the file on disk substitutes into its path.
  for (const std::string path : {"/flows", "/flows/hidden", "/status"}) {
    auto r = weir.admin("GET", path);
    INFO(path << " " << r.body);
    REQUIRE(r.status == 200);
    CHECK(r.body.find(kSecret) == std::string::npos);
  }
  CHECK(json::parse(weir.admin("GET", "/flows/hidden").body).value("path", "") == "/in/${LEAKY_SECRET}");
  CHECK(weir.post("/in/" + kSecret, R"({"id":"hidden-1"})").status == 202);  // the path itself still works

  // Restarted: nothing refused was written, so nothing runs now either.
  REQUIRE(weir.terminate().value_or(-1) == 0);
  weir.start();
  CHECK(weir.admin("GET", "/flows/pwn").status == 404);
  CHECK_FALSE(std::filesystem::exists(marker));
  CHECK(weir.log().find(kSecret) == std::string::npos);
}

TEST_CASE("admin: the operator opens exec, variables and hosts to deploys deliberately", "[integration][admin]") {
  NatsServer nats;
  SinkProcess sink;
  WeirOptions o;
  o.nats_url = nats.url();
  o.flows = {{"plain.yaml", http_flow("plain", "/in/plain", sink.url("/plain"))}};
  o.config = "admin: { allow_exec: true, allow_env: [SINK_BASE], allow_hosts: [\"127.0.0.1\"] }\n";
  o.env = {{"SINK_BASE", sink.url("")}, {"LEAKY_SECRET", kSecret}};
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());
  // An exec source and an allowed variable: started and delivering.
  auto ran = weir.admin(
      "PUT", "/flows/cmd",
      "flow: cmd\nfrom: { exec: { command: [/bin/sh, -c, \"echo '{\\\"id\\\":\\\"ran\\\"}'; exec sleep 600\"] } }\n"
      "to: { out: { http: { url: \"${SINK_BASE}/cmd\" } } }\n");
  INFO(ran.status << " " << ran.body);
  REQUIRE(ran.status == 201);
  REQUIRE(wait_until([&] { return sink.ids().count("ran") == 1; }, 20s, 50ms));
  // A variable off the list, and a host off the list (also spelled to slip past a prefix check).
  auto secret = weir.admin("PUT", "/flows/leak",
                           "flow: leak\nfrom: { http: { path: /in/leak } }\nto: { out: { http: { url: "
                           "\"http://127.0.0.1:1/${LEAKY_SECRET}\" } } }\n");
  CHECK(secret.status == 422);
  CHECK(secret.body.find(kSecret) == std::string::npos);
  for (const std::string url : {"http://localhost:1/x", "http://127.0.0.1@10.0.0.7/x", "http://127.0.0.1.nip.io/x"}) {
    INFO(url);
    auto r = weir.admin(
        "PUT", "/flows/egress",
        "flow: egress\nfrom: { http: { path: /in/egress } }\nto: { out: { http: { url: \"" + url + "\" } } }\n");
    INFO(r.status << " " << r.body);
    CHECK(r.status == 422);
    CHECK(r.body.find("admin.allow_hosts") != std::string::npos);
  }
  // A per-event URL (docs/adr/0317-per-event-urls.md): each origin it may name is checked.
  auto computed = weir.admin("PUT", "/flows/computed",
                             "flow: computed\nfrom: { http: { path: /in/computed } }\nto: { out: { http: { url: { "
                             "base: \"http://127.0.0.1:1\", expr: this.to, allow: [\"http://10.0.0.7\"] } } } }\n");
  INFO(computed.status << " " << computed.body);
  CHECK(computed.status == 422);
  CHECK(json::parse(computed.body)
            .at("errors")
            .dump()
            .find(R"(to.out.http.url.allow: host \"10.0.0.7\" is not in the config's admin.allow_hosts)") !=
        std::string::npos);
}

// An HTTP sink authenticating to its receiver (docs/connectors.md, `to.<name>.http.tls` and
// `to.<name>.http.oauth2`; docs/adr/0302-http-sink-tls-and-oauth2.md), through the weir
// binary and a real nats-server:
// - mTLS: a receiver (Python's http.server with an ssl context that requires a client
//   certificate from the test's CA, made with the openssl command in a temp dir) gets the
//   events of a sink with the right certificate; a sink with no certificate, with one from
//   another CA, or without the CA that signed the receiver's certificate delivers nothing,
//   retries, and after a restart with the right files delivers every event it held.
// - OAuth2: a token endpoint that hands out 2-second tokens and a receiver that accepts only
//   unexpired tokens it issued (both ScriptedHttpServer): deliveries keep arriving, each
//   token is requested before the previous one expires, a 401 causes one new token and a
//   successful re-send, a failing token endpoint is a retryable failure with its reason,
//   and neither the client secret nor a token appears in weir's log.
#include <catch2/catch.hpp>

#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>

#include "tests/support/harness.h"
#include "tests/support/scripted_http_server.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::Process;
using weir::testing::ScriptedHttpServer;
using weir::testing::ScriptedReply;
using weir::testing::ScriptedRequest;
using weir::testing::TempDir;
using weir::testing::wait_until;
using Clock = std::chrono::steady_clock;

namespace {

// Runs a command to its end; throws with its output when it fails.
void run(const TempDir& dir, std::vector<std::string> argv) {
  const std::string log = dir.file("cmd.log");
  Process p = Process::spawn(argv, {}, log);
  const auto code = p.wait_exit(30s);
  if (code != 0) {
    std::string cmd;
    for (const auto& a : argv) cmd += a + " ";
    throw std::runtime_error("failed: " + cmd + "\n" + weir::testing::read_file(log));
  }
}

// A CA (key + self-signed certificate) and certificates it signs, with the openssl CLI.
void make_ca(const TempDir& dir, const std::string& name) {
  run(dir, {"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
            dir.file(name + ".key"), "-out", dir.file(name + ".pem"), "-days", "2", "-subj", "/CN=" + name});
}

void make_cert(const TempDir& dir, const std::string& ca, const std::string& name, const std::string& ext) {
  weir::testing::write_file(dir.file(name + ".ext"), ext + "\n");
  run(dir, {"openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
            dir.file(name + ".key"), "-out", dir.file(name + ".csr"), "-subj", "/CN=" + name});
  run(dir, {"openssl", "x509", "-req", "-in", dir.file(name + ".csr"), "-CA", dir.file(ca + ".pem"), "-CAkey",
            dir.file(ca + ".key"), "-CAcreateserial", "-out", dir.file(name + ".pem"), "-days", "2", "-extfile",
            dir.file(name + ".ext")});
}

// An HTTPS receiver that requires a client certificate signed by `ca`. Each accepted POST is
// a line {"id": <body id>, "cn": <client certificate CN>}; each refused handshake a line
// {"refused": <reason>}, in `log`. The handshake runs in the connection's thread, so a
// refused one is seen and recorded (with the default, accept() would swallow it).
constexpr const char* kReceiver = R"py(
import http.server, json, os, socketserver, ssl, sys, threading
port_file, cert, key, ca, log = sys.argv[1:6]
lock = threading.Lock()
def record(obj):
    with lock, open(log, "a") as f:
        f.write(json.dumps(obj) + "\n")
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        subject = dict(x[0] for x in self.connection.getpeercert()["subject"])
        record({"id": json.loads(body).get("id"), "cn": subject.get("commonName", "")})
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    def finish_request(self, request, client_address):
        try:
            request.do_handshake()
        except (ssl.SSLError, OSError) as e:
            record({"refused": type(e).__name__ + ": " + str(e)[:200]})
            request.close()
            return
        super().finish_request(request, client_address)
    def handle_error(self, request, client_address):
        record({"refused": "after handshake: " + str(sys.exc_info()[1])[:200]})
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
ctx.load_verify_locations(ca)
ctx.verify_mode = ssl.CERT_REQUIRED
server = Server(("127.0.0.1", 0), Handler)
server.socket = ctx.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
)py";

class TlsReceiver {
 public:
  TlsReceiver(const TempDir& pki) : log_(dir_.file("received.log")) {
    const std::string script = dir_.file("receiver.py");
    weir::testing::write_file(script, kReceiver);
    weir::testing::write_file(log_, "");
    const std::string port_file = dir_.file("port");
    proc_ = Process::spawn(
        {"python3", script, port_file, pki.file("server.pem"), pki.file("server.key"), pki.file("ca.pem"), log_}, {},
        dir_.file("receiver.out"));
    if (!wait_until([&] { return !weir::testing::read_file(port_file).empty(); }, 20s)) {
      throw std::runtime_error("the TLS receiver did not start: " +
                               weir::testing::read_file(dir_.file("receiver.out")));
    }
    port_ = std::stoi(weir::testing::read_file(port_file));
  }
  std::string url(const std::string& path) const { return "https://127.0.0.1:" + std::to_string(port_) + path; }
  // Event id → the CN of the certificate it came with.
  std::map<std::string, std::string> received() const {
    std::map<std::string, std::string> out;
    for (const json& j : lines()) {
      if (j.contains("id")) out[j.at("id").get<std::string>()] = j.at("cn").get<std::string>();
    }
    return out;
  }
  size_t refused() const {
    size_t n = 0;
    for (const json& j : lines()) n += j.contains("refused") ? 1 : 0;
    return n;
  }
  std::string describe() const { return weir::testing::read_file(log_); }

 private:
  std::vector<json> lines() const {
    std::vector<json> out;
    std::istringstream in(weir::testing::read_file(log_));
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) out.push_back(json::parse(line));
    }
    return out;
  }
  TempDir dir_;
  std::string log_;
  Process proc_;
  int port_ = 0;
};

std::string tls_flow(const std::string& name, const std::string& url, const std::string& tls) {
  return "flow: " + name + "\nfrom: { http: { path: /in/" + name + " } }\nsteps: []\nto: { " + name +
         ": { http: { url: \"" + url + "\", timeout: 2s, retry: { backoff: [200ms] }, tls: " + tls + " } } }\n";
}

}  // namespace

TEST_CASE(
    "mTLS: the receiver gets weir's client certificate, and without it, or with a wrong one, or without the CA, "
    "nothing is delivered until a restart with the right files",
    "[integration][sink-auth]") {
  TempDir pki;
  make_ca(pki, "ca");
  make_ca(pki, "other-ca");
  make_cert(pki, "ca", "server", "subjectAltName=IP:127.0.0.1");
  make_cert(pki, "ca", "weir-client", "extendedKeyUsage=clientAuth");
  make_cert(pki, "other-ca", "stranger", "extendedKeyUsage=clientAuth");
  TlsReceiver receiver(pki);
  const std::string url = receiver.url("/hook");
  const std::string good = "{ ca_file: " + pki.file("ca.pem") + ", cert_file: " + pki.file("weir-client.pem") +
                           ", key_file: " + pki.file("weir-client.key") + " }";

  NatsServer nats;
  WeirOptions options{.nats_url = nats.url()};
  options.flows = {
      {"good.yaml", tls_flow("good", url, good)},
      {"nocert.yaml", tls_flow("nocert", url, "{ ca_file: ca.pem }")},
      {"stranger.yaml", tls_flow("stranger", url,
                                 "{ ca_file: " + pki.file("ca.pem") + ", cert_file: " + pki.file("stranger.pem") +
                                     ", key_file: " + pki.file("stranger.key") + " }")},
      {"noca.yaml",
       tls_flow("noca", url,
                "{ cert_file: " + pki.file("weir-client.pem") + ", key_file: " + pki.file("weir-client.key") + " }")},
      {"ca.pem", weir::testing::read_file(pki.file("ca.pem"))},
  };
  WeirProcess weir(options);
  weir.start();
  INFO(weir.describe());
  INFO("receiver: " << receiver.describe());

  for (const char* flow : {"good", "nocert", "stranger", "noca"}) {
    for (int i = 0; i < 3; ++i) {
      const std::string id = std::string(flow) + "-" + std::to_string(i);
      REQUIRE(weir.post(std::string("/in/") + flow, json{{"id", id}}.dump()).status == 202);
    }
  }
  // The right certificate: every event arrives, with weir's certificate.
  REQUIRE(wait_until([&] { return receiver.received().size() >= 3; }, 20s, 50ms));
  // The others are refused at the handshake (the receiver refuses no certificate and a
  // stranger's; weir refuses the receiver's certificate without its CA) and retried.
  for (const char* sink : {"sink:nocert", "sink:stranger", "sink:noca"}) {
    INFO(sink);
    CHECK(wait_until([&] { return stage_counter(weir, "weir_events_errors_total", sink) >= 2; }, 20s, 100ms));
  }
  CHECK(receiver.refused() >= 4);  // at least two attempts each of nocert and stranger
  const auto received = receiver.received();
  CHECK(received == std::map<std::string, std::string>{
                        {"good-0", "weir-client"}, {"good-1", "weir-client"}, {"good-2", "weir-client"}});
  auto dlq = weir.admin("GET", "/dlq");
  REQUIRE(dlq.status == 200);
  CHECK(json::parse(dlq.body).empty());  // retried, not dead

  // Restarted with the right files, weir delivers every event the failing sinks held: a new
  // weir on the same JetStream (WeirProcess::spawn writes its own options' flow files, so
  // the files are changed there).
  REQUIRE(weir.terminate() == 0);
  for (const char* flow : {"nocert", "stranger", "noca"}) {
    options.flows[std::string(flow) + ".yaml"] = tls_flow(flow, url, good);
  }
  WeirProcess restarted(options);
  restarted.start();
  const bool all = wait_until([&] { return receiver.received().size() == 12; }, 30s, 100ms);
  INFO("after the restart: " << restarted.describe());
  INFO("receiver after the restart: " << receiver.describe());
  CHECK(all);
  for (const auto& [id, cn] : receiver.received()) CHECK(cn == "weir-client");
}

TEST_CASE("tls: a missing file or a key that does not match its certificate stops weir with the file named",
          "[integration][sink-auth]") {
  TempDir pki;
  make_ca(pki, "ca");
  make_cert(pki, "ca", "weir-client", "extendedKeyUsage=clientAuth");
  make_cert(pki, "ca", "other", "extendedKeyUsage=clientAuth");
  struct Case {
    std::string tls, message;
  };
  const std::vector<Case> cases = {
      {"{ ca_file: " + pki.file("missing.pem") + " }",
       "http sink out: tls.ca_file " + pki.file("missing.pem") + ": cannot open it: No such file or directory"},
      {"{ cert_file: " + pki.file("weir-client.pem") + ", key_file: " + pki.file("other.key") + " }",
       "http sink out: tls.key_file " + pki.file("other.key") + " does not match tls.cert_file " +
           pki.file("weir-client.pem")},
  };
  for (const auto& c : cases) {
    NatsServer nats;
    WeirProcess weir({.nats_url = nats.url(),
                      .flows = {{"f.yaml", http_flow("f", "/in/f", "https://127.0.0.1:9/x", "tls: " + c.tls)}}});
    weir.spawn();
    const auto code = weir.process().wait_exit(30s);
    INFO(weir.describe());
    CHECK(code.has_value());
    CHECK(code != 0);
    CHECK(weir.log().find(c.message) != std::string::npos);
    // Nothing of the key in the log.
    CHECK(weir.log().find("PRIVATE KEY") == std::string::npos);
  }
}

namespace {

// A token endpoint issuing `lifetime` tokens ("tok-1", "tok-2", …) to one client, and a
// receiver accepting a request only with an unexpired token it issued. The receiver answers
// 401 to an unknown, expired or revoked token; revoke_next() revokes the token of the next
// request that carries a valid one.
class OAuthWorld {
 public:
  explicit OAuthWorld(std::chrono::seconds lifetime)
      : lifetime_(lifetime),
        tokens_([this](const ScriptedRequest& r) { return issue(r); }),
        receiver_([this](const ScriptedRequest& r) { return receive(r); }) {}

  std::string token_url() const { return tokens_.url("/token"); }
  std::string receiver_url() const { return receiver_.url("/hook"); }
  void set_token_status(int status) {
    std::lock_guard lock(mu_);
    token_status_ = status;
  }
  void revoke_next() {
    std::lock_guard lock(mu_);
    revoke_next_ = true;
  }
  struct Issued {
    std::string token;
    Clock::time_point at;
  };
  std::vector<Issued> issued() const {
    std::lock_guard lock(mu_);
    return issued_;
  }
  std::set<std::string> delivered() const {
    std::lock_guard lock(mu_);
    return delivered_;
  }
  // Answers 401 by reason: "unknown", "expired", "revoked".
  std::map<std::string, int> refusals() const {
    std::lock_guard lock(mu_);
    return refusals_;
  }
  size_t token_requests() const { return tokens_.request_count(); }
  // Requests that reached the receiver with `id`, in order: the token each carried.
  std::vector<std::string> tokens_of(const std::string& id) const {
    std::vector<std::string> out;
    for (const auto& r : receiver_.requests()) {
      if (json::parse(r.body).value("id", "") == id) out.push_back(r.header("Authorization"));
    }
    return out;
  }
  std::string last_form() const {
    auto all = tokens_.requests();
    return all.empty() ? "" : all.back().body;
  }

 private:
  ScriptedReply issue(const ScriptedRequest& r) {
    std::lock_guard lock(mu_);
    if (token_status_ != 200)
      return ScriptedReply::with_status(token_status_, R"({"error":"temporarily_unavailable"})");
    if (r.body.find("grant_type=client_credentials") == std::string::npos ||
        r.body.find("client_secret=s3cr3t-value") == std::string::npos) {
      return ScriptedReply::with_status(401, R"({"error":"invalid_client"})");
    }
    const std::string token = "tok-" + std::to_string(issued_.size() + 1);
    issued_.push_back({token, Clock::now()});
    ScriptedReply reply = ScriptedReply::with_status(
        200, json{{"access_token", token}, {"token_type", "Bearer"}, {"expires_in", lifetime_.count()}}.dump());
    reply.headers = {{"Content-Type", "application/json"}};
    return reply;
  }

  ScriptedReply receive(const ScriptedRequest& r) {
    std::lock_guard lock(mu_);
    const std::string auth = r.header("Authorization");
    const std::string token = auth.rfind("Bearer ", 0) == 0 ? auth.substr(7) : "";
    const auto it = std::find_if(issued_.begin(), issued_.end(), [&](const Issued& i) { return i.token == token; });
    std::string refusal;
    if (it == issued_.end()) {
      refusal = "unknown";
    } else if (Clock::now() >= it->at + lifetime_) {
      refusal = "expired";
    } else if (revoked_.count(token) != 0) {
      refusal = "revoked";
    } else if (revoke_next_) {
      revoke_next_ = false;
      revoked_.insert(token);
      refusal = "revoked";
    }
    if (!refusal.empty()) {
      ++refusals_[refusal];
      return ScriptedReply::with_status(401);
    }
    delivered_.insert(json::parse(r.body).value("id", ""));
    return ScriptedReply::with_status(204);
  }

  const std::chrono::seconds lifetime_;
  mutable std::mutex mu_;
  int token_status_ = 200;
  bool revoke_next_ = false;
  std::vector<Issued> issued_;
  std::set<std::string> revoked_;
  std::set<std::string> delivered_;
  std::map<std::string, int> refusals_;
  ScriptedHttpServer tokens_;
  ScriptedHttpServer receiver_;
};

std::string oauth_flow(const OAuthWorld& world) {
  return http_flow("f", "/in/f", world.receiver_url(),
                   "timeout: 2s, retry: { backoff: [200ms] }, oauth2: { token_url: \"" + world.token_url() +
                       "\", insecure_http: true, client_id_env: SINK_CLIENT_ID, client_secret_env: "
                       "SINK_CLIENT_SECRET, scope: \"orders.write audit\" }");
}

const std::map<std::string, std::string> kCredentials = {{"SINK_CLIENT_ID", "weir-test"},
                                                         {"SINK_CLIENT_SECRET", "s3cr3t-value"}};

}  // namespace

TEST_CASE(
    "oauth2: 2-second tokens are replaced before they expire while deliveries keep arriving, a 401 causes one "
    "new token and a successful re-send",
    "[integration][sink-auth]") {
  OAuthWorld world(2s);
  NatsServer nats;
  WeirProcess weir({.nats_url = nats.url(), .flows = {{"f.yaml", oauth_flow(world)}}, .env = kCredentials});
  weir.start();
  INFO(weir.describe());

  // 6.5 s of deliveries, one every 50 ms: three token lifetimes and more.
  std::set<std::string> sent;
  const auto start = Clock::now();
  for (int i = 0; Clock::now() - start < 6500ms; ++i) {
    const std::string id = "e" + std::to_string(i);
    REQUIRE(weir.post("/in/f", json{{"id", id}}.dump()).status == 202);
    sent.insert(id);
    if (i == 60) world.revoke_next();   // about 3 s in
    std::this_thread::sleep_for(50ms);  // pacing the input, not waiting for a condition
  }
  std::vector<std::string> lost;
  CHECK(wait_until(
      [&] {
        lost = missing(sent, world.delivered());
        return lost.empty();
      },
      20s, 50ms));
  INFO("lost " << lost.size() << " of " << sent.size());
  CHECK(lost.empty());

  // Each token was asked for before the one it replaced expired: the refresh comes at 90 %
  // of a 2 s lifetime, not at the first refusal.
  const auto issued = world.issued();
  std::cout << "oauth2: " << sent.size() << " deliveries, " << issued.size() << " tokens in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count() << " ms\n";
  REQUIRE(issued.size() >= 4);  // 6.5 s of 2 s tokens, plus the one the revocation replaced
  for (size_t i = 1; i < issued.size(); ++i) {
    INFO("token " << i + 1 << " came "
                  << std::chrono::duration_cast<std::chrono::milliseconds>(issued[i].at - issued[i - 1].at).count()
                  << " ms after token " << i);
    CHECK(issued[i].at < issued[i - 1].at + 2s);
  }
  // The revoked token: one 401, one new token, one re-send that got through. No request
  // went out with an expired or unknown token.
  const auto refusals = world.refusals();
  CHECK(refusals == std::map<std::string, int>{{"revoked", 1}});
  std::string refused_id;
  for (const auto& id : sent) {
    auto tokens = world.tokens_of(id);
    if (tokens.size() > 1) {
      CHECK(refused_id.empty());  // only one event needed a second attempt
      refused_id = id;
      REQUIRE(tokens.size() == 2);
      CHECK(tokens[0] != tokens[1]);
    }
  }
  CHECK_FALSE(refused_id.empty());
  // The re-send happened inside the sink: no failed attempt, no retry through JetStream.
  CHECK(stage_counter(weir, "weir_events_errors_total", "sink:out") == 0);
  // The form carried the scopes; the log carries neither the secret nor any token.
  CHECK(world.last_form().find("scope=orders.write%20audit") != std::string::npos);
  const std::string log = weir.log();
  CHECK(log.find("s3cr3t-value") == std::string::npos);
  for (const auto& i : issued) CHECK(log.find(i.token) == std::string::npos);
}

TEST_CASE("oauth2: a failing token endpoint is a retryable failure with its reason, deliveries resume when it recovers",
          "[integration][sink-auth]") {
  OAuthWorld world(60s);
  world.set_token_status(503);
  NatsServer nats;
  WeirProcess weir({.nats_url = nats.url(), .flows = {{"f.yaml", oauth_flow(world)}}, .env = kCredentials});
  weir.start();
  INFO(weir.describe());
  for (int i = 0; i < 5; ++i) REQUIRE(weir.post("/in/f", json{{"id", "e" + std::to_string(i)}}.dump()).status == 202);
  CHECK(wait_until([&] { return stage_counter(weir, "weir_events_errors_total", "sink:out") >= 2; }, 20s, 100ms));
  CHECK(world.delivered().empty());
  CHECK(weir.log().find("oauth2 token request to " + world.token_url() + ": HTTP 503 (temporarily_unavailable)") !=
        std::string::npos);
  auto dlq = weir.admin("GET", "/dlq");
  REQUIRE(dlq.status == 200);
  CHECK(json::parse(dlq.body).empty());

  world.set_token_status(200);
  CHECK(wait_until([&] { return world.delivered().size() == 5; }, 30s, 100ms));
  CHECK(world.issued().size() == 1);  // one token serves them all
  CHECK(weir.log().find("s3cr3t-value") == std::string::npos);
}

// TLS on http-in and the admin API (docs/operations.md "TLS on the listeners"; ADR 0305),
// through the real weir binary, a nats-server, weir-sink and the curl and openssl command
// line tools: a CA and server certificates made by openssl in a temporary directory; curl
// --cacert and openssl s_client verify the chain and talk to both listeners; an event posted
// over TLS is delivered; plain HTTP to a TLS port is closed at once; a TLS 1.2 client offering
// only a cipher outside ADR 0305's list is refused; a certificate replaced on disk is served
// to the next connection after SIGHUP, and a broken one leaves the one in use.
#include <catch2/catch.hpp>

#include <signal.h>

#include <filesystem>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::wait_until;

namespace {

struct Sh {
  int code = -1;
  std::string output;  // stdout and stderr
};

// `command` under sh with stdin from /dev/null (a pipe inside it feeds its own), its output
// captured; bounded by `timeout` (then killed: code -1).
Sh sh(const std::string& command, std::chrono::milliseconds timeout = 20s) {
  weir::testing::TempDir dir;
  const std::string out = dir.file("out");
  auto p = weir::testing::Process::spawn({"sh", "-c", "{ " + command + "\n} </dev/null"}, {}, out);
  Sh r;
  auto code = p.wait_exit(timeout);
  if (!code) p.kill_and_wait();
  r.code = code.value_or(-1);
  r.output = weir::testing::read_file(out);
  return r;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A test CA (ca.pem) in `dir`, made once per directory.
void make_ca(const std::string& dir) {
  auto r = sh("cd " + dir +
              " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key "
              "-out ca.pem -days 2 -subj '/CN=weir test CA'");
  INFO(r.output);
  REQUIRE(r.code == 0);
}

// A server certificate for 127.0.0.1 signed by the CA, with `serial` (hex) and CN `cn`,
// written to `cert` and `key`.
void make_server_cert(const std::string& dir, const std::string& serial, const std::string& cn, const std::string& cert,
                      const std::string& key) {
  auto r = sh("cd " + dir + " && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + key +
              " -out server.csr -subj '/CN=" + cn +
              "' && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > ext.cnf"
              " && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -set_serial 0x" +
              serial + " -days 2 -extfile ext.cnf -out " + cert);
  INFO(r.output);
  REQUIRE(r.code == 0);
}

std::string tls_block(const std::string& dir) {
  return "{ tls: { cert_file: " + dir + "/server.pem, key_file: " + dir + "/server.key } }";
}

// The certificate a fresh TLS connection to `port` gets, verified against the CA: openssl
// x509's "serial=…" and "subject=…" lines.
std::string served_certificate(const std::string& dir, int port) {
  auto r = sh("openssl s_client -connect 127.0.0.1:" + std::to_string(port) + " -CAfile " + dir +
              "/ca.pem -verify_return_error -servername localhost 2>/dev/null | openssl x509 -noout -serial -subject");
  return r.output;
}

// curl over TLS, verified against the test CA; the answer's body then "\n<status>".
Sh curl_tls(const std::string& dir, const std::string& url, const std::string& args = "") {
  return sh("curl -sS -m 10 --cacert " + dir + "/ca.pem " + args + " -w '\\n%{http_code}' " + url);
}

bool delivered(const SinkProcess& sink, const std::string& id) { return sink.ids().count(id) > 0; }

}  // namespace

TEST_CASE("tls: curl and openssl s_client talk to http-in and admin, and plain HTTP to a TLS port is closed",
          "[integration][tls]") {
  weir::testing::TempDir pki;
  make_ca(pki.path());
  make_server_cert(pki.path(), "1001", "weir-tls-1", "server.pem", "server.key");
  weir::testing::NatsServer nats;
  SinkProcess sink;
  WeirOptions o;
  o.nats_url = nats.url();
  o.flows = {{"tls.yaml", http_flow("tls", "/in/tls", sink.url("/tls"))}};
  o.config = "http: " + tls_block(pki.path()) + "\nadmin: " + tls_block(pki.path()) + "\n";
  WeirProcess weir(o);
  weir.spawn();
  const std::string admin = "https://127.0.0.1:" + std::to_string(weir.admin_port());
  const std::string ingress = "https://127.0.0.1:" + std::to_string(weir.http_port());
  INFO(weir.describe());
  // Ready, asked over TLS (the harness' own wait asks over plain HTTP).
  REQUIRE(wait_until([&] { return contains(curl_tls(pki.path(), admin + "/readyz").output, "\n200"); }, 30s, 50ms));
  CHECK(contains(weir.log(), "TLS http=on admin=on"));

  // curl: an event over TLS is accepted and delivered; the admin API answers.
  auto posted = curl_tls(pki.path(), ingress + "/in/tls", "-H 'Content-Type: application/json' -d '{\"id\": \"c1\"}'");
  INFO(posted.output);
  CHECK(contains(posted.output, "\n202"));
  auto status = curl_tls(pki.path(), admin + "/status");
  CHECK(contains(status.output, "\n200"));

  // openssl s_client: the chain verifies; an event posted over it is delivered too.
  const std::string body = R"({"id": "s1"})";
  auto s = sh(
      "printf 'POST /in/tls HTTP/1.1\\r\\nHost: localhost\\r\\nContent-Type: application/json\\r\\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\\r\\nConnection: close\\r\\n\\r\\n%s' '" + body +
      "' | openssl s_client -connect 127.0.0.1:" + std::to_string(weir.http_port()) + " -CAfile " + pki.path() +
      "/ca.pem -verify_return_error -servername localhost -ign_eof 2>&1");
  INFO(s.output);
  CHECK(s.code == 0);
  CHECK(contains(s.output, "Verify return code: 0 (ok)"));
  CHECK(contains(s.output, "HTTP/1.1 202"));
  auto a = sh(
      "printf 'GET /healthz HTTP/1.1\\r\\nHost: localhost\\r\\nConnection: close\\r\\n\\r\\n' | openssl s_client "
      "-connect 127.0.0.1:" +
      std::to_string(weir.admin_port()) + " -CAfile " + pki.path() +
      "/ca.pem -verify_return_error -servername localhost -ign_eof 2>&1");
  INFO(a.output);
  CHECK(contains(a.output, "Verify return code: 0 (ok)"));
  CHECK(contains(a.output, "HTTP/1.1 200"));
  CHECK(wait_until([&] { return delivered(sink, "c1") && delivered(sink, "s1"); }, 10s, 20ms));

  // TLS 1.2 with only a CBC cipher without forward secrecy (outside ADR 0305's list): refused.
  auto weak = sh("openssl s_client -connect 127.0.0.1:" + std::to_string(weir.http_port()) +
                 " -tls1_2 -cipher AES128-SHA -CAfile " + pki.path() + "/ca.pem 2>&1");
  INFO(weak.output);
  CHECK(weak.code != 0);
  // TLS 1.2 with an ECDHE AEAD cipher: accepted.
  auto tls12 = sh("openssl s_client -connect 127.0.0.1:" + std::to_string(weir.http_port()) + " -tls1_2 -CAfile " +
                  pki.path() + "/ca.pem -verify_return_error 2>&1");
  INFO(tls12.output);
  CHECK(tls12.code == 0);
  CHECK(contains(tls12.output, "TLSv1.2"));

  // Plain HTTP to each TLS port: closed without an answer, well within the handshake
  // timeout (http.read_timeout, 10 s): curl's "Empty reply from server" (52).
  for (const int port : {weir.http_port(), weir.admin_port()}) {
    const auto t0 = std::chrono::steady_clock::now();
    auto plain = sh("curl -sS -m 8 -H 'Content-Type: application/json' -d '{\"id\": \"p1\"}' http://127.0.0.1:" +
                    std::to_string(port) + "/in/tls");
    const auto took = std::chrono::steady_clock::now() - t0;
    INFO(plain.output);
    CHECK(plain.code == 52);
    CHECK(took < 2s);
  }
  CHECK_FALSE(delivered(sink, "p1"));
  CHECK(weir.terminate() == 0);
}

TEST_CASE("tls: a certificate replaced on disk is served to the next connection after SIGHUP",
          "[integration][tls][reload]") {
  weir::testing::TempDir pki;
  make_ca(pki.path());
  make_server_cert(pki.path(), "1001", "weir-tls-1", "server.pem", "server.key");
  weir::testing::NatsServer nats;
  SinkProcess sink;
  WeirOptions o;
  o.nats_url = nats.url();
  o.flows = {{"tls.yaml", http_flow("tls", "/in/tls", sink.url("/tls"))}};
  o.config = "http: " + tls_block(pki.path()) + "\n";  // admin stays plain: the harness' readiness wait
  WeirProcess weir(o);
  weir.start();
  INFO(weir.describe());
  const int port = weir.http_port();
  auto first = served_certificate(pki.path(), port);
  INFO(first);
  REQUIRE(contains(first, "serial=1001"));
  CHECK(contains(first, "CN = weir-tls-1"));

  // A renewed certificate and key, renamed over the files weir reads (as certbot does).
  make_server_cert(pki.path(), "2002", "weir-tls-2", "new.pem", "new.key");
  std::filesystem::rename(pki.file("new.key"), pki.file("server.key"));
  std::filesystem::rename(pki.file("new.pem"), pki.file("server.pem"));
  // Until the reload the old one is served.
  CHECK(contains(served_certificate(pki.path(), port), "serial=1001"));
  weir.process().signal(SIGHUP);
  REQUIRE(weir.process().wait_log("reload done", 10s));
  auto second = served_certificate(pki.path(), port);
  INFO(second);
  CHECK(contains(second, "serial=2002"));
  CHECK(contains(second, "CN = weir-tls-2"));
  auto posted = curl_tls(pki.path(), "https://127.0.0.1:" + std::to_string(port) + "/in/tls",
                         "-H 'Content-Type: application/json' -d '{\"id\": \"r1\"}'");
  CHECK(contains(posted.output, "\n202"));

  // A broken certificate file: the reload fails, says which file, and the one in use stays.
  weir::testing::write_file(pki.file("server.pem"), "-----BEGIN CERTIFICATE-----\nnot base64\n");
  weir.process().signal(SIGHUP);
  REQUIRE(weir.process().wait_log("reload failed", 10s));
  CHECK(contains(weir.log(), "cannot load cert_file " + pki.file("server.pem")));
  CHECK(contains(served_certificate(pki.path(), port), "serial=2002"));
  auto metrics = weir.admin("GET", "/metrics");
  CHECK(contains(metrics.body, "weir_reloads_total{result=\"ok\"} 1"));
  CHECK(contains(metrics.body, "weir_reloads_total{result=\"failed\"} 1"));
  CHECK(wait_until([&] { return delivered(sink, "r1"); }, 10s, 20ms));
  CHECK(weir.terminate() == 0);
}

// load_runtime_config (runtime/base/config.h): every key of docs/configuration.md
// read with its spelling, defaults for an empty file, and a ConfigError naming file:line
// and the field for unknown keys and bad values.
#include <catch2/catch.hpp>

#include "runtime/base/config.h"
#include "tests/support/support.h"

using weir::ConfigError;
using weir::load_runtime_config;
using weir::testing::TempDir;
using weir::testing::write_file;

namespace {
std::string error_of(const std::string& path) {
  try {
    load_runtime_config(path);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("config: keys, sizes, durations and defaults", "[config]") {
  TempDir dir;
  write_file(dir.file("empty.yaml"), "");
  auto d = load_runtime_config(dir.file("empty.yaml"));
  CHECK(d.http.listen == "127.0.0.1:8080");
  CHECK(d.admin.listen == "127.0.0.1:8081");
  CHECK(d.http.max_connections == 4096);
  CHECK(d.admin.max_connections == 256);
  CHECK(d.http.max_connections_per_client == 0);  // a quarter of max_connections
  CHECK(d.admin.max_connections_per_client == 0);
  CHECK(d.http.max_connection_age == std::chrono::minutes(5));
  CHECK(d.http.max_body == 1 << 20);
  CHECK(d.nats.delivery_threads == 2);
  CHECK(d.backlog.ingress_nice == 10);
  CHECK(d.delivery_loops == 0);  // auto
  CHECK(d.tables.max_tables == 64);
  CHECK(d.delivery_loops_in_force() == (weir::usable_cpus() < 4 ? 1 : 2));

  write_file(
      dir.file("w.yaml"),
      "http: { listen: 127.0.0.1:0, max_body: 512KiB, max_header: 4096, read_timeout: 250ms,\n"
      "        max_connections: 12, max_connections_per_client: 5, max_connection_age: 30s }\n"
      "admin: { listen: 127.0.0.1:0, token_env: TOKEN_NAME, max_connections: 3, max_connections_per_client: 1 }\n"
      "log: { level: warn, format: json }\n"
      "nats: { delivery_threads: 3 }\n"
      "drain_timeout: 1m\n"
      "backlog: { max_delay: 250ms }\n"
      "tables: { max_tables: 5 }\n");
  auto c = load_runtime_config(dir.file("w.yaml"));
  CHECK(c.backlog.max_delay == std::chrono::milliseconds(250));
  CHECK(d.backlog.max_delay == std::chrono::milliseconds(0));
  write_file(dir.file("off.yaml"), "backlog: { max_delay: 0 }\n");
  CHECK(load_runtime_config(dir.file("off.yaml")).backlog.max_delay == std::chrono::milliseconds(0));
  for (const auto& [text, loops] : std::vector<std::pair<std::string, int>>{{"1", 1}, {"2", 2}, {"auto", 0}}) {
    write_file(dir.file("loops.yaml"), "delivery_loops: " + text + "\n");
    auto l = load_runtime_config(dir.file("loops.yaml"));
    CHECK(l.delivery_loops == loops);
    if (loops != 0) CHECK(l.delivery_loops_in_force() == loops);
  }
  write_file(dir.file("nice.yaml"), "backlog: { ingress_nice: 0 }\n");
  CHECK(load_runtime_config(dir.file("nice.yaml")).backlog.ingress_nice == 0);
  CHECK(c.http.max_body == 512 * 1024);
  CHECK(c.http.max_header == 4096);
  CHECK(c.http.read_timeout == std::chrono::milliseconds(250));
  CHECK(c.http.max_connections == 12);
  CHECK(c.admin.max_connections == 3);
  CHECK(c.http.max_connections_per_client == 5);
  CHECK(c.http.max_connection_age == std::chrono::seconds(30));
  CHECK(c.admin.max_connections_per_client == 1);
  CHECK(c.admin.token_env == "TOKEN_NAME");
  CHECK(c.log.format == "json");
  CHECK(c.drain_timeout == std::chrono::minutes(1));
  CHECK(c.nats.delivery_threads == 3);
  CHECK(c.tables.max_tables == 5);
}

TEST_CASE("config: unknown keys and bad values are errors naming the place", "[config]") {
  TempDir dir;
  write_file(dir.file("a.yaml"), "http:\n  max_conections: 5\n");
  std::string e = error_of(dir.file("a.yaml"));
  INFO(e);
  CHECK(e.find("a.yaml:2:") != std::string::npos);
  CHECK(e.find("max_conections") != std::string::npos);
  write_file(dir.file("b.yaml"), "http: { max_connections: 0 }\n");
  CHECK(error_of(dir.file("b.yaml")).find("http.max_connections") != std::string::npos);
  write_file(dir.file("c.yaml"), "admin: { max_connections: lots }\n");
  CHECK(error_of(dir.file("c.yaml")).find("admin.max_connections") != std::string::npos);
  write_file(dir.file("b2.yaml"), "http: { max_connections: 8, max_connections_per_client: 9 }\n");
  std::string per_client = error_of(dir.file("b2.yaml"));
  INFO(per_client);
  CHECK(per_client.find("http.max_connections_per_client") != std::string::npos);
  CHECK(per_client.find("must not exceed http.max_connections (8)") != std::string::npos);
  write_file(dir.file("b3.yaml"), "admin: { max_connections_per_client: 0 }\n");
  CHECK(error_of(dir.file("b3.yaml")).find("admin.max_connections_per_client") != std::string::npos);
  write_file(dir.file("b4.yaml"), "http: { max_connection_age: forever }\n");
  CHECK(error_of(dir.file("b4.yaml")).find("http.max_connection_age") != std::string::npos);
  write_file(dir.file("d.yaml"), "http: { read_timeout: soon }\n");
  CHECK(error_of(dir.file("d.yaml")).find("http.read_timeout") != std::string::npos);
  // A number without its unit is refused (flows/text.h), the message naming the units.
  write_file(dir.file("d2.yaml"), "http: { read_timeout: 10 }\n");
  CHECK(error_of(dir.file("d2.yaml"))
            .find("http.read_timeout: \"10\" is not a duration (write 250ms, 3s, 1m, 1h; a "
                  "duration needs a unit: write 10s or 10ms (units: us, ms, s, m, h))") != std::string::npos);
  write_file(dir.file("e.yaml"), "log: { format: xml }\n");
  CHECK(error_of(dir.file("e.yaml")).find("log.format") != std::string::npos);
  write_file(dir.file("f.yaml"), "backlog: { max_delay: short }\n");
  CHECK(error_of(dir.file("f.yaml")).find("backlog.max_delay") != std::string::npos);
  write_file(dir.file("f2.yaml"), "backlog: { ingress_nice: 20 }\n");
  CHECK(error_of(dir.file("f2.yaml")).find("backlog.ingress_nice") != std::string::npos);
  write_file(dir.file("f3.yaml"), "backlog: { ingress_nice: -1 }\n");
  CHECK(error_of(dir.file("f3.yaml")).find("backlog.ingress_nice") != std::string::npos);
  for (const char* bad : {"0", "3", "many", "[1]"}) {
    write_file(dir.file("h.yaml"), std::string("delivery_loops: ") + bad + "\n");
    const std::string why = error_of(dir.file("h.yaml"));
    INFO(why);
    CHECK(why.find("delivery_loops") != std::string::npos);
  }
  for (const char* bad : {"0", "10001", "some"}) {
    write_file(dir.file("t.yaml"), std::string("tables: { max_tables: ") + bad + " }\n");
    CHECK(error_of(dir.file("t.yaml")).find("tables.max_tables") != std::string::npos);
  }
  write_file(dir.file("g.yaml"), "nats: { delivery_threads: 0 }\n");
  CHECK(error_of(dir.file("g.yaml")).find("nats.delivery_threads") != std::string::npos);
}

TEST_CASE("config: admin.allow_exec, allow_env and allow_hosts are off by default and checked", "[config]") {
  TempDir dir;
  write_file(dir.file("empty.yaml"), "{}\n");
  const auto d = load_runtime_config(dir.file("empty.yaml"));
  CHECK_FALSE(d.admin.allow_exec);
  CHECK(d.admin.allow_env.empty());
  CHECK(d.admin.allow_hosts.empty());
  write_file(
      dir.file("ok.yaml"),
      "admin: { allow_exec: true, allow_env: [SINK_BASE, X_1], allow_hosts: [api.example.com, \"*.example.org\", "
      "10.0.0.7] }\n");
  const auto c = load_runtime_config(dir.file("ok.yaml"));
  CHECK(c.admin.allow_exec);
  CHECK(c.admin.allow_env == std::vector<std::string>{"SINK_BASE", "X_1"});
  CHECK(c.admin.allow_hosts == std::vector<std::string>{"api.example.com", "*.example.org", "10.0.0.7"});
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"admin: { allow_exec: yes-please }\n", "admin.allow_exec: must be true or false"},
      {"admin: { allow_env: SINK_BASE }\n", "admin.allow_env: must be a list"},
      {"admin: { allow_env: [\"A-B\"] }\n", "\"A-B\" is not an environment variable name"},
      {"admin: { allow_hosts: [\"http://api.example.com\"] }\n", "is not a host name"},
      {"admin: { allow_hosts: [API.example.com] }\n", "is not a host name in lower case"},
      {"admin: { allow_hosts: [] }\n", "must name at least one host"},
  };
  for (const auto& [text, says] : bad) {
    write_file(dir.file("bad.yaml"), text);
    const std::string why = error_of(dir.file("bad.yaml"));
    INFO(text << " → " << why);
    CHECK(why.find(says) != std::string::npos);
  }
}

TEST_CASE("config: http.tls and admin.tls take both files, each readable", "[config][tls]") {
  TempDir dir;
  write_file(dir.file("c.pem"), "certificate");
  write_file(dir.file("k.pem"), "key");
  write_file(dir.file("empty.yaml"), "");
  CHECK_FALSE(load_runtime_config(dir.file("empty.yaml")).http.tls.enabled());
  write_file(dir.file("ok.yaml"), "http: { tls: { cert_file: " + dir.file("c.pem") + ", key_file: " +
                                      dir.file("k.pem") + " } }\nadmin: { tls: { cert_file: " + dir.file("c.pem") +
                                      ", key_file: " + dir.file("k.pem") + " } }\n");
  auto c = load_runtime_config(dir.file("ok.yaml"));
  CHECK(c.http.tls.enabled());
  CHECK(c.http.tls.cert_file == dir.file("c.pem"));
  CHECK(c.http.tls.key_file == dir.file("k.pem"));
  CHECK(c.admin.tls.cert_file == dir.file("c.pem"));
  CHECK(c.admin.tls.key_file == dir.file("k.pem"));

  write_file(dir.file("half.yaml"), "http:\n  tls: { cert_file: " + dir.file("c.pem") + " }\n");
  CHECK(error_of(dir.file("half.yaml")) ==
        dir.file("half.yaml") + ":2:8: http.tls.key_file: is required (tls needs both cert_file and key_file)");
  write_file(dir.file("gone.yaml"),
             "admin:\n  tls: { cert_file: /nonexistent/c.pem, key_file: " + dir.file("k.pem") + " }\n");
  CHECK(error_of(dir.file("gone.yaml")) ==
        dir.file("gone.yaml") + ":2:21: admin.tls.cert_file: cannot read /nonexistent/c.pem");
  write_file(dir.file("extra.yaml"), "http: { tls: { cert_file: a, key_file: b, ca_file: c } }\n");
  CHECK(error_of(dir.file("extra.yaml")).find("http.tls.ca_file: unknown key") != std::string::npos);
}

#include "runtime/base/config.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <yaml-cpp/yaml.h>

#include "flows/text.h"

namespace weir {
namespace {

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const YAML::Node& node, const std::string& field, const std::string& msg) const {
    std::ostringstream out;
    out << file_;
    if (node.IsDefined() && node.Mark().line >= 0) out << ":" << node.Mark().line + 1 << ":" << node.Mark().column + 1;
    out << ": " << field << ": " << msg;
    throw ConfigError(out.str());
  }

  void check_keys(const YAML::Node& map, const std::string& where, const std::set<std::string>& allowed) const {
    if (!map.IsMap()) fail(map, where, "must be a mapping");
    for (const auto& kv : map) {
      auto key = kv.first.as<std::string>();
      if (!allowed.count(key)) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        fail(kv.first, where.empty() ? key : where + "." + key, "unknown key (expected one of: " + list + ")");
      }
    }
  }

  std::string str(const YAML::Node& n, const std::string& field) const {
    if (!n.IsScalar()) fail(n, field, "must be a string");
    std::string err;
    auto v = flows::substitute_env(n.Scalar(), flows::process_env(), &err);
    if (!v) fail(n, field, err);
    return *v;
  }

  std::chrono::milliseconds duration(const YAML::Node& n, const std::string& field) const {
    auto s = str(n, field);
    auto d = flows::parse_duration(s);
    if (!d || d->count() <= 0)
      fail(n, field, "\"" + s + "\" is not a duration (write 250ms, 3s, 1m, 1h; " + flows::duration_hint(s) + ")");
    return *d;
  }

  int64_t size(const YAML::Node& n, const std::string& field) const {
    auto s = str(n, field);
    auto v = flows::parse_size(s);
    if (!v || *v <= 0) fail(n, field, "\"" + s + "\" is not a size (write 512KiB, 1MiB or a number of bytes)");
    return *v;
  }

  int integer(const YAML::Node& n, const std::string& field, int lo, int hi) const {
    auto s = str(n, field);
    try {
      size_t used = 0;
      int v = std::stoi(s, &used);
      if (used == s.size() && v >= lo && v <= hi) return v;
    } catch (...) {
    }
    fail(n, field, "must be a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
  }

  bool boolean(const YAML::Node& n, const std::string& field) const {
    const std::string s = str(n, field);
    if (s == "true") return true;
    if (s == "false") return false;
    fail(n, field, "must be true or false");
  }

  // A list of strings, each accepted by `check` (which returns "" or why not).
  std::vector<std::string> strings(const YAML::Node& n, const std::string& field,
                                   const std::function<std::string(const std::string&)>& check) const {
    if (!n.IsSequence()) fail(n, field, "must be a list of strings");
    std::vector<std::string> out;
    for (const auto& item : n) {
      std::string v = str(item, field);
      if (std::string why = check(v); !why.empty()) fail(item, field, "\"" + v + "\" " + why);
      out.push_back(std::move(v));
    }
    return out;
  }

  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

void read_nats(Reader& r, const YAML::Node& n, RuntimeConfig& c) {
  r.check_keys(n, "nats", {"url", "creds", "replicas", "stream_max_bytes", "delivery_threads"});
  if (n["url"]) c.nats.url = r.str(n["url"], "nats.url");
  if (n["creds"]) c.nats.creds = r.str(n["creds"], "nats.creds");
  if (n["replicas"]) c.nats.replicas = r.integer(n["replicas"], "nats.replicas", 1, 5);
  if (n["delivery_threads"]) {
    c.nats.delivery_threads = r.integer(n["delivery_threads"], "nats.delivery_threads", 1, 64);
  }
  if (n["stream_max_bytes"]) {
    c.nats.stream_max_bytes = r.size(n["stream_max_bytes"], "nats.stream_max_bytes");
    if (c.nats.stream_max_bytes < (64LL << 10)) {
      r.fail(n["stream_max_bytes"], "nats.stream_max_bytes", "must be at least 64KiB");
    }
  }
}

// `tls: { cert_file, key_file }`: both, each a file weir can read now (the files are
// read again, and their contents checked, when the listener starts and on SIGHUP).
void read_tls(Reader& r, const YAML::Node& n, const std::string& where, TlsFiles& out) {
  r.check_keys(n, where, {"cert_file", "key_file"});
  for (const char* key : {"cert_file", "key_file"}) {
    const std::string field = where + "." + key;
    if (!n[key]) r.fail(n, field, "is required (tls needs both cert_file and key_file)");
    std::string path = r.str(n[key], field);
    if (path.empty()) r.fail(n[key], field, "must name a PEM file");
    if (!std::ifstream(path)) r.fail(n[key], field, "cannot read " + path);
    (std::string(key) == "cert_file" ? out.cert_file : out.key_file) = std::move(path);
  }
}

void read_http(Reader& r, const YAML::Node& n, RuntimeConfig& c) {
  r.check_keys(n, "http",
               {"listen", "max_body", "max_header", "read_timeout", "ack_timeout", "max_depth", "max_connections",
                "max_connections_per_client", "max_connection_age", "tls"});
  if (n["listen"]) c.http.listen = r.str(n["listen"], "http.listen");
  if (n["max_body"]) c.http.max_body = r.size(n["max_body"], "http.max_body");
  if (n["max_header"]) c.http.max_header = r.size(n["max_header"], "http.max_header");
  if (n["read_timeout"]) c.http.read_timeout = r.duration(n["read_timeout"], "http.read_timeout");
  if (n["ack_timeout"]) c.http.ack_timeout = r.duration(n["ack_timeout"], "http.ack_timeout");
  if (n["max_depth"]) c.http.max_depth = r.integer(n["max_depth"], "http.max_depth", 1, 10000);
  if (n["max_connections"])
    c.http.max_connections = r.integer(n["max_connections"], "http.max_connections", 1, 1000000);
  if (auto pc = n["max_connections_per_client"]) {
    c.http.max_connections_per_client = r.integer(pc, "http.max_connections_per_client", 1, 1000000);
    if (c.http.max_connections_per_client > c.http.max_connections) {
      r.fail(pc, "http.max_connections_per_client",
             "must not exceed http.max_connections (" + std::to_string(c.http.max_connections) + ")");
    }
  }
  if (n["max_connection_age"]) {
    c.http.max_connection_age = r.duration(n["max_connection_age"], "http.max_connection_age");
  }
  if (n["tls"]) read_tls(r, n["tls"], "http.tls", c.http.tls);
}

std::string not_env_name(const std::string& v) {
  bool ok = !v.empty() && !(v[0] >= '0' && v[0] <= '9');
  for (char ch : v)
    ok = ok && ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_');
  return ok ? "" : "is not an environment variable name (letters, digits, _)";
}

// A host name or address as a URL would give it; `*.example.com` admits its subdomains.
std::string not_host(const std::string& v) {
  const std::string h = v.rfind("*.", 0) == 0 ? v.substr(2) : v;
  bool ok = !h.empty() && h.size() <= 253;
  for (char ch : h)
    ok = ok && ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == ':');
  return ok ? "" : "is not a host name in lower case (example.com, *.example.com, 10.0.0.7 or an IPv6 address)";
}

void read_admin(Reader& r, const YAML::Node& n, RuntimeConfig& c) {
  r.check_keys(n, "admin",
               {"listen", "token_env", "max_connections", "max_connections_per_client", "allow_exec", "allow_env",
                "allow_hosts", "tls"});
  if (n["listen"]) c.admin.listen = r.str(n["listen"], "admin.listen");
  if (n["token_env"]) c.admin.token_env = r.str(n["token_env"], "admin.token_env");
  if (n["max_connections"])
    c.admin.max_connections = r.integer(n["max_connections"], "admin.max_connections", 1, 100000);
  if (auto pc = n["max_connections_per_client"]) {
    c.admin.max_connections_per_client = r.integer(pc, "admin.max_connections_per_client", 1, 100000);
    if (c.admin.max_connections_per_client > c.admin.max_connections) {
      r.fail(pc, "admin.max_connections_per_client",
             "must not exceed admin.max_connections (" + std::to_string(c.admin.max_connections) + ")");
    }
  }
  if (n["allow_exec"]) c.admin.allow_exec = r.boolean(n["allow_exec"], "admin.allow_exec");
  if (n["allow_env"]) c.admin.allow_env = r.strings(n["allow_env"], "admin.allow_env", not_env_name);
  if (n["allow_hosts"]) {
    c.admin.allow_hosts = r.strings(n["allow_hosts"], "admin.allow_hosts", not_host);
    if (c.admin.allow_hosts.empty())
      r.fail(n["allow_hosts"], "admin.allow_hosts", "must name at least one host (leave it out to allow any)");
  }
  if (n["tls"]) read_tls(r, n["tls"], "admin.tls", c.admin.tls);
}

void read_cluster(Reader& r, const YAML::Node& n, RuntimeConfig& c) {
  r.check_keys(n, "cluster", {"name", "lease_ttl"});
  if (n["name"]) c.cluster.name = r.str(n["name"], "cluster.name");
  if (n["lease_ttl"]) c.cluster.lease_ttl = r.duration(n["lease_ttl"], "cluster.lease_ttl");
}

void read_log(Reader& r, const YAML::Node& n, RuntimeConfig& c) {
  r.check_keys(n, "log", {"level", "format"});
  if (n["level"]) {
    c.log.level = r.str(n["level"], "log.level");
    if (c.log.level != "debug" && c.log.level != "info" && c.log.level != "warn" && c.log.level != "error")
      r.fail(n["level"], "log.level", "must be debug, info, warn or error");
  }
  if (n["format"]) {
    c.log.format = r.str(n["format"], "log.format");
    if (c.log.format != "text" && c.log.format != "json") r.fail(n["format"], "log.format", "must be text or json");
  }
}

// dlq: 0 (the default) = no limit: every dead letter is kept.
void read_dlq(Reader& r, const YAML::Node& n, RuntimeConfig& c) {
  r.check_keys(n, "dlq", {"max_age", "max_bytes"});
  auto zero = [&](const YAML::Node& v, const char* f) { return r.str(v, f) == "0"; };
  if (n["max_age"] && !zero(n["max_age"], "dlq.max_age")) c.dlq.max_age = r.duration(n["max_age"], "dlq.max_age");
  if (n["max_bytes"] && !zero(n["max_bytes"], "dlq.max_bytes"))
    c.dlq.max_bytes = r.size(n["max_bytes"], "dlq.max_bytes");
}

void read_trace(Reader& r, const YAML::Node& n, RuntimeConfig& c) {
  r.check_keys(n, "trace", {"otlp_endpoint", "service_name", "max_queue"});
  if (n["otlp_endpoint"]) {
    c.trace.otlp_endpoint = r.str(n["otlp_endpoint"], "trace.otlp_endpoint");
    const std::string& u = c.trace.otlp_endpoint;
    if (!u.empty() && u.rfind("http://", 0) != 0 && u.rfind("https://", 0) != 0) {
      r.fail(n["otlp_endpoint"], "trace.otlp_endpoint", "must be an http:// or https:// URL");
    }
  }
  if (n["service_name"]) {
    c.trace.service_name = r.str(n["service_name"], "trace.service_name");
    if (c.trace.service_name.empty()) r.fail(n["service_name"], "trace.service_name", "must not be empty");
  }
  if (n["max_queue"]) c.trace.max_queue = r.integer(n["max_queue"], "trace.max_queue", 1, 10'000'000);
}

void read_tables(Reader& r, const YAML::Node& n, RuntimeConfig& c) {
  r.check_keys(n, "tables", {"max_entries", "max_value_bytes", "max_tables"});
  if (n["max_entries"]) c.tables.max_entries = r.integer(n["max_entries"], "tables.max_entries", 1, 100'000'000);
  // Each table is a KV bucket on the server and a watcher thread here: bounded.
  if (n["max_tables"]) c.tables.max_tables = r.integer(n["max_tables"], "tables.max_tables", 1, 10'000);
  if (n["max_value_bytes"]) {
    // A row is one NATS message: the server's max_payload (1 MiB by default) bounds it.
    c.tables.max_value_bytes = r.size(n["max_value_bytes"], "tables.max_value_bytes");
    if (c.tables.max_value_bytes < 64 || c.tables.max_value_bytes > (1 << 20)) {
      r.fail(n["max_value_bytes"], "tables.max_value_bytes", "must be from 64B to 1MiB");
    }
  }
}

void read_backlog(Reader& r, const YAML::Node& n, RuntimeConfig& c) {
  r.check_keys(n, "backlog", {"max_bytes", "max_events", "max_pending", "max_delay", "ingress_nice"});
  if (n["max_bytes"]) c.backlog.max_bytes = r.size(n["max_bytes"], "backlog.max_bytes");
  if (n["max_events"]) c.backlog.max_events = r.integer(n["max_events"], "backlog.max_events", 1, 1 << 30);
  if (n["max_pending"]) c.backlog.max_pending = r.integer(n["max_pending"], "backlog.max_pending", 1, 1 << 24);
  if (auto d = n["max_delay"]) {
    c.backlog.max_delay = d.IsScalar() && d.Scalar() == "0" ? std::chrono::milliseconds(0)
                                                            : r.duration(d, "backlog.max_delay");
  }
  if (n["ingress_nice"]) c.backlog.ingress_nice = r.integer(n["ingress_nice"], "backlog.ingress_nice", 0, 19);
}

void check_backlog_room(Reader& r, const YAML::Node& root, const RuntimeConfig& c) {
  // The stream must keep room above the backlog bound for the flow's own outputs, or a
  // full input could block them (ADR 0080): at least one body of the largest size.
  if (c.backlog.bytes_bound(c.nats.stream_max_bytes) + c.http.max_body > c.nats.stream_max_bytes) {
    YAML::Node at = root["backlog"] && root["backlog"]["max_bytes"]    ? root["backlog"]["max_bytes"]
                    : root["nats"] && root["nats"]["stream_max_bytes"] ? root["nats"]["stream_max_bytes"]
                                                                       : YAML::Node();
    r.fail(at, root["backlog"] && root["backlog"]["max_bytes"] ? "backlog.max_bytes" : "nats.stream_max_bytes",
           "backlog.max_bytes (" + std::to_string(c.backlog.bytes_bound(c.nats.stream_max_bytes)) +
               ") + http.max_body (" + std::to_string(c.http.max_body) + ") must not exceed nats.stream_max_bytes (" +
               std::to_string(c.nats.stream_max_bytes) + "): the stream keeps that room for the flow's outputs");
  }
}

}  // namespace

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                               : static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cpus);
}

int RuntimeConfig::delivery_loops_in_force() const {
  if (delivery_loops == 1 || delivery_loops == 2) return delivery_loops;
  return usable_cpus() < 4 ? 1 : 2;
}

RuntimeConfig load_runtime_config(const std::string& path) {
  RuntimeConfig c;
  c.config_file = path;
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot read the config file");
  YAML::Node root;
  try {
    root = YAML::Load(in);
  } catch (const YAML::Exception& e) {
    throw ConfigError(path + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) + ": " +
                      e.msg);
  }
  if (root.IsNull()) return c;  // an empty file means defaults
  Reader r(path);
  r.check_keys(root, "",
               {"nats", "data_dir", "http", "admin", "flows", "cluster", "log", "drain_timeout", "max_deliver", "dlq",
                "backlog", "tables", "trace", "delivery_loops"});
  if (auto n = root["nats"]) read_nats(r, n, c);
  if (auto n = root["data_dir"]) c.data_dir = r.str(n, "data_dir");
  if (auto n = root["http"]) read_http(r, n, c);
  if (auto n = root["admin"]) read_admin(r, n, c);
  if (auto n = root["flows"]) c.flows = r.str(n, "flows");
  if (auto n = root["cluster"]) read_cluster(r, n, c);
  if (auto n = root["log"]) read_log(r, n, c);
  if (auto n = root["dlq"]) read_dlq(r, n, c);
  if (auto n = root["trace"]) read_trace(r, n, c);
  if (auto n = root["tables"]) read_tables(r, n, c);
  if (auto n = root["drain_timeout"]) c.drain_timeout = r.duration(n, "drain_timeout");
  if (auto n = root["max_deliver"]) c.max_deliver = r.integer(n, "max_deliver", 1, 1000);
  if (auto n = root["backlog"]) read_backlog(r, n, c);
  if (auto n = root["delivery_loops"]) {
    c.delivery_loops = n.IsScalar() && n.Scalar() == "auto" ? 0 : r.integer(n, "delivery_loops", 1, 2);
  }
  check_backlog_room(r, root, c);
  return c;
}

}  // namespace weir

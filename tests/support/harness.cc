#include "tests/support/harness.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace weir::itest {

using weir::testing::free_port;
using weir::testing::http_request;
using weir::testing::HttpClient;
using weir::testing::Process;
using weir::testing::wait_until;
using weir::testing::write_file;

// The environment may point at other builds (e.g. a release build of weir).
std::string weir_binary() {
  if (const char* env = std::getenv("WEIR_BINARY"); env && *env) return env;
#ifdef WEIR_BINARY
  return WEIR_BINARY;
#else
  return "";
#endif
}

std::string sink_binary() {
  if (const char* env = std::getenv("WEIR_SINK_BINARY"); env && *env) return env;
#ifdef WEIR_SINK_BINARY
  return WEIR_SINK_BINARY;
#else
  return "";
#endif
}

namespace {

std::string tail(const std::string& s, size_t n) { return s.size() <= n ? s : "..." + s.substr(s.size() - n); }

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
}

json parse_json_reply(const HttpReply& r, const std::string& what) {
  if (r.status != 200) {
    throw std::runtime_error(what + ": HTTP " + std::to_string(r.status) + " " + r.error + " " + r.body);
  }
  try {
    return json::parse(r.body);
  } catch (const std::exception& e) {
    throw std::runtime_error(what + ": not JSON: " + r.body.substr(0, 300));
  }
}

}  // namespace

// ---------------------------------------------------------------- SinkProcess

SinkProcess::SinkProcess(std::vector<std::string> extra_args, int port) {
  if (sink_binary().empty()) throw std::runtime_error("weir-sink is not built (no WEIR_SINK_BINARY)");
  std::vector<std::string> argv{sink_binary(), "--listen", "127.0.0.1:" + std::to_string(port)};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  proc_ = Process::spawn(argv, {}, dir_.file("sink.log"));
  static const std::regex kListen(R"re("listen"\s*:\s*"127\.0\.0\.1:(\d+)")re");
  std::smatch m;
  std::string log;
  bool ok = wait_until(
      [&] {
        log = proc_.read_log();
        return std::regex_search(log, m, kListen) || !proc_.running();
      },
      10s);
  if (!ok || !std::regex_search(log, m, kListen)) {
    throw std::runtime_error("weir-sink did not print its listen address; log:\n" + tail(proc_.read_log(), 2000));
  }
  port_ = std::stoi(m[1].str());
}

std::string SinkProcess::url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

json SinkProcess::stats() const { return parse_json_reply(http_request("GET", url("/stats")), "sink /stats"); }

int64_t SinkProcess::stat(const std::string& key) const {
  json s = stats();
  // A missing key is a failure, not 0: a check like stat("duplicates") == 0 must not pass
  // because weir-sink stopped reporting (or renamed) the count.
  if (!s.contains(key) || !s[key].is_number()) {
    throw std::runtime_error("weir-sink /stats has no number \"" + key + "\": " + s.dump().substr(0, 500));
  }
  return s[key].get<int64_t>();
}

void SinkProcess::reset() const {
  auto r = http_request("POST", url("/reset"));
  if (r.status / 100 != 2) throw std::runtime_error("sink /reset: HTTP " + std::to_string(r.status));
}

void SinkProcess::control(const json& settings) const {
  auto r = http_request("POST", url("/control"), settings.dump(), {"Content-Type: application/json"});
  if (r.status / 100 != 2) throw std::runtime_error("sink /control: HTTP " + std::to_string(r.status) + " " + r.body);
}

json SinkProcess::requests(int limit) const {
  json j = parse_json_reply(http_request("GET", url("/requests?limit=" + std::to_string(limit))), "sink /requests");
  if (j.is_object() && j.contains("requests")) j = j["requests"];
  return j;
}

std::set<std::string> SinkProcess::ids() const {
  json j = parse_json_reply(http_request("GET", url("/ids"), "", {}, 30s), "sink /ids");
  if (j.is_object() && j.contains("ids")) j = j["ids"];
  std::set<std::string> out;
  for (const auto& v : j) out.insert(v.is_string() ? v.get<std::string>() : v.dump());
  return out;
}

// ---------------------------------------------------------------- WeirProcess

std::string http_flow(const std::string& name, const std::string& path, const std::string& sink_url,
                      const std::string& sink_extra, const std::string& source_extra) {
  std::string out = "flow: " + name + "\n";
  out += "from: { http: { path: \"" + path + "\"" + (source_extra.empty() ? "" : ", " + source_extra) + " } }\n";
  out += "steps: []\n";
  out += "to: { out: { http: { url: \"" + sink_url + "\"" + (sink_extra.empty() ? "" : ", " + sink_extra) + " } } }\n";
  return out;
}

WeirProcess::WeirProcess(WeirOptions options) : options_(std::move(options)) {
  if (weir_binary().empty()) throw std::runtime_error("weir is not built (no WEIR_BINARY)");
}

bool WeirProcess::learn_ports() const {
  if (http_port_ != 0 && admin_port_ != 0) return true;
  std::string log = proc_.read_log();
  auto marker = log.rfind("==== spawn ");
  if (marker != std::string::npos) log = log.substr(marker);
  // Text: `... INFO listening http=127.0.0.1:P admin=127.0.0.1:Q`; JSON: "http":"127.0.0.1:P".
  static const std::regex kText(R"re(listening http=[0-9.]+:(\d+) admin=[0-9.]+:(\d+))re");
  std::smatch m;
  if (std::regex_search(log, m, kText)) {
    http_port_ = std::stoi(m[1].str());
    admin_port_ = std::stoi(m[2].str());
    return true;
  }
  // JSON lines: pick the line with "msg":"listening" and read both fields from it.
  for (size_t pos = 0; (pos = log.find("\"msg\":\"listening\"", pos)) != std::string::npos; ++pos) {
    size_t begin = log.rfind('\n', pos);
    size_t end = log.find('\n', pos);
    std::string line = log.substr(
        begin == std::string::npos ? 0 : begin + 1,
        (end == std::string::npos ? log.size() : end) - (begin == std::string::npos ? 0 : begin + 1));
    static const std::regex kField(R"re("(http|admin)":"[0-9.]+:(\d+)")re");
    int h = 0, a = 0;
    for (auto it = std::sregex_iterator(line.begin(), line.end(), kField); it != std::sregex_iterator(); ++it) {
      ((*it)[1].str() == "http" ? h : a) = std::stoi((*it)[2].str());
    }
    if (h && a) {
      http_port_ = h;
      admin_port_ = a;
      return true;
    }
  }
  return false;
}

void WeirProcess::ensure_ports() const {
  if (learn_ports()) return;
  auto& proc = const_cast<weir::testing::Process&>(proc_);
  if (!wait_until([&] { return learn_ports() || !proc.running(); }, 30s) || !learn_ports()) {
    throw std::runtime_error("weir did not report its listen addresses: " + describe());
  }
}

int WeirProcess::http_port() const {
  ensure_ports();
  return http_port_;
}

int WeirProcess::admin_port() const {
  ensure_ports();
  return admin_port_;
}

WeirProcess::~WeirProcess() {
  if (proc_.pid() > 0) proc_.kill_and_wait();
}

std::string WeirProcess::expand(std::string text) const {
  // Port 0 until the first spawn reported the ports it bound; the same ports after.
  replace_all(text, "{HTTP}", "127.0.0.1:" + std::to_string(http_port_));
  replace_all(text, "{ADMIN}", "127.0.0.1:" + std::to_string(admin_port_));
  replace_all(text, "{DATA}", data_dir());
  replace_all(text, "{FLOWS}", flows_dir());
  replace_all(text, "{NATS}", options_.nats_url);
  replace_all(text, "{DIR}", dir());
  return text;
}

void WeirProcess::spawn() {
  if (proc_.running()) throw std::runtime_error("WeirProcess::spawn: already running");
  std::filesystem::create_directories(flows_dir());
  for (const auto& [file, content] : options_.flows) write_file(flow_path(file), expand(content));
  std::vector<std::string> argv{weir_binary(), "run"};
  if (!options_.config.empty()) {
    write_file(config_path(), expand(options_.config));
    argv.insert(argv.end(), {"--config", config_path()});
  }
  if (options_.use_flags) {
    argv.insert(argv.end(),
                {"--flows", flows_dir(), "--data-dir", data_dir(), "--http", "127.0.0.1:" + std::to_string(http_port_),
                 "--admin", "127.0.0.1:" + std::to_string(admin_port_)});
    if (!options_.nats_url.empty()) argv.insert(argv.end(), {"--nats", options_.nats_url});
  }
  argv.insert(argv.end(), options_.args.begin(), options_.args.end());
  ++spawns_;
  std::string log = dir_.file("weir.log");
  write_file(log, weir::testing::read_file(log) + "==== spawn " + std::to_string(spawns_) + "\n");
  proc_ = Process::spawn(argv, options_.env, log);
}

bool WeirProcess::wait_ready(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  if (!wait_until([&] { return learn_ports() || !proc_.running(); }, timeout, 5ms) || !learn_ports()) return false;
  std::string url = admin_url("/readyz");
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return wait_until([&] { return !proc_.running() || http_request("GET", url, "", {}, 500ms).status == 200; },
                    std::max(left, std::chrono::milliseconds(1)), 20ms) &&
         proc_.running();
}

void WeirProcess::start() {
  spawn();
  if (!wait_ready()) throw std::runtime_error("weir did not become ready: " + describe());
}

void WeirProcess::kill9() { proc_.kill_and_wait(); }

std::optional<int> WeirProcess::terminate(std::chrono::milliseconds timeout) {
  proc_.signal(SIGTERM);
  return proc_.wait_exit(timeout);
}

std::string WeirProcess::ingress_url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(http_port()) + path;
}

std::string WeirProcess::admin_url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(admin_port()) + path;
}

HttpReply WeirProcess::post(const std::string& path, const std::string& body, std::vector<std::string> headers,
                            std::chrono::milliseconds timeout) const {
  if (std::none_of(headers.begin(), headers.end(), [](const std::string& h) {
        std::string l = h.substr(0, 13);
        std::transform(l.begin(), l.end(), l.begin(), ::tolower);
        return l == "content-type:";
      })) {
    headers.push_back("Content-Type: application/json");
  }
  return http_request("POST", ingress_url(path), body, headers, timeout);
}

HttpReply WeirProcess::admin(const std::string& method, const std::string& path, const std::string& body,
                             std::vector<std::string> headers) const {
  if (!body.empty()) headers.push_back("Content-Type: application/json");
  return http_request(method, admin_url(path), body, headers, 15s);
}

std::string WeirProcess::describe() const {
  std::ostringstream s;
  auto& p = const_cast<Process&>(proc_);
  if (p.running()) {
    s << "weir pid " << p.pid() << " running";
  } else {
    auto code = p.wait_exit(0ms);
    s << "weir exited with " << (code ? std::to_string(*code) : std::string("?"));
  }
  s << "; log tail:\n" << tail(log(), 3000);
  return s.str();
}

// ---------------------------------------------------------------- load

std::string id_from_reply(const HttpReply& reply) {
  try {
    json j = json::parse(reply.body);
    if (j.is_object() && j.contains("id") && j["id"].is_string()) return j["id"].get<std::string>();
  } catch (const std::exception&) {
  }
  return "";
}

Posters::Posters(std::string url, int clients, std::chrono::microseconds pause) : url_(std::move(url)), pause_(pause) {
  static std::atomic<int> instances{0};
  prefix_ = "p" + std::to_string(::getpid()) + "x" + std::to_string(++instances);
  for (int c = 0; c < clients; ++c) threads_.emplace_back([this, c] { run(c); });
}

Posters::~Posters() { stop(); }

void Posters::stop() {
  stop_ = true;
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void Posters::run(int client) {
  HttpClient http;
  const std::string pad(120, 'x');
  const bool keyed = client % 2 == 0;
  int64_t n = 0;
  bool retry_same = false;
  while (!stop_) {
    if (!retry_same) ++n;
    // weir-sink counts events by the body's top-level "id"; the Idempotency-Key (when
    // sent) is the same string, so weir's event id and the sink's id agree.
    std::string id = prefix_ + "-c" + std::to_string(client) + "-" + std::to_string(n);
    json event = {{"id", id}, {"client", client}, {"n", n}, {"pad", pad}};
    std::vector<std::string> headers{"Content-Type: application/json"};
    if (keyed) headers.push_back("Idempotency-Key: " + id);
    PostRecord rec;
    rec.sent = std::chrono::steady_clock::now();
    HttpReply r = http.request("POST", url_, event.dump(), headers, 10s);
    rec.answered = std::chrono::steady_clock::now();
    rec.status = r.status;
    rec.has_retry_after = !r.header("retry-after").empty();
    bool ok = r.status / 100 == 2;
    {
      MutexLock lock(mu_);
      records_.push_back(rec);
      if (ok) ids_.insert(id);
      if (ok && keyed && id_from_reply(r) != id) ++key_mismatches_;
    }
    if (ok) {
      ++acked_;
    } else {
      ++failed_;
    }
    retry_same = keyed && !ok;
    // Pacing keeps the load bounded on a shared 2-core machine; after a failure the
    // pause also stops a refused connection from spinning.
    std::this_thread::sleep_for(ok ? pause_ : std::max(pause_, std::chrono::microseconds(5000)));
  }
}

std::set<std::string> Posters::acked_ids() const {
  MutexLock lock(mu_);
  return ids_;
}

std::vector<PostRecord> Posters::records() const {
  MutexLock lock(mu_);
  return records_;
}

std::map<int, size_t> Posters::status_counts() const {
  MutexLock lock(mu_);
  std::map<int, size_t> out;
  for (const auto& r : records_) ++out[r.status];
  return out;
}

size_t acked_total(const std::vector<Posters*>& posters) {
  size_t n = 0;
  for (const Posters* p : posters) n += p->acked();
  return n;
}

std::set<std::string> acked_ids(const std::vector<Posters*>& posters) {
  std::set<std::string> all;
  for (const Posters* p : posters) {
    for (const auto& id : p->acked_ids()) all.insert(id);
  }
  return all;
}

std::map<int, size_t> status_counts(const std::vector<Posters*>& posters) {
  std::map<int, size_t> counts;
  for (const Posters* p : posters) {
    for (auto [status, n] : p->status_counts()) counts[status] += n;
  }
  return counts;
}

bool more_acks(const std::vector<Posters*>& posters, size_t n, std::chrono::milliseconds timeout) {
  size_t target = acked_total(posters) + n;
  return weir::testing::wait_until([&] { return acked_total(posters) >= target; }, timeout, 5ms);
}

bool more_acks(Posters& posters, size_t n, std::chrono::milliseconds timeout) {
  return more_acks(std::vector<Posters*>{&posters}, n, timeout);
}

CliResult run_cli(std::vector<std::string> args, std::map<std::string, std::string> env) {
  weir::testing::TempDir dir;
  args.insert(args.begin(), weir_binary());
  env.emplace("WEIR_ADMIN_TOKEN", "");  // emplace: a token the test sets stays
  auto p = weir::testing::Process::spawn(args, env, dir.file("out"));
  auto code = p.wait_exit(60s);
  return {code ? *code : -1, p.read_log()};
}

std::string header_of(const json& request, const std::string& name) {
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), ::tolower);
    return s;
  };
  if (!request.contains("headers") || !request["headers"].is_object()) return "";
  for (const auto& [k, v] : request["headers"].items()) {
    if (lower(k) == lower(name)) return v.is_string() ? v.get<std::string>() : v.dump();
  }
  return "";
}

json body_of(const json& request) {
  const json& b = request.at("body");
  return b.is_string() ? json::parse(b.get<std::string>()) : b;
}

std::vector<std::string> missing(const std::set<std::string>& want, const std::set<std::string>& have) {
  std::vector<std::string> out;
  std::set_difference(want.begin(), want.end(), have.begin(), have.end(), std::back_inserter(out));
  return out;
}

std::vector<std::string> wait_delivered(const std::set<std::string>& acked, const SinkProcess& sink,
                                        std::chrono::milliseconds timeout) {
  std::vector<std::string> lost;
  weir::testing::wait_until(
      [&] {
        lost = missing(acked, sink.ids());
        return lost.empty();
      },
      timeout, 200ms);
  return lost;
}

std::string stream_leader(int monitor_port, const std::string& stream) {
  HttpReply r = weir::testing::http_request(
      "GET", "http://127.0.0.1:" + std::to_string(monitor_port) + "/jsz?accounts=true&streams=true", "", {}, 2s);
  if (r.status != 200) return "";
  try {
    json j = json::parse(r.body);
    for (const auto& account : j.value("account_details", json::array())) {
      for (const auto& s : account.value("stream_detail", json::array())) {
        if (s.value("name", "") == stream && s.contains("cluster")) return s["cluster"].value("leader", "");
      }
    }
  } catch (const std::exception&) {
  }
  return "";
}

double stage_counter(const WeirProcess& weir, const std::string& name, const std::string& stage) {
  HttpReply r = http_request("GET", weir.admin_url("/metrics"), "", {}, std::chrono::seconds(2));
  if (r.status != 200) return -1;
  double sum = 0;
  auto samples = parse_metrics(r.body);
  auto [from, to] = samples.equal_range(name);
  for (auto it = from; it != to; ++it) {
    if (it->second.first.find("stage=\"" + stage + "\"") != std::string::npos) sum += it->second.second;
  }
  return sum;
}

std::multimap<std::string, std::pair<std::string, double>> parse_metrics(const std::string& text) {
  std::multimap<std::string, std::pair<std::string, double>> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::string name, labels, rest;
    size_t brace = line.find('{');
    size_t space = line.find(' ');
    if (brace != std::string::npos && brace < space) {
      size_t close = line.rfind('}');
      if (close == std::string::npos) continue;
      name = line.substr(0, brace);
      labels = line.substr(brace + 1, close - brace - 1);
      rest = line.substr(close + 1);
    } else {
      if (space == std::string::npos) continue;
      name = line.substr(0, space);
      rest = line.substr(space);
    }
    std::istringstream v(rest);
    std::string value;
    v >> value;
    try {
      out.emplace(name, std::make_pair(labels, std::stod(value)));
    } catch (const std::exception&) {
    }
  }
  return out;
}

std::string jetstream_state(int monitor_port) {
  HttpReply r = http_request(
      "GET", "http://127.0.0.1:" + std::to_string(monitor_port) + "/jsz?accounts=true&streams=true&consumers=true", "",
      {}, 2s);
  if (r.status != 200) return "/jsz answered " + std::to_string(r.status) + " " + r.error;
  std::string out;
  try {
    for (const auto& account : json::parse(r.body).value("account_details", json::array())) {
      for (const auto& s : account.value("stream_detail", json::array())) {
        const json& st = s.value("state", json::object());
        out += "stream " + s.value("name", "") + ": msgs " + std::to_string(st.value("messages", 0)) + " seq " +
               std::to_string(st.value("first_seq", 0)) + ".." + std::to_string(st.value("last_seq", 0)) + "\n";
        for (const auto& c : s.value("consumer_detail", json::array())) {
          out += "  consumer " + c.value("name", "") + ": pending " + std::to_string(c.value("num_pending", 0)) +
                 ", ack pending " + std::to_string(c.value("num_ack_pending", 0)) + ", redelivered " +
                 std::to_string(c.value("num_redelivered", 0)) + ", waiting " +
                 std::to_string(c.value("num_waiting", 0)) + ", delivered seq " +
                 std::to_string(c.value("delivered", json::object()).value("stream_seq", 0)) + ", ack floor seq " +
                 std::to_string(c.value("ack_floor", json::object()).value("stream_seq", 0)) + "\n";
        }
      }
    }
  } catch (const std::exception& e) {
    out += std::string("unreadable /jsz: ") + e.what();
  }
  return out;
}

namespace {
std::string hmac_sha256_raw(const std::string& key, const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}
}  // namespace

std::string hmac_sha256_hex(const std::string& key, const std::string& data) {
  static const char* kHex = "0123456789abcdef";
  std::string raw = hmac_sha256_raw(key, data), out;
  for (unsigned char c : raw) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

int delivery_loops_logged(const std::string& log) {
  const std::string mark = "delivery loops loops=";
  const size_t at = log.find(mark);
  if (at == std::string::npos || at + mark.size() >= log.size()) return 0;
  const char c = log[at + mark.size()];
  return c == '1' || c == '2' ? c - '0' : 0;
}

std::string base64(const std::string& data) {
  std::string out(4 * ((data.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(data.data()), static_cast<int>(data.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string hmac_sha256_base64(const std::string& key, const std::string& data) {
  return base64(hmac_sha256_raw(key, data));
}

}  // namespace weir::itest

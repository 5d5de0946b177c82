// Without --nats, `weir run` spawns nats-server itself: JetStream, file
// storage under the data dir, loopback only, a free port; stopped on exit.
#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::read_file;
using weir::testing::wait_until;

namespace {

struct ProcInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  char state = '?';
  std::string comm;
};

std::optional<ProcInfo> proc_info(pid_t pid) {
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  size_t open = stat.find('(');
  size_t close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos) return std::nullopt;
  ProcInfo info;
  info.pid = pid;
  info.comm = stat.substr(open + 1, close - open - 1);
  std::istringstream rest(stat.substr(close + 2));
  rest >> info.state >> info.ppid;
  return info;
}

std::vector<ProcInfo> children_of(pid_t parent) {
  std::vector<ProcInfo> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    auto info = proc_info(static_cast<pid_t>(pid));
    if (info && info->ppid == parent) out.push_back(*info);
  }
  ::closedir(d);
  return out;
}

bool alive(pid_t pid) {
  auto info = proc_info(pid);
  return info && info->state != 'Z' && info->state != 'X';
}

// Local addresses (hex "ADDR:PORT" as in /proc/net/tcp) of the listening TCP sockets
// the process holds.
std::vector<std::string> listening_addresses(pid_t pid) {
  std::set<std::string> inodes;
  std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  std::error_code ec;
  for (const auto& fd : std::filesystem::directory_iterator(fd_dir, ec)) {
    std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::vector<std::string> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream in(
        read_file(std::string("/proc/") + std::to_string(pid) + "/net/" + std::string(table).substr(10)));
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >> timeout >> inode;
      if (st == "0A" && inodes.count(inode)) out.push_back(local);
    }
  }
  return out;
}

bool is_loopback(const std::string& hex_addr) {
  std::string addr = hex_addr.substr(0, hex_addr.find(':'));
  if (addr.size() == 8) return addr.substr(6, 2) == "7F";                                   // 127.x.x.x, little-endian
  return addr == "00000000000000000000000001000000" ||                                      // ::1
         (addr.substr(0, 24) == "0000000000000000FFFF0000" && addr.substr(30, 2) == "7F");  // ::ffff:127.x
}

bool dir_has(const std::string& root, const std::string& name) {
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it->path().filename() == name) return true;
  }
  return false;
}

// The value of `name` in the process's environment (/proc/PID/environ), if set.
std::optional<std::string> environ_value(pid_t pid, const std::string& name) {
  std::string env = read_file("/proc/" + std::to_string(pid) + "/environ");
  const std::string prefix = name + "=";
  for (size_t at = 0; at < env.size();) {
    size_t end = env.find('\0', at);
    if (end == std::string::npos) end = env.size();
    if (env.compare(at, prefix.size(), prefix) == 0) return env.substr(at + prefix.size(), end - at - prefix.size());
    at = end + 1;
  }
  return std::nullopt;
}

std::vector<pid_t> nats_children(pid_t weir) {
  std::vector<pid_t> out;
  for (const auto& c : children_of(weir)) {
    if (c.comm.find("nats-server") != std::string::npos) out.push_back(c.pid);
  }
  return out;
}

}  // namespace

TEST_CASE("weir run without --nats spawns nats-server, serves end to end and stops it", "[integration][embedded]") {
  SinkProcess sink;
  WeirProcess weir({.nats_url = "", .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"))}}});
  for (int run = 1; run <= 2; ++run) {  // the second run reuses the same data dir
    INFO("run " << run);
    weir.start();
    INFO(weir.describe());

    std::vector<ProcInfo> nats;
    for (const auto& c : children_of(weir.process().pid())) {
      if (c.comm.find("nats-server") != std::string::npos) nats.push_back(c);
    }
    REQUIRE(nats.size() == 1);
    pid_t nats_pid = nats[0].pid;

    // Loopback only: every socket it listens on is bound to 127.0.0.1 (or ::1).
    auto listening = listening_addresses(nats_pid);
    CHECK_FALSE(listening.empty());
    char http_hex[8], admin_hex[8];
    std::snprintf(http_hex, sizeof http_hex, ":%04X", weir.http_port());
    std::snprintf(admin_hex, sizeof admin_hex, ":%04X", weir.admin_port());
    for (const auto& a : listening) {
      INFO("nats-server listens on " << a);
      CHECK(is_loopback(a));
      // weir's own listening sockets must not leak into the child: a leaked one keeps
      // the port bound (accepting into a queue nobody serves) if weir dies first.
      CHECK_FALSE(a.substr(a.find(':')) == http_hex);
      CHECK_FALSE(a.substr(a.find(':')) == admin_hex);
    }
    // File storage under the data dir.
    CHECK(dir_has(weir.data_dir(), "jetstream"));
    // GOMAXPROCS: half the CPUs weir may use, at least one, unless the environment that
    // started weir sets it (ADR 0265).
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    REQUIRE(::sched_getaffinity(0, sizeof cpus, &cpus) == 0);
    const char* ours = std::getenv("GOMAXPROCS");
    CHECK(environ_value(nats_pid, "GOMAXPROCS") ==
          std::optional<std::string>(ours != nullptr ? ours : std::to_string(std::max(1, CPU_COUNT(&cpus) / 2))));

    std::string id = "run-" + std::to_string(run);
    auto r = weir.post("/in/orders", json{{"id", id}, {"run", run}}.dump());
    REQUIRE(r.status == 202);
    std::set<std::string> ids{id};
    CHECK(wait_until([&] { return missing(ids, sink.ids()).empty(); }, 20s, 50ms));

    auto code = weir.terminate(15s);
    REQUIRE(code.has_value());
    CHECK(*code == 0);
    // The child is stopped, not left behind (nor a zombie re-parented elsewhere).
    CHECK(wait_until([&] { return !alive(nats_pid); }, 5s, 20ms));
    if (alive(nats_pid)) ::kill(nats_pid, SIGKILL);  // never leak it past the test
  }
  CHECK(sink.stat("unique") == 2);
}

TEST_CASE("weir run with embedded NATS keeps acknowledged events across a kill -9 restart", "[integration][embedded]") {
  SinkProcess sink({"--status", "503"});  // holds every event in the stream
  WeirProcess weir({.nats_url = "",
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"),
                                                        "retries: 100, " WEIR_TEST_RETRY ", timeout: 2s")}}});
  weir.start();
  INFO(weir.describe());
  std::set<std::string> ids;
  for (int i = 0; i < 30; ++i) {
    std::string id = "k" + std::to_string(i);
    auto r = weir.post("/in/orders", json{{"id", id}, {"n", i}}.dump());
    REQUIRE(r.status == 202);
    ids.insert(id);
  }
  std::vector<pid_t> nats = nats_children(weir.process().pid());
  REQUIRE(nats.size() == 1);
  weir.kill9();
  // weir spawns it with PR_SET_PDEATHSIG (runtime/nats/embedded_nats.cc): a kill -9 of weir
  // takes it down too. One that outlives weir is a failure (and is killed so it does not leak).
  for (pid_t p : nats) {
    bool gone = wait_until([&] { return !alive(p); }, 5s, 20ms);
    CHECK(gone);
    if (!gone) ::kill(p, SIGKILL);
  }
  sink.control({{"status", 204}});
  weir.start();
  CHECK(wait_until([&] { return missing(ids, sink.ids()).empty(); }, 30s, 100ms));
  CHECK(weir.terminate(15s) == std::optional<int>(0));
}

TEST_CASE("weir run passes its own GOMAXPROCS on to the embedded nats-server", "[integration][embedded]") {
  SinkProcess sink;
  WeirProcess weir({.nats_url = "",
                    .flows = {{"orders.yaml", http_flow("orders", "/in/orders", sink.url("/out"))}},
                    .env = {{"GOMAXPROCS", "3"}}});
  weir.start();
  INFO(weir.describe());
  auto nats = nats_children(weir.process().pid());
  REQUIRE(nats.size() == 1);
  CHECK(environ_value(nats[0], "GOMAXPROCS") == std::optional<std::string>("3"));
  auto r = weir.post("/in/orders", json{{"id", "g1"}}.dump());
  REQUIRE(r.status == 202);
  CHECK(wait_until([&] { return missing(std::set<std::string>{"g1"}, sink.ids()).empty(); }, 20s, 50ms));
  CHECK(weir.terminate(15s) == std::optional<int>(0));
}

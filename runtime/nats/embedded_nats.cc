#include "runtime/nats/embedded_nats.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/config.h"
#include "runtime/base/log.h"

namespace weir {
namespace fs = std::filesystem;

namespace {
// Half the CPUs this process may run on (its affinity mask), at least one.
int default_gomaxprocs() { return std::max(1, usable_cpus() / 2); }

// The server's environment: weir's, with GOMAXPROCS set (ADR 0265). The server shares the
// machine with weir's loop threads; one Go scheduler slot per two CPUs cost it a fifth
// to a quarter less CPU per event on two cores. A GOMAXPROCS in weir's environment is
// passed on unchanged instead. Filled in place: `envp` points into `entry`.
struct ChildEnvironment {
  std::string gomaxprocs;
  std::string entry;
  std::vector<char*> envp;

  void fill() {
    const char* inherited = std::getenv("GOMAXPROCS");
    gomaxprocs = inherited != nullptr ? inherited : std::to_string(default_gomaxprocs());
    entry = "GOMAXPROCS=" + gomaxprocs;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view var(*e);
      // NOTIFY_SOCKET is weir's own line to systemd (ADR 0304): the server is not the service.
      if (!var.starts_with("GOMAXPROCS=") && !var.starts_with("NOTIFY_SOCKET=")) envp.push_back(*e);
    }
    envp.push_back(entry.data());
    envp.push_back(nullptr);
  }
};
}  // namespace

Result<std::unique_ptr<EmbeddedNats>> EmbeddedNats::start(const std::string& data_dir, std::chrono::milliseconds wait) {
  std::error_code ec;
  fs::path dir = fs::absolute(data_dir, ec);
  fs::create_directories(dir / "jetstream", ec);
  if (ec) return Status::invalid("cannot create data_dir " + data_dir + ": " + ec.message());
  fs::path ports_dir = dir / "nats-ports";
  fs::remove_all(ports_dir, ec);
  fs::create_directories(ports_dir, ec);
  std::string log_file = (dir / "nats-server.log").string();

  std::vector<std::string> args = {"nats-server", "-js",   "-sd", (dir / "jetstream").string(), "-a",
                                   "127.0.0.1",   "-p",    "-1",  "--ports_file_dir",           ports_dir.string(),
                                   "-l",          log_file};
  // The child's argv and environment are made here: between fork and exec only
  // async-signal-safe calls are allowed, and allocation is not one.
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ChildEnvironment env;
  env.fill();

  std::unique_ptr<EmbeddedNats> n(new EmbeddedNats());
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return Status::internal("fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    // The server must not inherit our signal mask (main blocks SIGTERM/SIGINT).
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    setpgid(0, 0);  // Ctrl-C in a terminal goes to weir, which stops the server itself
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 1);
    }
    // Nothing of weir's may reach the server: an inherited listening socket (the admin
    // API opens before NATS is spawned) would stay bound after weir exits.
    ::close_range(3, ~0U, 0);
    execvpe("nats-server", argv.data(), env.envp.data());
    _exit(127);
  }
  n->pid_ = pid;
  auto deadline = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < deadline) {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      n->pid_ = -1;
      return Status::unavailable(WIFEXITED(st) && WEXITSTATUS(st) == 127
                                     ? std::string("nats-server not found on PATH (install the nats-server package)")
                                     : "nats-server exited at start; see " + log_file);
    }
    fs::path pf = ports_dir / ("nats-server_" + std::to_string(pid) + ".ports");
    if (fs::exists(pf)) {
      std::ifstream in(pf);
      std::stringstream ss;
      ss << in.rdbuf();
      auto j = nlohmann::json::parse(ss.str(), nullptr, false);
      if (!j.is_discarded() && j.contains("nats") && j["nats"].is_array() && !j["nats"].empty()) {
        n->url_ = j["nats"][0].get<std::string>();
        log::info("embedded nats-server started", {{"url", n->url_},
                                                   {"pid", std::to_string(pid)},
                                                   {"store", (dir / "jetstream").string()},
                                                   {"gomaxprocs", env.gomaxprocs}});
        return n;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  n->stop();
  return Status::timeout("nats-server did not start within " + std::to_string(wait.count()) + " ms; see " + log_file);
}

void EmbeddedNats::stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  for (int i = 0; i < 500; ++i) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

EmbeddedNats::~EmbeddedNats() { stop(); }

}  // namespace weir

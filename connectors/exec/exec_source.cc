#include "connectors/exec/exec_source.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "flows/json_limits.h"

#include "runtime/ports/mailbox.h"
#include "connectors/exec/line_splitter.h"
#include "runtime/base/log.h"
#include "runtime/base/wall_clock.h"

namespace weir::connectors {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kMaxStderrLine = 2048;
// After the command exits, its output may stay open in a process it left behind; do not
// wait for that forever.
constexpr milliseconds kAfterExitDrain{2000};
constexpr milliseconds kStopPublishGrace{1000};

struct Pending {
  IngestEvent event;
  std::string reject_reason;  // set: goes to the dead-letter stream instead
  int attempts = 0;
  Clock::time_point retry_at{};
};

using Completions = Mailbox<Pending>;

// Exits as a child that ended with wait status `status` did: the same exit code, or killed
// by the same signal (so weir's log says how the command ended).
[[noreturn]] void exit_as(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(sig, &dfl, nullptr);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    ::sigprocmask(SIG_UNBLOCK, &one, nullptr);
    ::kill(::getpid(), sig);
    ::_exit(128 + sig);
  }
  ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

// The process between weir and the command (ADR 0285), forked from the source's thread:
// only async-signal-safe calls. It leads the command's process group, forks the command
// (a raw fork: no atfork handlers, whose locks another thread of weir may have held),
// closes every descriptor (the command's output reaches EOF without it), waits for the
// command and exits as it did. The kernel signals it (SIGUSR2) when the thread that forked
// it dies — weir killed or crashed — and it kills the whole group then: the command and
// what it started. The group's SIGTERM at stop() reaches the command directly; the guard
// waits for it.
[[noreturn]] void guard_command(pid_t weir, const char* path, char* const* argv, char* const* envp, int devnull,
                                int out_w, int err_w) {
  sigset_t waited;
  sigemptyset(&waited);
  for (int sig : {SIGCHLD, SIGUSR2, SIGTERM, SIGINT, SIGHUP}) sigaddset(&waited, sig);
  ::sigprocmask(SIG_BLOCK, &waited, nullptr);  // before the parent-death signal can come
  // Default dispositions whatever weir's are: an ignored SIGCHLD would reap the command
  // unseen (the guard would wait forever).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGCHLD, SIGUSR2}) ::sigaction(sig, &dfl, nullptr);
  ::prctl(PR_SET_PDEATHSIG, SIGUSR2);
  if (::getppid() != weir) ::_exit(1);  // weir died before that: nothing started yet
  const pid_t guard = ::getpid();
  const long command = ::syscall(SYS_fork);
  if (command == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the guard killed: the command goes with it
    if (::getppid() != guard) ::_exit(1);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the runtime blocks SIGTERM/SIGINT in its threads
    for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR2}) ::sigaction(sig, &dfl, nullptr);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(out_w, 1);
    ::dup2(err_w, 2);
    ::syscall(SYS_close_range, 3U, ~0U, 0U);  // weir's sockets and files stay weir's
    ::execve(path, argv, envp);
    static const char kMsg[] = "weir exec: cannot execute the command\n";
    [[maybe_unused]] ssize_t w = ::write(2, kMsg, sizeof kMsg - 1);
    ::_exit(127);
  }
  if (command < 0) {
    static const char kMsg[] = "weir exec: cannot fork the command\n";
    [[maybe_unused]] ssize_t w = ::write(err_w, kMsg, sizeof kMsg - 1);
    ::_exit(126);
  }
  ::syscall(SYS_close_range, 0U, ~0U, 0U);
  for (;;) {
    siginfo_t info;
    const int sig = ::sigwaitinfo(&waited, &info);
    if (sig == SIGUSR2) {
      ::kill(0, SIGKILL);  // the guard's own group: the command, what it started, the guard
      ::_exit(137);
    }
    if (sig == SIGCHLD) {
      int status = 0;
      if (::waitpid(static_cast<pid_t>(command), &status, WNOHANG) == command) exit_as(status);
    }
  }
}

bool executable_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) {
    int code = WEXITSTATUS(status);
    std::string s = "exit code " + std::to_string(code);
    if (code == 127) s += " (the command could not be executed)";
    return s;
  }
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// For logs: the program and how many arguments, never the arguments (a `${TOKEN}` in
// the command would be logged otherwise).
std::string joined(const std::vector<std::string>& argv) {
  if (argv.empty()) return "";
  return argv[0] + " (" + std::to_string(argv.size() - 1) + " arguments)";
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

std::string resolve_program(const std::string& program) {
  if (program.empty()) return "";
  if (program.find('/') != std::string::npos) return executable_file(program) ? program : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t colon = dirs.find(':', start);
    std::string dir = dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + program;
    if (executable_file(candidate)) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return "";
}

std::string exec_event_body(const std::string& line, bool json_format, bool* was_json, int max_depth,
                            std::string* too_deep) {
  *was_json = true;
  if (json_format) {
    flows::JsonError err;
    auto v = flows::parse_json(line, max_depth, &err);
    if (v && !v->is_object() && flows::json_depth(*v, max_depth) >= max_depth) {
      v.reset();  // {"line": v} would be one level too deep
      err.too_deep = true;
      err.message = "JSON nested deeper than " + std::to_string(max_depth - 1) + " levels";
    }
    if (!v && err.too_deep) {
      if (too_deep) *too_deep = "line is " + err.message + " (http.max_depth " + std::to_string(max_depth) + ")";
      return "";
    }
    if (v) {
      if (v->is_object()) return line;  // already an event; keep the bytes as written
      return nlohmann::json{{"line", std::move(*v)}}.dump();
    }
    *was_json = false;
  }
  return nlohmann::json{{"line", line}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

struct ExecSource::Impl {
  flows::ExecSourceSpec spec;
  ExecSourceOptions options;
  std::string program;  // resolved path of argv[0]
  SourceContext ctx;
  std::shared_ptr<Completions> mailbox = std::make_shared<Completions>();
  std::atomic<bool> stopping{false};
  std::thread thread;
  bool started = false;
  ExecSourceCounters counters;
  std::mt19937_64 rng{std::random_device{}()};

  // Source-thread state.
  size_t in_flight = 0;  // writes awaiting their PubAck (retries included)
  std::vector<std::shared_ptr<Pending>> retrying;
  bool publish_failing = false;
  pid_t child = -1;
  // The command's process group (its PID): every process it starts, unless one leaves the
  // group on purpose, is signalled with it at stop. -1 when there is none.
  pid_t group = -1;
  int pidfd = -1;

  Impl(flows::ExecSourceSpec s, ExecSourceOptions o) : spec(std::move(s)), options(o) {}
  const std::string& flow() const { return ctx.flow; }

  void run() {
    milliseconds backoff = options.restart_min;
    while (!stopping.load()) {
      if (ctx.fence && !ctx.fence()) {
        pump_for(milliseconds(250));  // not the lease holder (any more): do not run the command
        continue;
      }
      const auto started_at = Clock::now();
      std::string how = run_once();
      if (stopping.load()) break;
      if (Clock::now() - started_at > std::chrono::minutes(1)) backoff = options.restart_min;
      log::info("exec command ended; restarting it", {{"flow", flow()},
                                                      {"command", joined(spec.command)},
                                                      {"how", how},
                                                      {"restart_in_ms", std::to_string(backoff.count())}});
      pump_for(backoff);
      backoff = std::min(backoff * 2, options.restart_max);
    }
    // Stopping: writes in flight get a short grace so their lines are not needlessly lost.
    const auto until = Clock::now() + kStopPublishGrace;
    while (in_flight > retrying.size() && Clock::now() < until) {
      pollfd p{mailbox->event_fd(), POLLIN, 0};
      ::poll(&p, 1, 20);
      if (p.revents & POLLIN) mailbox->drain_fd();
      pump_mailbox();
    }
    if (in_flight > 0) {
      log::warn("exec source stopped with lines not stored", {{"flow", flow()}, {"count", std::to_string(in_flight)}});
    }
    retrying.clear();
  }

  // Waits `d` (or until stop) while finishing writes of lines already read.
  void pump_for(milliseconds d) {
    const auto until = Clock::now() + d;
    while (!stopping.load() && Clock::now() < until) {
      pump_mailbox();
      run_due_retries();
      pollfd p{mailbox->event_fd(), POLLIN, 0};
      ::poll(&p, 1, poll_timeout(until));
      if (p.revents & POLLIN) mailbox->drain_fd();
    }
  }

  int poll_timeout(Clock::time_point until) const {
    auto t = until;
    for (const auto& p : retrying) t = std::min(t, p->retry_at);
    auto ms = std::chrono::duration_cast<milliseconds>(t - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(ms, 0, 1000));
  }

  void pump_mailbox() {
    for (auto& c : mailbox->take()) {
      if (c.status) {
        --in_flight;
        counters.published.fetch_add(1, std::memory_order_relaxed);
        if (publish_failing) {
          publish_failing = false;
          log::info("exec source writes to JetStream again", {{"flow", flow()}});
        }
        continue;
      }
      if (c.status.code() == Status::Code::kTooLarge) {
        // Over the NATS server's max_payload: no retry can store it (nor a dead letter,
        // which carries the body).
        --in_flight;
        log::error("exec: output line dropped: it can never be stored",
                   {{"flow", flow()}, {"reason", c.status.message()}});
        continue;
      }
      if (!publish_failing) {
        publish_failing = true;
        log::warn("exec source cannot write to JetStream; holding the command's output and retrying",
                  {{"flow", flow()}, {"error", c.status.message()}});
      }
      counters.retries.fetch_add(1, std::memory_order_relaxed);
      c.item->retry_at = Clock::now() + write_retry_delay(c.item->attempts);
      retrying.push_back(std::move(c.item));
    }
  }

  void run_due_retries() {
    if (retrying.empty() || stopping.load()) return;
    const auto now = Clock::now();
    auto it = std::partition(retrying.begin(), retrying.end(), [&](const auto& p) { return p->retry_at > now; });
    std::vector<std::shared_ptr<Pending>> due(std::make_move_iterator(it), std::make_move_iterator(retrying.end()));
    retrying.erase(it, retrying.end());
    for (auto& p : due) submit(p);
  }

  void submit(const std::shared_ptr<Pending>& p) {
    ++p->attempts;
    IngestEvent copy = p->event;
    auto done = [mb = mailbox, p](const Status& s, const std::string&) { mb->post(p, s); };
    if (!p->reject_reason.empty()) {
      ctx.ingest->reject(std::move(copy), p->reject_reason, options.publish_timeout, std::move(done));
      return;
    }
    ctx.ingest->publish(std::move(copy), options.publish_timeout, std::move(done));
  }

  bool window_open() const { return in_flight < options.window; }

  // Turns one stdout line into a write. False when the lease is gone (the line waits).
  bool take_line(const Line& line, const std::string& run_id) {
    counters.lines.fetch_add(1, std::memory_order_relaxed);
    if (line.oversized) {
      counters.oversized.fetch_add(1, std::memory_order_relaxed);
      log::error("exec: output line over max_line, dropped", {{"flow", flow()},
                                                              {"line", std::to_string(line.number)},
                                                              {"bytes", std::to_string(line.length)},
                                                              {"max_line", std::to_string(spec.max_line)}});
      return true;
    }
    if (line.text.find_first_not_of(" \t") == std::string::npos) return true;
    auto p = std::make_shared<Pending>();
    bool was_json = true;
    p->event.body = exec_event_body(line.text, spec.format != "text", &was_json, ctx.max_depth, &p->reject_reason);
    if (!p->reject_reason.empty()) p->event.body = line.text;  // dead-lettered as written
    if (!was_json) {
      const uint64_t n = counters.not_json.fetch_add(1, std::memory_order_relaxed);
      if (n < 10 || n % 1000 == 0) {
        log::warn("exec: output line is not JSON; kept as {\"line\": text}",
                  {{"flow", flow()}, {"line", std::to_string(line.number)}, {"seen", std::to_string(n + 1)}});
      }
    }
    p->event.id = flow() + "-exec-" + run_id + "-" + std::to_string(line.number);
    if (ctx.fence) {
      auto fence = ctx.fence();
      if (fence) p->event.headers.emplace_back("Weir-Fence", std::to_string(*fence));
    }
    ++in_flight;
    submit(p);
    return true;
  }

  std::string new_run_id() {
    const int64_t ms = wall_ms();
    char buf[40];
    std::snprintf(buf, sizeof buf, "%llx%04llx", static_cast<unsigned long long>(ms),
                  static_cast<unsigned long long>(rng() & 0xffff));
    return buf;
  }

  Status spawn(int* out_fd, int* err_fd) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return Status::internal(std::string("pipe: ") + std::strerror(errno));
    if (::pipe2(err, O_CLOEXEC) != 0) {
      ::close(out[0]);
      ::close(out[1]);
      return Status::internal(std::string("pipe: ") + std::strerror(errno));
    }
    int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    std::vector<char*> argv;
    for (auto& a : spec.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    // The environment allowlist (`env:`), built before fork: the child only execs.
    std::vector<std::string> env_strings;
    for (const auto& names : {std::vector<std::string>{"PATH", "HOME", "LANG"}, spec.env}) {
      for (const auto& name : names) {
        const char* v = std::getenv(name.c_str());
        std::string entry = name + "=";
        bool dup = false;
        for (const auto& e : env_strings) dup = dup || e.compare(0, entry.size(), entry) == 0;
        if (v && !dup) env_strings.push_back(entry + v);
      }
    }
    std::vector<char*> envp;
    envp.reserve(env_strings.size() + 1);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid == 0) {
      // The guard (ADR 0285): leads the command's process group, so that stop() reaches
      // what the command starts too (a shell's `sleep 600 &`), and kills that group if
      // weir dies without stopping the source.
      ::setpgid(0, 0);
      guard_command(parent, program.c_str(), argv.data(), envp.data(), devnull, out[1], err[1]);
    }
    int fork_errno = errno;
    ::close(out[1]);
    ::close(err[1]);
    if (devnull >= 0) ::close(devnull);
    if (pid < 0) {
      ::close(out[0]);
      ::close(err[0]);
      return Status::internal(std::string("fork: ") + std::strerror(fork_errno));
    }
    child = pid;  // the guard, which exits as the command did
    // Also here: whichever of parent and child runs first, the group exists before a signal.
    ::setpgid(pid, pid);
    group = pid;
    pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));  // -1 on old kernels: waitpid polling
    set_nonblocking(out[0]);
    set_nonblocking(err[0]);
    *out_fd = out[0];
    *err_fd = err[0];
    return Status::ok();
  }

  // True once the child has been reaped; *status its wait status.
  bool reap(bool block, int* status) {
    if (child < 0) return true;
    pid_t r;
    do {
      r = ::waitpid(child, status, block ? 0 : WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r == 0) return false;
    child = -1;
    if (pidfd >= 0) {
      ::close(pidfd);
      pidfd = -1;
    }
    return true;
  }

  // `sig` to the command's process group (to the command alone if the group is gone).
  void signal_group(int sig) const {
    if (group > 0 && ::kill(-group, sig) == 0) return;
    if (child > 0) ::kill(child, sig);
  }

  // SIGTERM to the command's group, wait stop_grace, SIGKILL; always reaps the command.
  // Then SIGKILL to what is left of its group (a process that ignored SIGTERM, or one
  // that outlived the command): nothing it started runs on after the source stops.
  void terminate(int* status) {
    if (child < 0) {
      kill_leftovers();
      return;
    }
    signal_group(SIGTERM);
    const auto until = Clock::now() + options.stop_grace;
    while (Clock::now() < until) {
      if (reap(false, status)) {
        kill_leftovers();
        return;
      }
      if (pidfd >= 0) {
        pollfd p{pidfd, POLLIN, 0};
        ::poll(&p, 1, 50);
      } else {
        std::this_thread::sleep_for(milliseconds(20));
      }
    }
    log::warn("exec command ignored SIGTERM; killing it", {{"flow", flow()}, {"pid", std::to_string(child)}});
    signal_group(SIGKILL);
    reap(true, status);
    kill_leftovers();
  }

  // SIGKILL to the last command's process group, if any of it is left. Its ID cannot be
  // taken by a new process while any member lives (Linux keeps a PGID in use).
  void kill_leftovers() {
    if (group > 0) ::kill(-group, SIGKILL);
    group = -1;
  }

  // One run of the command: start it, read until it has exited and its output is drained
  // (or the source stops). Returns how it ended, for the log.
  std::string run_once() {
    int out_fd = -1, err_fd = -1;
    if (Status s = spawn(&out_fd, &err_fd); !s) return "not started: " + s.message();
    counters.runs.fetch_add(1, std::memory_order_relaxed);
    const std::string run_id = new_run_id();
    log::info("exec command started",
              {{"flow", flow()}, {"command", joined(spec.command)}, {"pid", std::to_string(child)}});
    LineSplitter out_lines(static_cast<size_t>(spec.max_line));
    LineSplitter err_lines(kMaxStderrLine);
    std::deque<Line> waiting;  // read from stdout, not yet handed to the bus
    std::vector<Line> scratch;
    std::vector<char> buf(kReadChunk);
    bool exited = false;
    int status = 0;
    std::optional<Clock::time_point> exited_at;
    auto close_fd = [](int& fd) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    };
    auto stderr_lines = [&](std::vector<Line>& lines) {
      for (const auto& l : lines) {
        if (l.oversized) {
          log::warn("exec stderr", {{"flow", flow()}, {"line", "(" + std::to_string(l.length) + " bytes, not shown)"}});
        } else if (!l.text.empty()) {
          log::warn("exec stderr", {{"flow", flow()}, {"line", l.text}});
        }
      }
      lines.clear();
    };

    while (!stopping.load()) {
      pump_mailbox();
      run_due_retries();
      const bool lease_ok = !ctx.fence || ctx.fence().has_value();
      while (lease_ok && !waiting.empty() && window_open()) {
        take_line(waiting.front(), run_id);
        waiting.pop_front();
      }
      if (exited && out_fd < 0 && err_fd < 0 && waiting.empty()) break;
      if (exited && exited_at && Clock::now() - *exited_at > kAfterExitDrain && (out_fd >= 0 || err_fd >= 0)) {
        log::warn("exec command exited but its output is still open (a process it left behind?); closing it",
                  {{"flow", flow()}});
        if (out_fd >= 0) {
          out_lines.finish(&scratch);
          for (auto& l : scratch) waiting.push_back(std::move(l));
          scratch.clear();
        }
        close_fd(out_fd);
        close_fd(err_fd);
        continue;
      }
      pollfd p[4];
      int n = 0;
      int i_out = -1, i_err = -1, i_pid = -1;
      if (out_fd >= 0 && lease_ok && waiting.empty() && window_open()) {
        i_out = n;
        p[n++] = {out_fd, POLLIN, 0};
      }
      if (err_fd >= 0) {
        i_err = n;
        p[n++] = {err_fd, POLLIN, 0};
      }
      if (!exited && pidfd >= 0) {
        i_pid = n;
        p[n++] = {pidfd, POLLIN, 0};
      }
      p[n++] = {mailbox->event_fd(), POLLIN, 0};
      int timeout = poll_timeout(Clock::now() + milliseconds(exited || pidfd < 0 || !lease_ok ? 100 : 1000));
      if (::poll(p, static_cast<nfds_t>(n), timeout) < 0 && errno != EINTR) break;
      if (p[n - 1].revents & POLLIN) mailbox->drain_fd();
      if (i_out >= 0 && p[i_out].revents) {
        ssize_t r = ::read(out_fd, buf.data(), buf.size());
        if (r > 0) {
          out_lines.feed(std::string_view(buf.data(), static_cast<size_t>(r)), &scratch);
          for (auto& l : scratch) waiting.push_back(std::move(l));
          scratch.clear();
        } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
          out_lines.finish(&scratch);
          for (auto& l : scratch) waiting.push_back(std::move(l));
          scratch.clear();
          close_fd(out_fd);
        }
      }
      if (i_err >= 0 && p[i_err].revents) {
        ssize_t r = ::read(err_fd, buf.data(), buf.size());
        if (r > 0) {
          err_lines.feed(std::string_view(buf.data(), static_cast<size_t>(r)), &scratch);
          stderr_lines(scratch);
        } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
          err_lines.finish(&scratch);
          stderr_lines(scratch);
          close_fd(err_fd);
        }
      }
      if (!exited && ((i_pid >= 0 && p[i_pid].revents) || pidfd < 0)) {
        if (reap(false, &status)) {
          exited = true;
          exited_at = Clock::now();
        }
      }
    }
    std::string how = exited ? describe_exit(status) : "stopped";
    if (!exited) {
      terminate(&status);
      how = "stopped (" + describe_exit(status) + ")";
    } else if (stopping.load()) {
      kill_leftovers();  // the command exited as the source stopped: what it left goes too
    }
    close_fd(out_fd);
    close_fd(err_fd);
    if (!waiting.empty()) {
      log::warn("exec source stopped before writing every line read",
                {{"flow", flow()}, {"lines", std::to_string(waiting.size())}});
    }
    return how;
  }
};

Result<std::unique_ptr<ExecSource>> ExecSource::create(const flows::ExecSourceSpec& spec, ExecSourceOptions options) {
  if (spec.command.empty() || spec.command[0].empty()) return Status::invalid("exec: command must not be empty");
  if (spec.format != "json" && spec.format != "text") {
    return Status::invalid("exec: format must be json or text, got \"" + spec.format + "\"");
  }
  if (spec.max_line < 1) return Status::invalid("exec: max_line must be at least 1 byte");
  std::string program = resolve_program(spec.command[0]);
  if (program.empty()) {
    return Status::invalid("exec: cannot run \"" + spec.command[0] + "\": " +
                           (spec.command[0].find('/') != std::string::npos
                                ? "no such executable file"
                                : "not found in PATH (there is no shell: give the program and its arguments)"));
  }
  auto impl = std::make_unique<Impl>(spec, options);
  impl->program = std::move(program);
  if (impl->mailbox->event_fd() < 0) return Status::internal("exec: cannot create an eventfd");
  return std::unique_ptr<ExecSource>(new ExecSource(std::move(impl)));
}

ExecSource::ExecSource(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ExecSource::~ExecSource() { stop(); }

const ExecSourceCounters& ExecSource::counters() const { return impl_->counters; }

Status ExecSource::start(SourceContext& context) {
  Impl& m = *impl_;
  if (m.started) return Status::invalid("exec: started twice");
  if (!context.ingest) return Status::internal("exec: no ingest");
  m.ctx = context;
  m.stopping = false;
  m.started = true;
  m.thread = std::thread([&m] { m.run(); });
  pthread_setname_np(m.thread.native_handle(), "exec-src");
  return Status::ok();
}

void ExecSource::stop() {
  Impl& m = *impl_;
  if (!m.started) return;
  m.stopping = true;
  m.mailbox->wake();
  if (m.thread.joinable()) m.thread.join();
  m.started = false;
}

Result<std::unique_ptr<Source>> make_exec_source(const flows::ExecSourceSpec& spec, ExecSourceOptions options) {
  auto s = ExecSource::create(spec, options);
  if (!s) return s.status();
  return std::unique_ptr<Source>(std::move(s.value()));
}

}  // namespace weir::connectors

// weir::testing — shared helpers for tests that run real processes on loopback.
//
// Contract:
// - Everything here is for tests only: errors throw std::runtime_error (a failed
//   helper should fail the test loudly), never used on a data path.
// - Process and NatsServer own the child they spawn: the destructor SIGKILLs and
//   reaps it if it still runs, and every child gets PR_SET_PDEATHSIG(SIGKILL), so
//   a crashed or killed test binary leaves nothing behind. Signals go to the
//   child's PID only (never process groups, never by name).
//   PDEATHSIG fires when the *thread* that forked exits: spawn long-lived children
//   from the test's main thread.
// - Thread safety: free functions are safe from any thread (http_request uses
//   its own curl easy handle per call). A Process / NatsServer / HttpClient /
//   TcpClient object is used by one thread at a time.
// - Network only on 127.0.0.1.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <vector>

namespace weir::testing {

using namespace std::chrono_literals;

// Binds 127.0.0.1:0, returns the port the kernel chose, closes the socket.
int free_port();

// Polls cond every `poll` until it returns true (→ true) or `timeout` passes
// (→ false; cond is evaluated one last time at the deadline).
bool wait_until(const std::function<bool()>& cond, std::chrono::milliseconds timeout,
                std::chrono::milliseconds poll = std::chrono::milliseconds(10));

// A fresh directory under $TMPDIR (or /tmp), removed recursively on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // path() + "/" + name
  std::string file(const std::string& name) const;

 private:
  std::string path_;
};

// Writes `content` to `path` (truncates), creating parent directories.
void write_file(const std::string& path, const std::string& content);
// Whole file, "" when it does not exist.
std::string read_file(const std::string& path);

// Threads of process `pid` whose name is `name` (/proc/PID/task/*/comm); -1 when the
// process is gone.
int threads_named(pid_t pid, const std::string& name);
// Every thread of process `pid` by name (/proc/PID/task/*/comm); empty when it is gone.
std::map<std::string, int> thread_names(pid_t pid);
// The nice values of process `pid`'s threads by thread name (field 19 of
// /proc/PID/task/*/stat); empty when it is gone.
std::map<std::string, std::set<int>> thread_nices(pid_t pid);

// A child process started with fork/exec.
class Process {
 public:
  // argv[0] is looked up in PATH when it has no '/'. extra_env is added to (and
  // overrides) this process's environment. stdout+stderr go to log_file when
  // given ("" = inherit the test's). Throws when the binary cannot be executed.
  static Process spawn(std::vector<std::string> argv, std::map<std::string, std::string> extra_env = {},
                       std::string log_file = "");

  Process() = default;
  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();  // SIGKILL + reap if still running

  pid_t pid() const { return pid_; }
  bool running();
  void signal(int sig);  // to this PID only; no-op once it has exited
  // Exit code, or 128+signal when killed by a signal; nullopt on timeout.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);
  // SIGKILL and reap; returns the exit status as wait_exit does.
  int kill_and_wait();
  std::string read_log() const;
  const std::string& log_file() const { return log_file_; }
  // Waits until the log contains `needle`; false on timeout or when the process exited
  // without writing it.
  bool wait_log(const std::string& needle, std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_;
  std::string log_file_;
};

// A throwaway nats-server with JetStream on loopback. The first start binds port 0
// (`-p -1 -m -1`) and reads the ports nats-server chose from its ports file, so no port
// is probed and released first; later starts reuse those ports (clients reconnect to
// the same URL).
class NatsServer {
 public:
  // "" = its own temp dir. `max_file_store` > 0 limits JetStream's file storage (bytes),
  // like a server configured with `max_file_store`; `max_payload` > 0 sets the largest
  // message it takes (bytes; nats-server's default is 1 MiB). Starts and waits for /healthz.
  explicit NatsServer(std::string store_dir = "", int64_t max_file_store = 0, int64_t max_payload = 0);
  ~NatsServer();
  NatsServer(const NatsServer&) = delete;
  NatsServer& operator=(const NatsServer&) = delete;

  std::string url() const;  // nats://127.0.0.1:<port>
  int port() const { return port_; }
  int monitor_port() const { return monitor_port_; }
  const std::string& store_dir() const { return store_dir_; }
  pid_t pid() const { return proc_.pid(); }
  bool running() { return proc_.running(); }
  std::string read_log() const { return proc_.read_log(); }

  void stop();   // SIGTERM, wait (SIGKILL after 10 s)
  void kill();   // SIGKILL, reap
  void start();  // again, same store and same ports; waits for /healthz

 private:
  std::optional<TempDir> own_dir_;
  std::string store_dir_;
  std::string log_file_;
  std::string config_file_;  // set when max_file_store or max_payload is
  int port_ = 0;             // 0 until the first start read the bound port
  int monitor_port_ = 0;
  Process proc_;
};

struct HttpReply {
  int status = 0;  // 0: no HTTP answer (connection refused, reset, timeout); see error
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string error;                           // curl's message when status == 0
  std::string header(const std::string& lower_name) const;
};

// One request on a fresh connection. headers: "Name: value" lines.
HttpReply http_request(const std::string& method, const std::string& url, const std::string& body = "",
                       const std::vector<std::string>& headers = {},
                       std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));

// Like http_request but keeps its connection open between calls (keep-alive),
// as a real webhook sender would. One thread at a time.
class HttpClient {
 public:
  HttpClient();
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;
  HttpReply request(const std::string& method, const std::string& url, const std::string& body = "",
                    const std::vector<std::string>& headers = {},
                    std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));
  // Connections curl opened so far (1 when keep-alive held throughout).
  long connects() const { return connects_; }

 private:
  void* curl_ = nullptr;
  long connects_ = 0;
};

// A raw TCP connection to 127.0.0.1:port for malformed or slow requests.
class TcpClient {
 public:
  explicit TcpClient(int port);  // throws when it cannot connect
  // From source address `from` (another loopback address, 127.0.0.2 say: a second client).
  TcpClient(int port, const std::string& from);
  ~TcpClient();
  TcpClient(const TcpClient&) = delete;
  TcpClient& operator=(const TcpClient&) = delete;
  // Sends all of data; false when the peer has closed / reset.
  bool send(const std::string& data);
  // Reads until the peer closes, `until` appears in what was read, or timeout.
  std::string recv(std::chrono::milliseconds timeout, const std::string& until = "");
  // True when the peer closed (EOF or reset) within timeout; data read meanwhile is
  // appended to *received when given.
  bool wait_closed(std::chrono::milliseconds timeout, std::string* received = nullptr);
  // Sends `head`, then `filler` over and over up to `total` bytes in all, reading at the
  // same time; stops sending as soon as the peer answers or closes. Then waits (up to
  // `timeout` from the start) for the peer to close.
  struct Flood {
    size_t sent = 0;      // bytes sent, head included
    std::string answer;   // everything the peer sent
    bool closed = false;  // the peer closed (EOF or reset) before the timeout
  };
  Flood flood(const std::string& head, const std::string& filler, size_t total, std::chrono::milliseconds timeout);

 private:
  int fd_ = -1;
};

// Listens on 127.0.0.1:port and resets every connection at once (a peer that is
// "up" but broken). A thread accepts; the destructor stops it and frees the port.
class ResettingListener {
 public:
  explicit ResettingListener(int port);  // throws when the port cannot be bound
  ~ResettingListener();
  ResettingListener(const ResettingListener&) = delete;
  ResettingListener& operator=(const ResettingListener&) = delete;
  int accepted() const;  // connections accepted (and reset) so far
  void close();          // stops accepting and frees the port

 private:
  struct State;
  State* state_;
};

// Resident memory and open descriptors of a running process, from /proc (Linux).
struct ProcUsage {
  int64_t rss_kb = -1;  // VmRSS of /proc/PID/status; -1 when the process is gone
  int64_t hwm_kb = -1;  // VmHWM (the peak of VmRSS), likewise
  int fds = -1;         // entries of /proc/PID/fd; -1 when the process is gone
};
ProcUsage proc_usage(pid_t pid);

// A tmpfs of `bytes` mounted on a fresh directory (a small disk to fill up). Needs root
// (CAP_SYS_ADMIN): throws otherwise. Unmounted (lazily, MNT_DETACH) and removed on
// destruction, so a process still holding files in it cannot keep it mounted.
class Tmpfs {
 public:
  explicit Tmpfs(int64_t bytes);
  ~Tmpfs();
  Tmpfs(const Tmpfs&) = delete;
  Tmpfs& operator=(const Tmpfs&) = delete;
  const std::string& path() const { return dir_.path(); }
  int64_t free_bytes() const;  // statvfs: bytes available to a writer

 private:
  TempDir dir_;
};

// Status code of a raw HTTP/1.1 answer ("HTTP/1.1 431 ..."), 0 when none.
int parse_status_line(const std::string& raw);

}  // namespace weir::testing

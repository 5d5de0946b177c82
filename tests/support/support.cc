#include "tests/support/support.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace weir::testing {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(what + (errno ? std::string(": ") + std::strerror(errno) : std::string()));
}

void curl_init_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

int decode_wait_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* reply = static_cast<HttpReply*>(user);
  std::string line(data, size * n);
  // A new status line (after 100-continue or a redirect) starts a fresh header set.
  if (line.rfind("HTTP/", 0) == 0) {
    reply->headers.clear();
    return size * n;
  }
  size_t colon = line.find(':');
  if (colon != std::string::npos) {
    reply->headers[lower(trim(line.substr(0, colon)))] = trim(line.substr(colon + 1));
  }
  return size * n;
}

// Shared by http_request and HttpClient: configures `curl` for one request and runs it.
HttpReply perform(CURL* curl, const std::string& method, const std::string& url, const std::string& body,
                  const std::vector<std::string>& headers, std::chrono::milliseconds timeout) {
  HttpReply reply;
  curl_slist* list = nullptr;
  for (const auto& h : headers) list = curl_slist_append(list, h.c_str());
  // curl adds "Expect: 100-continue" to big bodies; a webhook sender does not wait for it.
  list = curl_slist_append(list, "Expect:");

  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &reply.body);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &reply);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  if (method == "GET") {
    curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, nullptr);
  } else if (method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, nullptr);
  } else {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 0L);
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method == "POST" ? nullptr : method.c_str());
  }

  CURLcode rc = curl_easy_perform(curl);
  if (rc == CURLE_OK) {
    long code = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    reply.status = static_cast<int>(code);
  } else {
    reply.status = 0;
    reply.error = curl_easy_strerror(rc);
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);
  curl_slist_free_all(list);
  return reply;
}

}  // namespace

// ---------------------------------------------------------------- basics

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("free_port: socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    fail("free_port: bind");
  }
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    fail("free_port: getsockname");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

bool wait_until(const std::function<bool()>& cond, std::chrono::milliseconds timeout, std::chrono::milliseconds poll) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(poll);
  }
  return cond();
}

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/weir-test-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) fail("TempDir: mkdtemp " + tmpl);
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string TempDir::file(const std::string& name) const { return path_ + "/" + name; }

void write_file(const std::string& path, const std::string& content) {
  fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("write_file: " + path);
  out << content;
  if (!out) fail("write_file: " + path);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {
// Calls fn(task directory, thread name) for each thread of `pid` that still has a name.
template <typename Fn>
void each_thread(pid_t pid, Fn fn) {
  const std::filesystem::path dir = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return;
  for (const auto& task : it) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    if (std::getline(comm, line)) fn(task.path(), line);
  }
}
}  // namespace

std::map<std::string, int> thread_names(pid_t pid) {
  std::map<std::string, int> names;
  each_thread(pid, [&](const std::filesystem::path&, const std::string& name) { ++names[name]; });
  return names;
}

std::map<std::string, std::set<int>> thread_nices(pid_t pid) {
  std::map<std::string, std::set<int>> nices;
  each_thread(pid, [&](const std::filesystem::path& task, const std::string& name) {
    std::ifstream stat(task / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t close = text.rfind(')');  // the name may hold spaces and parentheses
    if (close == std::string::npos) return;
    std::istringstream fields(text.substr(close + 1));
    std::string field;
    for (int i = 3; i <= 19 && fields >> field; ++i) {  // fields 3..19; 19 is nice
      if (i == 19) nices[name].insert(std::stoi(field));
    }
  });
  return nices;
}

int threads_named(pid_t pid, const std::string& name) {
  if (!std::filesystem::exists("/proc/" + std::to_string(pid) + "/task")) return -1;
  const auto names = thread_names(pid);
  const auto it = names.find(name);
  return it == names.end() ? 0 : it->second;
}

// ---------------------------------------------------------------- Process

Process Process::spawn(std::vector<std::string> argv, std::map<std::string, std::string> extra_env,
                       std::string log_file) {
  if (argv.empty()) throw std::runtime_error("Process::spawn: empty argv");

  // Everything the child needs is built before fork: after fork only
  // async-signal-safe calls are allowed (the test may have threads).
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (auto& [k, v] : extra_env) env[k] = v;
  std::vector<std::string> env_strings;
  env_strings.reserve(env.size());
  for (auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<char*> args;
  for (auto& s : argv) args.push_back(s.data());
  args.push_back(nullptr);

  int log_fd = -1;
  if (!log_file.empty()) {
    log_fd = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) fail("Process::spawn: open log " + log_file);
  }
  // The child reports an exec failure (its errno) through this close-on-exec pipe.
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) fail("Process::spawn: pipe2");

  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    if (log_fd >= 0) ::close(log_fd);
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    fail("Process::spawn: fork");
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
    // Own process group, so a terminal's Ctrl-C reaches the test runner only and
    // the runner's cleanup decides what dies.
    ::setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (log_fd >= 0) {
      ::dup2(log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
    }
    int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::execvpe(args[0], args.data(), envp.data());
    int e = errno;
    [[maybe_unused]] ssize_t w = ::write(err_pipe[1], &e, sizeof e);
    ::_exit(127);
  }
  if (log_fd >= 0) ::close(log_fd);
  ::close(err_pipe[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(err_pipe[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  ::close(err_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    int st;
    ::waitpid(pid, &st, 0);
    errno = child_errno;
    fail("Process::spawn: exec " + argv[0]);
  }

  Process p;
  p.pid_ = pid;
  p.log_file_ = std::move(log_file);
  return p;
}

Process::Process(Process&& other) noexcept { *this = std::move(other); }

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    if (pid_ > 0 && !exit_) kill_and_wait();
    pid_ = other.pid_;
    exit_ = other.exit_;
    log_file_ = std::move(other.log_file_);
    other.pid_ = -1;
    other.exit_.reset();
  }
  return *this;
}

Process::~Process() {
  if (pid_ > 0 && !exit_) kill_and_wait();
}

bool Process::running() {
  if (pid_ <= 0 || exit_) return false;
  int st = 0;
  pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    exit_ = decode_wait_status(st);
    return false;
  }
  return r == 0;
}

void Process::signal(int sig) {
  if (running()) ::kill(pid_, sig);
}

std::optional<int> Process::wait_exit(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return std::nullopt;
  wait_until([&] { return !running(); }, timeout, std::chrono::milliseconds(5));
  return exit_;
}

int Process::kill_and_wait() {
  if (pid_ <= 0) return -1;
  if (exit_) return *exit_;
  ::kill(pid_, SIGKILL);
  int st = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &st, 0);
  } while (r < 0 && errno == EINTR);
  exit_ = r == pid_ ? decode_wait_status(st) : -1;
  return *exit_;
}

std::string Process::read_log() const { return log_file_.empty() ? "" : read_file(log_file_); }

bool Process::wait_log(const std::string& needle, std::chrono::milliseconds timeout) {
  bool found = false;
  wait_until(
      [&] {
        found = read_log().find(needle) != std::string::npos;
        return found || !running();
      },
      timeout);
  // It may have written the line and exited between the two checks.
  return found || read_log().find(needle) != std::string::npos;
}

// ---------------------------------------------------------------- NatsServer

NatsServer::NatsServer(std::string store_dir, int64_t max_file_store, int64_t max_payload) {
  own_dir_.emplace();
  if (store_dir.empty()) store_dir = own_dir_->file("store");
  store_dir_ = std::move(store_dir);
  log_file_ = own_dir_->file("nats-server.log");
  if (max_file_store > 0 || max_payload > 0) {
    config_file_ = own_dir_->file("nats-server.conf");
    std::string conf;
    if (max_payload > 0) conf += "max_payload: " + std::to_string(max_payload) + "\n";
    conf += "jetstream { store_dir: \"" + store_dir_ + "\"";
    if (max_file_store > 0) conf += ", max_file_store: " + std::to_string(max_file_store);
    write_file(config_file_, conf + " }\n");
  }
  start();
}

NatsServer::~NatsServer() { kill(); }

std::string NatsServer::url() const { return "nats://127.0.0.1:" + std::to_string(port_); }

void NatsServer::start() {
  if (proc_.running()) return;
  const bool first = port_ == 0;
  const std::string ports_dir = own_dir_->file("ports");
  std::vector<std::string> argv{"nats-server"};
  if (config_file_.empty()) {
    argv.insert(argv.end(), {"-js", "-sd", store_dir_});
  } else {
    argv.insert(argv.end(), {"-c", config_file_});
  }
  argv.insert(argv.end(), {"-a", "127.0.0.1", "-p", first ? "-1" : std::to_string(port_), "-m",
                           first ? "-1" : std::to_string(monitor_port_)});
  if (first) {
    std::filesystem::create_directories(ports_dir);
    argv.insert(argv.end(), {"--ports_file_dir", ports_dir});
  }
  proc_ = Process::spawn(argv, {}, log_file_);
  if (first) {
    const std::string ports_file = ports_dir + "/nats-server_" + std::to_string(proc_.pid()) + ".ports";
    static const std::regex kNats(R"re("nats":\["nats://[0-9.]+:(\d+)"\])re");
    static const std::regex kMonitor(R"re("monitoring":\["http://[0-9.]+:(\d+)"\])re");
    std::smatch n, m;
    std::string text;
    bool known = wait_until(
        [&] {
          text = std::filesystem::exists(ports_file) ? read_file(ports_file) : "";
          return (std::regex_search(text, n, kNats) && std::regex_search(text, m, kMonitor)) || !proc_.running();
        },
        std::chrono::seconds(15), std::chrono::milliseconds(5));
    if (!known || !std::regex_search(text, n, kNats) || !std::regex_search(text, m, kMonitor)) {
      std::string log = proc_.read_log();
      proc_.kill_and_wait();
      throw std::runtime_error("NatsServer: nats-server wrote no ports file; log:\n" + log);
    }
    port_ = std::stoi(n[1].str());
    monitor_port_ = std::stoi(m[1].str());
  }
  std::string health = "http://127.0.0.1:" + std::to_string(monitor_port_) + "/healthz?js-enabled-only=true";
  bool up = wait_until(
      [&] {
        if (!proc_.running()) return true;
        return http_request("GET", health, "", {}, std::chrono::milliseconds(500)).status == 200;
      },
      std::chrono::seconds(15), std::chrono::milliseconds(20));
  if (!up || !proc_.running()) {
    std::string log = proc_.read_log();
    proc_.kill_and_wait();
    throw std::runtime_error("NatsServer: nats-server did not become healthy on port " + std::to_string(port_) +
                             "; log:\n" + log);
  }
}

void NatsServer::stop() {
  if (!proc_.running()) return;
  proc_.signal(SIGTERM);
  if (!proc_.wait_exit(std::chrono::seconds(10))) proc_.kill_and_wait();
}

void NatsServer::kill() {
  if (proc_.pid() > 0) proc_.kill_and_wait();
}

// ---------------------------------------------------------------- HTTP

std::string HttpReply::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? "" : it->second;
}

HttpReply http_request(const std::string& method, const std::string& url, const std::string& body,
                       const std::vector<std::string>& headers, std::chrono::milliseconds timeout) {
  curl_init_once();
  CURL* curl = curl_easy_init();
  if (!curl) throw std::runtime_error("http_request: curl_easy_init");
  curl_easy_setopt(curl, CURLOPT_FORBID_REUSE, 1L);
  HttpReply r = perform(curl, method, url, body, headers, timeout);
  curl_easy_cleanup(curl);
  return r;
}

HttpClient::HttpClient() {
  curl_init_once();
  curl_ = curl_easy_init();
  if (!curl_) throw std::runtime_error("HttpClient: curl_easy_init");
}

HttpClient::~HttpClient() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

HttpReply HttpClient::request(const std::string& method, const std::string& url, const std::string& body,
                              const std::vector<std::string>& headers, std::chrono::milliseconds timeout) {
  auto* curl = static_cast<CURL*>(curl_);
  HttpReply r = perform(curl, method, url, body, headers, timeout);
  long n = 0;
  if (curl_easy_getinfo(curl, CURLINFO_NUM_CONNECTS, &n) == CURLE_OK) connects_ += n;
  return r;
}

// ---------------------------------------------------------------- TCP

TcpClient::TcpClient(int port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) fail("TcpClient: socket");
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd_);
    fd_ = -1;
    fail("TcpClient: connect 127.0.0.1:" + std::to_string(port));
  }
}

TcpClient::TcpClient(int port, const std::string& from) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) fail("TcpClient: socket");
  sockaddr_in src{};
  src.sin_family = AF_INET;
  if (::inet_pton(AF_INET, from.c_str(), &src.sin_addr) != 1 ||
      ::bind(fd_, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) {
    ::close(fd_);
    fd_ = -1;
    fail("TcpClient: bind " + from);
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd_);
    fd_ = -1;
    fail("TcpClient: connect 127.0.0.1:" + std::to_string(port) + " from " + from);
  }
}

TcpClient::Flood TcpClient::flood(const std::string& head, const std::string& filler, size_t total,
                                  std::chrono::milliseconds timeout) {
  Flood out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left_ms = [&] {
    return static_cast<int>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count()));
  };
  char buf[16384];
  size_t off = 0;  // into the piece being sent: head first, then filler
  bool in_head = true;
  bool sending = true;
  while (left_ms() > 0) {
    pollfd p{fd_, static_cast<short>(POLLIN | (sending ? POLLOUT : 0)), 0};
    int r = ::poll(&p, 1, left_ms());
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        out.answer.append(buf, static_cast<size_t>(n));
        sending = false;  // answered: what is still unsent would only be drained
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        out.closed = true;
        return out;
      }
    }
    if (sending && (p.revents & POLLOUT)) {
      const std::string& piece = in_head ? head : filler;
      size_t want = piece.size() - off;
      if (!in_head) want = std::min(want, total - out.sent);
      ssize_t n = ::send(fd_, piece.data() + off, want, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) continue;
        sending = false;  // reset or closed: read what came back
        continue;
      }
      out.sent += static_cast<size_t>(n);
      off += static_cast<size_t>(n);
      if (off == piece.size()) {
        off = 0;
        in_head = false;
      }
      if (out.sent >= total) sending = false;
    }
  }
  return out;
}

TcpClient::~TcpClient() {
  if (fd_ >= 0) ::close(fd_);
}

bool TcpClient::send(const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    off += static_cast<size_t>(n);
  }
  return true;
}

std::string TcpClient::recv(std::chrono::milliseconds timeout, const std::string& until) {
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[16384];
  for (;;) {
    if (!until.empty() && out.find(until) != std::string::npos) break;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

bool TcpClient::wait_closed(std::chrono::milliseconds timeout, std::string* received) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[16384];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return false;
    if (r < 0) return true;
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n == 0) return true;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return true;  // reset counts as closed
    }
    if (received) received->append(buf, static_cast<size_t>(n));
  }
}

struct ResettingListener::State {
  int fd = -1;
  std::atomic<int> accepted{0};
  std::atomic<bool> stop{false};
  std::thread thread;
};

ResettingListener::ResettingListener(int port) : state_(new State) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("ResettingListener: socket");
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 64) != 0) {
    ::close(fd);
    delete state_;
    fail("ResettingListener: bind/listen 127.0.0.1:" + std::to_string(port));
  }
  state_->fd = fd;
  State* st = state_;
  st->thread = std::thread([st] {
    while (!st->stop) {
      pollfd p{st->fd, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int c = ::accept4(st->fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      linger lg{1, 0};  // close with RST, not FIN
      ::setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
      ::close(c);
      ++st->accepted;
    }
  });
}

ResettingListener::~ResettingListener() {
  close();
  delete state_;
}

int ResettingListener::accepted() const { return state_->accepted.load(); }

void ResettingListener::close() {
  state_->stop = true;
  if (state_->thread.joinable()) state_->thread.join();
  if (state_->fd >= 0) {
    ::close(state_->fd);
    state_->fd = -1;
  }
}

int parse_status_line(const std::string& raw) {
  if (raw.rfind("HTTP/1.", 0) != 0) return 0;
  size_t sp = raw.find(' ');
  if (sp == std::string::npos || sp + 4 > raw.size()) return 0;
  return std::atoi(raw.substr(sp + 1, 3).c_str());
}

// ---------------------------------------------------------------- /proc, tmpfs

ProcUsage proc_usage(pid_t pid) {
  ProcUsage u;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) u.rss_kb = std::atoll(line.c_str() + 6);
    if (line.rfind("VmHWM:", 0) == 0) u.hwm_kb = std::atoll(line.c_str() + 6);
  }
  std::error_code ec;
  int n = 0;
  for (fs::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec), end; !ec && it != end; it.increment(ec)) {
    ++n;
  }
  if (!ec) u.fds = n;
  return u;
}

Tmpfs::Tmpfs(int64_t bytes) {
  const std::string options = "size=" + std::to_string(bytes) + ",mode=0700";
  if (::mount("tmpfs", dir_.path().c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
    fail("Tmpfs: mount -t tmpfs -o " + options + " " + dir_.path() + " (needs root)");
  }
}

Tmpfs::~Tmpfs() { ::umount2(dir_.path().c_str(), MNT_DETACH); }

int64_t Tmpfs::free_bytes() const {
  struct statvfs st {};
  if (::statvfs(dir_.path().c_str(), &st) != 0) fail("Tmpfs: statvfs " + dir_.path());
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
}

}  // namespace weir::testing

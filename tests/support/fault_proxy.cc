#include "tests/support/fault_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <list>
#include <random>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <vector>

#include "runtime/base/thread_annotations.h"  // header-only: the lock annotations (ADR 0210)

namespace weir::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Reading stops while this much is buffered for the other side (backpressure to the
// sender through TCP, never an unbounded buffer).
constexpr size_t kMaxBuffered = 1 << 20;
constexpr size_t kReadChunk = 64 << 10;
// How long a cut connection's client side may take to close after its FIN.
constexpr auto kLinger = std::chrono::seconds(2);

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("FaultProxy: " + what + ": " + std::strerror(errno));
}

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Where a cut fell, as FaultProxyCounts counts it.
enum class Where { kBetween, kProtocolLine, kControlLine, kHeader, kPayload, kTrailer };

// Follows the server→client half of the NATS client protocol (INFO, MSG, HMSG, PING, PONG,
// +OK, -ERR; docs.nats.io "Client Protocol") just far enough to say where a byte offset
// falls: lines end in CRLF; a `MSG <subject> <sid> [reply] <size>` line is followed by
// <size> payload bytes and CRLF; an `HMSG <subject> <sid> [reply] <hdr> <total>` line by
// <hdr> header bytes, <total>-<hdr> payload bytes and CRLF.
class ProtocolTracker {
 public:
  void feed(std::string_view bytes) {
    while (!bytes.empty()) {
      switch (state_) {
        case State::kLine: {
          const size_t nl = bytes.find('\n');
          const size_t take = nl == std::string_view::npos ? bytes.size() : nl + 1;
          // Control lines are short; only the start of a long INFO line is kept.
          if (line_.size() < kMaxLine) line_.append(bytes.substr(0, std::min(take, kMaxLine - line_.size())));
          line_len_ += take;
          bytes.remove_prefix(take);
          if (nl != std::string_view::npos) end_line();
          break;
        }
        case State::kHeader:
        case State::kPayload:
        case State::kTrailer: {
          const auto take = static_cast<size_t>(std::min<int64_t>(left_, static_cast<int64_t>(bytes.size())));
          left_ -= static_cast<int64_t>(take);
          bytes.remove_prefix(take);
          if (left_ == 0) next_part();
          break;
        }
      }
    }
  }

  // Where the stream stands after the bytes fed so far.
  Where where() const {
    switch (state_) {
      case State::kLine:
        if (line_len_ == 0) return Where::kBetween;
        // Of the server's verbs only MSG and HMSG start with M or H.
        return line_[0] == 'M' || line_[0] == 'H' ? Where::kControlLine : Where::kProtocolLine;
      case State::kHeader: return Where::kHeader;
      case State::kPayload: return Where::kPayload;
      case State::kTrailer: return Where::kTrailer;
    }
    return Where::kBetween;
  }

 private:
  enum class State { kLine, kHeader, kPayload, kTrailer };
  static constexpr size_t kMaxLine = 4096;

  void end_line() {
    std::vector<std::string_view> tokens;
    std::string_view rest(line_);
    while (!rest.empty()) {
      const size_t b = rest.find_first_not_of(" \t\r\n");
      if (b == std::string_view::npos) break;
      rest.remove_prefix(b);
      const size_t e = std::min(rest.find_first_of(" \t\r\n"), rest.size());
      tokens.push_back(rest.substr(0, e));
      rest.remove_prefix(e);
    }
    auto number = [](std::string_view t) { return std::strtoll(std::string(t).c_str(), nullptr, 10); };
    if (!tokens.empty() && tokens[0] == "MSG" && tokens.size() >= 4) {
      header_ = 0;
      payload_ = number(tokens.back());
      state_ = State::kHeader;
      left_ = 0;
      next_part();
    } else if (!tokens.empty() && tokens[0] == "HMSG" && tokens.size() >= 5) {
      header_ = number(tokens[tokens.size() - 2]);
      payload_ = number(tokens.back()) - header_;
      state_ = State::kHeader;
      left_ = header_;
      if (left_ == 0) next_part();
    }
    // Last: the tokens point into line_.
    line_.clear();
    line_len_ = 0;
  }

  // Moves on from a finished part (header block, payload, trailer) to the next.
  void next_part() {
    while (left_ == 0) {
      if (state_ == State::kHeader) {
        state_ = State::kPayload;
        left_ = payload_;
      } else if (state_ == State::kPayload) {
        state_ = State::kTrailer;
        left_ = 2;
      } else {
        state_ = State::kLine;
        return;
      }
    }
  }

  State state_ = State::kLine;
  std::string line_;     // the current line's first bytes
  size_t line_len_ = 0;  // its length so far
  int64_t header_ = 0, payload_ = 0, left_ = 0;
};

// Bytes read from one side and not yet written to the other.
struct Pending {
  std::string bytes;
  size_t head = 0;  // bytes[0, head) were written

  size_t size() const { return bytes.size() - head; }
  bool empty() const { return size() == 0; }
  void append(std::string_view more) {
    if (head > 0 && head == bytes.size()) bytes.clear(), head = 0;
    bytes.append(more);
  }
  // Writes what it can to fd; false on an error other than "would block".
  bool write_to(int fd, int64_t& counter) {
    while (!empty()) {
      const ssize_t n = ::send(fd, bytes.data() + head, size(), MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      head += static_cast<size_t>(n);
      counter += n;
    }
    bytes.clear();
    head = 0;
    return true;
  }
};

struct Conn {
  int client = -1, server = -1;
  bool connecting = true;  // the connect to the server is in progress
  bool client_eof = false, server_eof = false;
  Pending to_client, to_server;
  int64_t server_bytes = 0;  // read from the server so far
  int64_t cut_at = -1;       // cut once server_bytes reaches it; -1: not armed
  bool cut = false;          // cut: the server side is closed, to_client drains, then FIN
  bool lingering = false;    // FIN sent to the client; reading until it closes
  Clock::time_point linger_until;
  ProtocolTracker tracker;
};

}  // namespace

std::string FaultProxyCounts::describe() const {
  return "cuts " + std::to_string(cuts) + " (between elements " + std::to_string(between) + ", protocol line " +
         std::to_string(protocol_line) + ", MSG/HMSG line " + std::to_string(control_line) + ", header block " +
         std::to_string(header) + ", payload " + std::to_string(payload) + ", CRLF after payload " +
         std::to_string(trailer) + "), connections " + std::to_string(accepted) + ", bytes server→client " +
         std::to_string(server_to_client_bytes) + ", client→server " + std::to_string(client_to_server_bytes);
}

struct FaultProxy::Impl {
  int target_port = 0;
  int port = 0;
  uint64_t seed = 0;
  int listen_fd = -1;
  int wake[2] = {-1, -1};  // a byte on wake[1] interrupts poll() (commands, stop)
  std::atomic<bool> stop{false};

  mutable Mutex mu;
  FaultProxyCounts counts GUARDED_BY(mu);
  // A command for the pump thread: arm (cuts_wanted > 0) or disarm.
  bool command GUARDED_BY(mu) = false;
  int cuts_wanted GUARDED_BY(mu) = 0;
  int64_t max_offset GUARDED_BY(mu) = 0;

  // Pump thread only.
  std::list<Conn> conns;
  std::mt19937_64 rng;
  int cuts_left = 0;  // cuts still to make in this round; 0: not cutting
  int64_t round_max = 0;
  std::thread pump;

  void notify() const {
    const char b = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake[1], &b, 1);  // a full pipe already wakes it
  }

  void arm(Conn& c) {
    if (cuts_left <= 0 || c.cut) return;
    c.cut_at = c.server_bytes + std::uniform_int_distribution<int64_t>(1, round_max)(rng);
  }

  void take_command() {
    bool has = false;
    int wanted = 0;
    int64_t max = 0;
    {
      MutexLock lock(mu);
      std::swap(has, command);
      wanted = cuts_wanted;
      max = max_offset;
    }
    if (!has) return;
    cuts_left = wanted;
    round_max = max;
    for (auto& c : conns) {
      c.cut_at = -1;
      arm(c);
    }
  }

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN: none left (other errors: the client is gone)
      Conn c;
      c.client = fd;
      c.server = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      const sockaddr_in to = loopback(target_port);
      if (c.server < 0 ||
          (::connect(c.server, reinterpret_cast<const sockaddr*>(&to), sizeof to) < 0 && errno != EINPROGRESS)) {
        close_fd(c.server);
        close_fd(c.client);
        continue;
      }
      {
        MutexLock lock(mu);
        ++counts.accepted;
      }
      conns.push_back(std::move(c));
      arm(conns.back());
    }
  }

  void record_cut(Where where) {
    MutexLock lock(mu);
    ++counts.cuts;
    switch (where) {
      case Where::kBetween: ++counts.between; break;
      case Where::kProtocolLine: ++counts.protocol_line; break;
      case Where::kControlLine: ++counts.control_line; break;
      case Where::kHeader: ++counts.header; break;
      case Where::kPayload: ++counts.payload; break;
      case Where::kTrailer: ++counts.trailer; break;
    }
  }

  // Reads what the server sent (up to the cut, when armed).
  void read_server(Conn& c) {
    char buf[kReadChunk];
    while (!c.server_eof && !c.cut && c.to_client.size() < kMaxBuffered) {
      const ssize_t n = ::recv(c.server, buf, sizeof buf, 0);
      if (n == 0) c.server_eof = true;
      if (n <= 0) {
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) c.server_eof = true;
        return;
      }
      std::string_view got(buf, static_cast<size_t>(n));
      if (c.cut_at >= 0 && c.server_bytes + n >= c.cut_at) {
        got = got.substr(0, static_cast<size_t>(c.cut_at - c.server_bytes));
        c.tracker.feed(got);
        c.to_client.append(got);
        c.server_bytes = c.cut_at;
        cut(c);
        return;
      }
      c.tracker.feed(got);
      c.to_client.append(got);
      c.server_bytes += n;
    }
  }

  void cut(Conn& c) {
    record_cut(c.tracker.where());
    c.cut = true;
    c.cut_at = -1;
    close_fd(c.server);
    c.to_server = {};
    if (--cuts_left == 0) {
      for (auto& other : conns) other.cut_at = -1;
    }
  }

  void read_client(Conn& c) {
    char buf[kReadChunk];
    while (!c.client_eof && (c.cut || c.to_server.size() < kMaxBuffered)) {
      const ssize_t n = ::recv(c.client, buf, sizeof buf, 0);
      if (n == 0) c.client_eof = true;
      if (n <= 0) {
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) c.client_eof = true;
        return;
      }
      if (!c.cut) c.to_server.append(std::string_view(buf, static_cast<size_t>(n)));  // a cut one's is dropped
    }
  }

  // Advances one connection after poll(); false when it is finished (both sides closed).
  bool step(Conn& c, short client_ev, short server_ev) {
    int64_t to_client_bytes = 0, to_server_bytes = 0;
    if (c.connecting && server_ev != 0) {
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(c.server, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) return false;  // the server refused: the client sees its connection close
      c.connecting = false;
    }
    if (!c.connecting && !c.cut && c.server >= 0) {
      if ((server_ev & (POLLIN | POLLHUP | POLLERR)) != 0) read_server(c);
      if (c.server >= 0 && !c.to_server.write_to(c.server, to_server_bytes)) c.server_eof = true;
    }
    if ((client_ev & (POLLIN | POLLHUP | POLLERR)) != 0) read_client(c);
    if (!c.lingering && !c.to_client.write_to(c.client, to_client_bytes)) c.client_eof = true;
    {
      MutexLock lock(mu);
      counts.server_to_client_bytes += to_client_bytes;
      counts.client_to_server_bytes += to_server_bytes;
    }
    if (c.cut) {
      if (c.client_eof) return false;
      if (!c.lingering && c.to_client.empty()) {
        // The k bytes are with the kernel; the FIN follows them.
        ::shutdown(c.client, SHUT_WR);
        c.lingering = true;
        c.linger_until = Clock::now() + kLinger;
      }
      return !(c.lingering && Clock::now() >= c.linger_until);
    }
    // One side closed: the other gets what was read from it, then the connection ends.
    if (c.client_eof) return !c.to_server.empty() && !c.server_eof && c.server >= 0;
    if (c.server_eof) return !c.to_client.empty() && !c.client_eof;
    return true;
  }

  void run() {
    std::vector<pollfd> fds;
    std::vector<Conn*> order;
    while (!stop.load()) {
      take_command();
      fds.clear();
      order.clear();
      fds.push_back({wake[0], POLLIN, 0});
      fds.push_back({listen_fd, POLLIN, 0});
      for (auto& c : conns) {
        short ce = 0, se = 0;
        if (!c.client_eof && (c.cut || c.to_server.size() < kMaxBuffered)) ce |= POLLIN;
        if (!c.lingering && !c.to_client.empty()) ce |= POLLOUT;
        if (c.server >= 0) {
          if (c.connecting) {
            se |= POLLOUT;
          } else {
            if (!c.server_eof && c.to_client.size() < kMaxBuffered) se |= POLLIN;
            if (!c.to_server.empty()) se |= POLLOUT;
          }
        }
        fds.push_back({c.client, ce, 0});
        fds.push_back({c.server, se, 0});  // fd -1 is ignored by poll()
        order.push_back(&c);
      }
      if (::poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) return;
      if ((fds[0].revents & POLLIN) != 0) {
        char drain[64];
        while (::read(wake[0], drain, sizeof drain) > 0) {
        }
      }
      take_command();
      size_t i = 2;
      for (Conn* c : order) {
        const short client_ev = fds[i].revents, server_ev = fds[i + 1].revents;
        i += 2;
        if (!step(*c, client_ev, server_ev)) {
          close_fd(c->client);
          close_fd(c->server);
        }
      }
      conns.remove_if([](const Conn& c) { return c.client < 0; });
      if ((fds[1].revents & POLLIN) != 0) accept_all();
    }
  }
};

FaultProxy::FaultProxy(int target_port, uint64_t seed) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.target_port = target_port;
  if (seed == 0) {
    const char* env = std::getenv("WEIR_FAULT_SEED");
    seed = env != nullptr && *env != '\0' ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    if (seed == 0) seed = 1;
  }
  s.seed = seed;
  s.rng.seed(seed);
  if (::pipe2(s.wake, O_NONBLOCK | O_CLOEXEC) < 0) fail("pipe2");
  s.listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s.listen_fd < 0) fail("socket");
  const sockaddr_in any_port = loopback(0);
  if (::bind(s.listen_fd, reinterpret_cast<const sockaddr*>(&any_port), sizeof any_port) < 0) fail("bind");
  if (::listen(s.listen_fd, 64) < 0) fail("listen");
  sockaddr_in bound{};
  socklen_t len = sizeof bound;
  if (::getsockname(s.listen_fd, reinterpret_cast<sockaddr*>(&bound), &len) < 0) fail("getsockname");
  s.port = ntohs(bound.sin_port);
  std::cout << "fault proxy: 127.0.0.1:" << s.port << " -> 127.0.0.1:" << target_port << ", seed " << seed
            << " (WEIR_FAULT_SEED=" << seed << " replays the cut offsets)\n"
            << std::flush;
  s.pump = std::thread([&s] { s.run(); });
}

FaultProxy::~FaultProxy() {
  Impl& s = *impl_;
  s.stop.store(true);
  s.notify();
  if (s.pump.joinable()) s.pump.join();
  for (auto& c : s.conns) {
    close_fd(c.client);
    close_fd(c.server);
  }
  close_fd(s.listen_fd);
  close_fd(s.wake[0]);
  close_fd(s.wake[1]);
}

int FaultProxy::port() const { return impl_->port; }
std::string FaultProxy::url() const { return "nats://127.0.0.1:" + std::to_string(impl_->port); }
uint64_t FaultProxy::seed() const { return impl_->seed; }

void FaultProxy::start_cutting(int n, int64_t max_offset) {
  if (n <= 0 || max_offset < 1) throw std::invalid_argument("FaultProxy::start_cutting: n and max_offset must be >= 1");
  {
    MutexLock lock(impl_->mu);
    impl_->command = true;
    impl_->cuts_wanted = n;
    impl_->max_offset = max_offset;
  }
  impl_->notify();
}

void FaultProxy::stop_cutting() {
  {
    MutexLock lock(impl_->mu);
    impl_->command = true;
    impl_->cuts_wanted = 0;
    impl_->max_offset = 0;
  }
  impl_->notify();
}

FaultProxyCounts FaultProxy::counts() const {
  MutexLock lock(impl_->mu);
  return impl_->counts;
}

}  // namespace weir::testing

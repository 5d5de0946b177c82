#include "connectors/mqtt/mqtt_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace weir::connectors::mqtt {
namespace {

using Clock = std::chrono::steady_clock;

std::string ssl_error_text() {
  unsigned long e = ERR_get_error();
  if (e == 0) return "TLS error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return buf;
}

bool is_ip_literal(const std::string& host) {
  in6_addr a6;
  in_addr a4;
  return inet_pton(AF_INET, host.c_str(), &a4) == 1 || inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

// Waits for `events` on fd until the deadline; false on timeout or error.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int ms = remaining_ms(deadline);
    int r = ::poll(&p, 1, ms);
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

}  // namespace

std::string BrokerAddress::str() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Result<BrokerAddress> parse_broker_url(const std::string& url, flows::schema::Keys schemes) {
  BrokerAddress a;
  auto sep = url.find("://");
  if (sep == std::string::npos) return Status::invalid("broker must be a URL like tcp://host:1883");
  std::string scheme = url.substr(0, sep);
  auto in = [&](flows::schema::Keys list) { return std::find(list.begin(), list.end(), scheme) != list.end(); };
  if (!in(schemes)) {
    std::string names;
    for (std::string_view s : schemes) names += (names.empty() ? "" : ", ") + std::string(s) + "://";
    if (scheme == "ws" || scheme == "wss") {
      return Status::invalid("broker: MQTT over WebSocket (" + scheme + "://) is not supported here; use one of " +
                             names);
    }
    return Status::invalid("broker: unknown scheme " + scheme.substr(0, 16) + "://; expected one of " + names);
  }
  a.tls = in(flows::schema::kMqttTlsSchemes);
  a.websocket = scheme == "ws" || scheme == "wss";
  a.port = a.websocket ? (a.tls ? 443 : 80) : (a.tls ? 8883 : 1883);
  std::string rest = url.substr(sep + 3);
  if (rest.find('@') != std::string::npos) {
    return Status::invalid("broker: credentials in the URL are not accepted; use username_env and password_env");
  }
  if (a.websocket && rest.find('/') != std::string::npos) rest.erase(rest.find('/'));  // ws://host/mqtt
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos || rest.find('?') != std::string::npos) {
    return Status::invalid("broker: the URL must be scheme://host[:port] without a path");
  }
  std::string port_text;
  if (!rest.empty() && rest[0] == '[') {
    auto close = rest.find(']');
    if (close == std::string::npos) return Status::invalid("broker: unterminated [IPv6] host");
    a.host = rest.substr(1, close - 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') return Status::invalid("broker: expected :port after [IPv6] host");
      port_text = rest.substr(close + 2);
    }
  } else {
    auto colon = rest.rfind(':');
    if (colon != std::string::npos) {
      a.host = rest.substr(0, colon);
      port_text = rest.substr(colon + 1);
    } else {
      a.host = rest;
    }
  }
  if (a.host.empty()) return Status::invalid("broker: the URL has no host");
  if (!port_text.empty()) {
    int port = 0;
    for (char c : port_text) {
      if (c < '0' || c > '9' || port > 65535) return Status::invalid("broker: bad port");
      port = port * 10 + (c - '0');
    }
    if (port < 1 || port > 65535) return Status::invalid("broker: port out of range");
    a.port = port;
  }
  return a;
}

// ---- TlsContext -------------------------------------------------------------------------

Result<std::shared_ptr<TlsContext>> TlsContext::create(const TlsSettings& s) {
  std::shared_ptr<TlsContext> t(new TlsContext());
  t->ctx_ = SSL_CTX_new(TLS_client_method());
  if (!t->ctx_) return Status::internal("TLS: " + ssl_error_text());
  SSL_CTX_set_min_proto_version(t->ctx_, TLS1_2_VERSION);
  SSL_CTX_set_mode(t->ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  t->verify_ = !s.insecure_skip_verify;
  if (!s.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(t->ctx_, s.ca_file.c_str(), nullptr) != 1) {
      return Status::invalid("TLS: cannot load ca_file " + s.ca_file + ": " + ssl_error_text());
    }
  } else if (SSL_CTX_set_default_verify_paths(t->ctx_) != 1) {
    return Status::internal("TLS: cannot load the system trust store: " + ssl_error_text());
  }
  if (s.cert_file.empty() != s.key_file.empty()) {
    return Status::invalid("TLS: cert_file and key_file go together");
  }
  if (!s.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(t->ctx_, s.cert_file.c_str()) != 1) {
      return Status::invalid("TLS: cannot load cert_file " + s.cert_file + ": " + ssl_error_text());
    }
    if (SSL_CTX_use_PrivateKey_file(t->ctx_, s.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      return Status::invalid("TLS: cannot load key_file " + s.key_file + ": " + ssl_error_text());
    }
    if (SSL_CTX_check_private_key(t->ctx_) != 1) {
      return Status::invalid("TLS: key_file does not match cert_file");
    }
  }
  SSL_CTX_set_verify(t->ctx_, t->verify_ ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, nullptr);
  return t;
}

TlsContext::~TlsContext() {
  if (ctx_) SSL_CTX_free(ctx_);
}

// ---- Transport --------------------------------------------------------------------------

Result<std::unique_ptr<Transport>> Transport::connect(const BrokerAddress& address, const TlsContext* tls,
                                                      std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(address.port);
  int gai = ::getaddrinfo(address.host.c_str(), port.c_str(), &hints, &res);
  if (gai != 0) {
    return Status::unavailable("cannot resolve " + address.host + ": " + gai_strerror(gai));
  }
  std::unique_ptr<Transport> t(new Transport());
  std::string last = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int r = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (r != 0 && errno == EINPROGRESS) {
      if (!wait_fd(fd, POLLOUT, deadline)) {
        ::close(fd);
        last = "connect timed out";
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      r = err == 0 ? 0 : -1;
      errno = err;
    }
    if (r != 0) {
      last = std::strerror(errno);
      ::close(fd);
      continue;
    }
    t->fd_ = fd;
    break;
  }
  ::freeaddrinfo(res);
  if (t->fd_ < 0) return Status::unavailable("cannot connect to " + address.str() + ": " + last);

  if (address.tls) {
    if (!tls) return Status::internal("TLS broker without a TLS context");
    t->ssl_ = SSL_new(tls->get());
    if (!t->ssl_) return Status::internal("TLS: " + ssl_error_text());
    SSL_set_fd(t->ssl_, t->fd_);
    if (!is_ip_literal(address.host)) SSL_set_tlsext_host_name(t->ssl_, address.host.c_str());
    if (tls->verify()) {
      // The certificate must name the host we dialled (an IP literal must be in its SANs).
      if (is_ip_literal(address.host)) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl_), address.host.c_str());
      } else {
        SSL_set1_host(t->ssl_, address.host.c_str());
      }
    }
    for (;;) {
      ERR_clear_error();
      int r = SSL_connect(t->ssl_);
      if (r == 1) break;
      int e = SSL_get_error(t->ssl_, r);
      short ev = static_cast<short>(e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0);
      if (ev == 0) {
        std::string why = ssl_error_text();
        long vr = SSL_get_verify_result(t->ssl_);
        if (vr != X509_V_OK) why = std::string("certificate verification failed: ") + X509_verify_cert_error_string(vr);
        return Status::unavailable("TLS handshake with " + address.str() + " failed: " + why);
      }
      if (!wait_fd(t->fd_, ev, deadline)) {
        return Status::unavailable("TLS handshake with " + address.str() + " timed out");
      }
    }
  }
  return t;
}

Transport::~Transport() {
  if (ssl_) SSL_free(ssl_);
  if (fd_ >= 0) ::close(fd_);
}

Transport::Io Transport::read(char* buf, size_t cap, size_t* n) {
  *n = 0;
  read_wants_write_ = false;
  if (ssl_) {
    ERR_clear_error();
    size_t got = 0;
    int r = SSL_read_ex(ssl_, buf, cap, &got);
    if (r == 1) {
      *n = got;
      return Io::kOk;
    }
    int e = SSL_get_error(ssl_, r);
    if (e == SSL_ERROR_WANT_READ) return Io::kWouldBlock;
    if (e == SSL_ERROR_WANT_WRITE) {
      read_wants_write_ = true;
      return Io::kWouldBlock;
    }
    if (e == SSL_ERROR_ZERO_RETURN) return Io::kClosed;
    error_ = e == SSL_ERROR_SYSCALL ? (errno ? std::strerror(errno) : "connection closed") : ssl_error_text();
    return e == SSL_ERROR_SYSCALL && errno == 0 ? Io::kClosed : Io::kError;
  }
  for (;;) {
    ssize_t r = ::recv(fd_, buf, cap, 0);
    if (r > 0) {
      *n = static_cast<size_t>(r);
      return Io::kOk;
    }
    if (r == 0) return Io::kClosed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Io::kWouldBlock;
    error_ = std::strerror(errno);
    return Io::kError;
  }
}

Transport::Io Transport::write(const char* buf, size_t size, size_t* n) {
  *n = 0;
  if (size == 0) return Io::kOk;
  if (ssl_) {
    ERR_clear_error();
    size_t put = 0;
    int r = SSL_write_ex(ssl_, buf, size, &put);
    if (r == 1) {
      *n = put;
      return Io::kOk;
    }
    int e = SSL_get_error(ssl_, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return Io::kWouldBlock;
    error_ = e == SSL_ERROR_SYSCALL ? (errno ? std::strerror(errno) : "connection closed") : ssl_error_text();
    return Io::kError;
  }
  for (;;) {
    ssize_t r = ::send(fd_, buf, size, MSG_NOSIGNAL);
    if (r >= 0) {
      *n = static_cast<size_t>(r);
      return Io::kOk;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Io::kWouldBlock;
    error_ = std::strerror(errno);
    return Io::kError;
  }
}

bool Transport::has_buffered_input() const { return ssl_ != nullptr && SSL_pending(ssl_) > 0; }

}  // namespace weir::connectors::mqtt

// The byte stream under the mqtt source's session: TCP, optionally TLS (OpenSSL), on a
// non-blocking socket the session polls itself.
//
// Ownership: a Transport owns its socket and SSL object and closes them in the
// destructor. A TlsContext owns the SSL_CTX (CA, client certificate, verification) and
// is built once when the source starts, so a bad certificate path is a start-up error;
// it must outlive every Transport made with it. Thread safety: one thread uses a
// Transport (the session thread); TlsContext is read-only after creation.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "flows/schema.h"
#include "runtime/base/status.h"

struct ssl_ctx_st;
struct ssl_st;

namespace weir::connectors::mqtt {

struct BrokerAddress {
  std::string host;  // without brackets for IPv6
  int port = 1883;
  bool tls = false;
  bool websocket = false;   // ws:// or wss:// (the sink only: Paho speaks it)
  std::string str() const;  // host:port, for logs (never credentials)
};

// tcp://host[:port], mqtt://… (plain, default port 1883), ssl:// or mqtts://… (TLS, 8883),
// and where `schemes` allows them ws:// (80) and wss:// (443, TLS) with an optional path.
// `schemes` is one of flows/schema.h's lists: the source's own session speaks no
// WebSocket (the default), the sink's Paho does. User info in the URL is refused
// (credentials belong in *_env settings), as are paths on MQTT schemes. Errors never echo
// the URL.
Result<BrokerAddress> parse_broker_url(const std::string& url,
                                       flows::schema::Keys schemes = flows::schema::kMqttSourceSchemes);

struct TlsSettings {
  std::string ca_file;    // "" = the system's default trust store
  std::string cert_file;  // client certificate (PEM), with key_file
  std::string key_file;
  bool insecure_skip_verify = false;
};

class TlsContext {
 public:
  static Result<std::shared_ptr<TlsContext>> create(const TlsSettings& settings);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;
  ssl_ctx_st* get() const { return ctx_; }
  bool verify() const { return verify_; }

 private:
  TlsContext() = default;
  ssl_ctx_st* ctx_ = nullptr;
  bool verify_ = true;
};

class Transport {
 public:
  enum class Io { kOk, kWouldBlock, kClosed, kError };

  // TCP connect (and TLS handshake when `tls` is given) within `timeout`.
  static Result<std::unique_ptr<Transport>> connect(const BrokerAddress& address, const TlsContext* tls,
                                                    std::chrono::milliseconds timeout);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  int fd() const { return fd_; }
  // Up to `cap` bytes into buf; *n = bytes read. kWouldBlock: nothing now (poll the fd).
  Io read(char* buf, size_t cap, size_t* n);
  // Up to `size` bytes from buf; *n = bytes written.
  Io write(const char* buf, size_t size, size_t* n);
  // True when TLS holds decrypted bytes that a poll on the fd would not announce.
  bool has_buffered_input() const;
  // True when the last TLS read could not go on until the socket is writable.
  bool read_wants_write() const { return read_wants_write_; }
  const std::string& last_error() const { return error_; }

 private:
  Transport() = default;
  int fd_ = -1;
  ssl_st* ssl_ = nullptr;
  bool read_wants_write_ = false;
  std::string error_;
};

}  // namespace weir::connectors::mqtt

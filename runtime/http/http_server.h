// A small asynchronous HTTP/1.1 server on Boost.Beast, shared by http-in (ingress)
// and the admin API. Beast lives only in http_server.cc.
//
// Threading: one io thread (run by the caller via `run()`), every connection and
// timer on it. Handlers are called on the io thread and must not block; they answer
// through the Responder, which may be called from any thread exactly once (from another
// thread the answer is posted back to the io thread; on the io thread it is taken at
// once). The request stays valid until then.
//
// Limits: header and body limits answer 431 / 413 and close; a client slower than
// `read_timeout` is disconnected. Keep-alive and TCP_NODELAY are on. The read buffer is
// bounded (max_header + 64 KiB): chunk extensions and the trailer section, which Beast
// must hold whole and counts against neither limit, answer 431 and close past it.
// A connection older than `max_connection_age` is closed after its next answer
// (Connection: close), so a client that trickles requests cannot hold one for ever.
// Framing (RFC 9112, request smuggling): the header block is checked on the raw bytes
// before Beast parses it: a bare LF, a CR without LF or an obs-fold line is a 400 and
// close. Then any Transfer-Encoding other than exactly one `chunked`, Transfer-Encoding
// with Content-Length, or more than one Content-Length (even with equal values) is a
// 400 and close; Beast's own errors (bad chunk sizes, …) are 400 and close.
// Connections: past `max_connections` open ones, or past `max_connections_per_client`
// from one client address, a new connection gets 503 with Retry-After and is closed
// without reading its request (docs/admin-api.md, Ingress answers).
// `check_header`, when set, sees each request once its header is read and before its
// body is: an answer it returns is sent (Connection: close) and the body is never read
// (the admin token, docs/admin-api.md).
// TLS (docs/adr/0305-tls-listeners.md): with a certificate and key the listener speaks
// HTTPS only (TLS 1.2 and 1.3, the ciphers of ADR 0305), through the same session code as
// plain HTTP. The handshake has `read_timeout`; a client that does not speak TLS (a plain
// HTTP request) is closed as soon as OpenSSL sees it. reload_tls() re-reads the files: the
// next connection gets the new certificate, open ones keep theirs.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/loop/io_loop.h"
#include "runtime/base/status.h"

namespace weir {

class HttpRequest {
 public:
  virtual ~HttpRequest() = default;
  virtual std::string_view method() const = 0;
  virtual std::string_view target() const = 0;                       // path and query as sent
  virtual std::string_view path() const = 0;                         // target without the query
  virtual std::string_view header(std::string_view name) const = 0;  // "" when absent
  virtual const std::string& body() const = 0;
  virtual std::string& mutable_body() = 0;  // handlers may move the body out
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  bool close = false;
  static HttpResponse json(int status, std::string body) {
    HttpResponse r;
    r.status = status;
    r.body = std::move(body);
    return r;
  }
  // {"error": message} with the given status.
  static HttpResponse error(int status, std::string_view message);
};

using Responder = std::function<void(HttpResponse)>;
using Handler = std::function<void(HttpRequest& request, Responder respond)>;

struct HttpServerOptions {
  std::string name = "http";              // for logs: "ingress" / "admin"
  std::string listen = "127.0.0.1:8080";  // host:port; port 0 picks a free one
  int64_t max_body = 1 << 20;
  int64_t max_header = 16 * 1024;
  std::chrono::milliseconds read_timeout{10000};
  size_t max_connections = 4096;  // open at once; past it 503 and close
  // Open at once from one client address; past it 503 and close. 0: max_connections / 4
  // (at least 1), so one address cannot take every slot (docs/connectors.md, http-in).
  size_t max_connections_per_client = 0;
  // A keep-alive connection older than this is closed after its next answer.
  std::chrono::milliseconds max_connection_age{300000};
  // Before the body is read: nullopt reads on; an answer refuses the request (closed).
  // The HttpRequest's body is empty here. Called on the io thread.
  std::function<std::optional<HttpResponse>(const HttpRequest& header)> check_header;
  // Both set: HTTPS (PEM files: the certificate chain, leaf first, and its unencrypted key).
  std::string tls_cert_file;
  std::string tls_key_file;
};

// True when the host of a listen address ("host:port") is a loopback address (127/8,
// ::1, "localhost", or empty, which binds 127.0.0.1).
bool is_loopback_listen(std::string_view listen);

// What the raw-byte check of a header block found (exposed for the unit tests).
struct HeaderScan {
  enum State { kNeedMore, kComplete, kBad } state = kNeedMore;
  size_t offset = 0;     // kComplete: length of the header block; kNeedMore: where to resume
  const char* why = "";  // kBad: the reason, for the 400
};
// Scans `data` (a request starting at its request line) from `from` for the end of the
// header block ("\r\n\r\n"), rejecting bare LF, CR without LF and obs-fold.
HeaderScan scan_header_block(std::string_view data, size_t from = 0);

class HttpServer {
 public:
  // The handler sees every request; routing is the handler's business.
  static Result<std::unique_ptr<HttpServer>> create(IoLoop& loop, HttpServerOptions options, Handler handler);
  virtual ~HttpServer() = default;
  virtual std::string address() const = 0;  // host:port actually bound
  virtual void stop_accepting() = 0;        // thread-safe
  virtual size_t open_connections() const = 0;
  virtual bool tls() const = 0;
  // Re-reads the certificate and key (thread-safe). invalid, naming the file, when they do
  // not load or do not match: the certificate in use stays. ok without TLS.
  virtual Status reload_tls() = 0;
};

}  // namespace weir

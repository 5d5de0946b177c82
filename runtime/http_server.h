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
// `read_timeout` is disconnected. Keep-alive and TCP_NODELAY are on.
// Framing (RFC 9112, request smuggling): the header block is checked on the raw bytes
// before Beast parses it: a bare LF, a CR without LF or an obs-fold line is a 400 and
// close. Then any Transfer-Encoding other than exactly one `chunked`, Transfer-Encoding
// with Content-Length, or more than one Content-Length (even with equal values) is a
// 400 and close (spec §6); Beast's own errors (bad chunk sizes, …) are 400 and close.
// Connections: past `max_connections` open ones a new connection gets 503 with
// Retry-After and is closed without reading its request (spec §1.7, §6).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/status.h"

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
  static Result<std::unique_ptr<HttpServer>> create(class IoLoop& loop, HttpServerOptions options, Handler handler);
  virtual ~HttpServer() = default;
  virtual std::string address() const = 0;  // host:port actually bound
  virtual void stop_accepting() = 0;        // thread-safe
  virtual size_t open_connections() const = 0;
};

// The io thread that runs every HttpServer (one per process); also the loop of http-in's
// NATS connection (LoopPublisher).
class IoLoop {
 public:
  // `thread_name`: the io thread's name (at most 15 characters).
  explicit IoLoop(const char* thread_name = "weir-io");
  ~IoLoop();
  // Before start(): the thread runs `steps` nice steps (Linux, per thread) below the thread
  // that calls start(), capped at 19 (ADR 0268). Threads it starts inherit that. 0: equal.
  void set_nice(int steps);
  void start();    // spawns the io thread
  void stop();     // stops and joins, then destroys the attachments
  void* native();  // boost::asio::io_context*

  // The IoLoop whose thread calls this, or nullptr on any other thread.
  static IoLoop* current();
  // A per-loop object of another layer, found by `key` (the address of something of that
  // layer's): made by `make` on first use (nullptr is not kept), then the same object until
  // stop(), which destroys it after the io thread has ended and before the io_context, so
  // its handlers never run on a destroyed object. Any thread. (The HTTP sinks' curl loop
  // rides the sink loop this way: connectors/http/http_sink.cc.)
  std::shared_ptr<void> attachment(const void* key, const std::function<std::shared_ptr<void>()>& make);

  // Work a handler leaves for when it returns, instead of a post: a posted handler costs
  // the loop one more turn, and with it an epoll_wait, per event. A handler that may
  // leave such work (NatsLoop's read handler: the flush of what its messages published,
  // the HTTP sinks' round for what they delivered) holds a Batch while it runs; when the
  // outermost Batch of the thread ends, the work left runs there, in order (work it
  // leaves in turn included). at_batch_end() returns false when no Batch is open on this
  // thread: the caller posts then. `obj` is kept alive until `fn(obj.get())` has run.
  class Batch {
   public:
    Batch();
    ~Batch();
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;
  };
  static bool at_batch_end(void (*fn)(void*), std::shared_ptr<void> obj);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir

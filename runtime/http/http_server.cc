// Beast lives here and nowhere else in the runtime (it costs ~14 s per translation unit).
#include <utility>  // before Asio: Boost 1.74's Asio needs it first under C++20

#include "runtime/http/http_server.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <type_traits>
#include <unordered_map>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <nlohmann/json.hpp>

#include "runtime/base/log.h"
#include "runtime/base/thread_annotations.h"

namespace weir {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using asio::awaitable;
using asio::use_awaitable;

HttpResponse HttpResponse::error(int status, std::string_view message) {
  HttpResponse r;
  r.status = status;
  r.body = nlohmann::json{{"error", std::string(message)}}.dump(-1, ' ', false,
                                                                nlohmann::json::error_handler_t::replace);
  return r;
}

HeaderScan scan_header_block(std::string_view s, size_t from) {
  for (size_t i = from; i < s.size(); ++i) {
    char c = s[i];
    if (c == '\n') return {HeaderScan::kBad, i, "bare LF line ending"};  // a valid LF is skipped with its CR
    if (c != '\r') continue;
    if (i + 1 >= s.size()) return {HeaderScan::kNeedMore, i, ""};
    if (s[i + 1] != '\n') return {HeaderScan::kBad, i, "CR without LF"};
    if (i + 2 >= s.size()) return {HeaderScan::kNeedMore, i, ""};
    char next = s[i + 2];
    if (next == ' ' || next == '\t') return {HeaderScan::kBad, i, "obs-fold (a header line starting with whitespace)"};
    if (next == '\r') {
      if (i + 3 >= s.size()) return {HeaderScan::kNeedMore, i, ""};
      if (s[i + 3] != '\n') return {HeaderScan::kBad, i + 2, "CR without LF"};
      return {HeaderScan::kComplete, i + 4, ""};
    }
    ++i;  // past the LF
  }
  return {HeaderScan::kNeedMore, s.size(), ""};
}

bool is_loopback_listen(std::string_view listen) {
  std::string host;
  if (!listen.empty() && listen.front() == '[') {  // [v6] or [v6]:port
    auto close = listen.find(']');
    if (close == std::string_view::npos) return false;
    host = listen.substr(1, close - 1);
  } else {
    host = listen.substr(0, std::min(listen.rfind(':'), listen.size()));
  }
  if (host.empty() || host == "localhost") return true;
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  return !ec && addr.is_loopback();
}

namespace {

using TlsStream = beast::ssl_stream<tcp::socket>;
template <class Stream>
constexpr bool kIsTls = std::is_same_v<Stream, TlsStream>;

// TLS 1.2's suites (docs/adr/0305-tls-listeners.md): ECDHE key exchange and AEAD ciphers
// only, as Mozilla's "intermediate" server profile; TLS 1.3 keeps OpenSSL's default suites
// (all of them AEAD with forward secrecy).
constexpr const char* kTls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

// A server context with the listener's certificate: invalid naming the file when it does
// not load (no file contents are quoted).
Result<std::shared_ptr<asio::ssl::context>> make_tls_context(const std::string& server, const std::string& cert,
                                                             const std::string& key) {
  using ctx_t = asio::ssl::context;
  auto ctx = std::make_shared<ctx_t>(ctx_t::tls_server);
  ctx->set_options(ctx_t::default_workarounds | ctx_t::no_sslv2 | ctx_t::no_sslv3 | ctx_t::no_tlsv1 |
                   ctx_t::no_tlsv1_1 | ctx_t::no_compression | ctx_t::single_dh_use);
  SSL_CTX* native = ctx->native_handle();
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  SSL_CTX_set_options(native, SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_cipher_list(native, kTls12Ciphers);
  // An encrypted key fails to load instead of OpenSSL asking for its passphrase on the
  // terminal (a service has none).
  ctx->set_password_callback([](std::size_t, ctx_t::password_purpose) { return std::string(); });
  const std::string what = server + " TLS: ";
  boost::system::error_code ec;
  ctx->use_certificate_chain_file(cert, ec);
  if (ec) {
    ERR_clear_error();
    return Status::invalid(what + "cannot load cert_file " + cert + ": " + ec.message());
  }
  ctx->use_private_key_file(key, ctx_t::pem, ec);
  if (ec) {
    ERR_clear_error();
    return Status::invalid(what + "cannot load key_file " + key + " (an unencrypted PEM key): " + ec.message());
  }
  if (SSL_CTX_check_private_key(native) != 1) {
    ERR_clear_error();
    return Status::invalid(what + "key_file " + key + " is not the key of cert_file " + cert);
  }
  return ctx;
}

// The request line and header of a Beast request, as HttpRequest sees them; the body is
// the subclass's.
class BeastHeaders : public HttpRequest {
 public:
  explicit BeastHeaders(const http::request<http::string_body>& r) : req_(r) {
    std::string_view t(req_.target().data(), req_.target().size());
    target_ = t;
    path_ = t.substr(0, t.find('?'));
  }
  BeastHeaders(const BeastHeaders&) = delete;  // it views a request it does not own
  BeastHeaders& operator=(const BeastHeaders&) = delete;
  std::string_view method() const override {
    auto m = req_.method_string();
    return {m.data(), m.size()};
  }
  std::string_view target() const override { return target_; }
  std::string_view path() const override { return path_; }
  std::string_view header(std::string_view name) const override {
    auto it = req_.find(beast::string_view(name.data(), name.size()));
    if (it == req_.end()) return {};
    auto v = it->value();
    return {v.data(), v.size()};
  }

 private:
  const http::request<http::string_body>& req_;
  std::string_view target_, path_;
};

// Holds the request for BeastRequest, constructed before the BeastHeaders that views it.
struct OwnedBeastRequest {
  http::request<http::string_body> req;
};

class BeastRequest final : private OwnedBeastRequest, public BeastHeaders {
 public:
  explicit BeastRequest(http::request<http::string_body>&& r)
      : OwnedBeastRequest{std::move(r)}, BeastHeaders(OwnedBeastRequest::req) {}
  const std::string& body() const override { return req.body(); }
  std::string& mutable_body() override { return req.body(); }
  bool keep_alive() const { return req.keep_alive(); }
  unsigned version() const { return req.version(); }
};

// A request whose header is read and whose body is not (yet): what check_header sees.
class HeaderView final : public BeastHeaders {
 public:
  using BeastHeaders::BeastHeaders;
  const std::string& body() const override { return empty_; }
  std::string& mutable_body() override { return empty_; }

 private:
  std::string empty_;
};

// Waits on the io thread for a Responder that may fire on any thread.
struct ResponseSlot {
  explicit ResponseSlot(const asio::any_io_executor& ex) : timer(ex) {
    timer.expires_at(asio::steady_timer::time_point::max());
  }
  asio::steady_timer timer;
  std::optional<HttpResponse> response;
};

// A connection's deadline (http.read_timeout, the answer's write) without a timer
// operation per read or write. Beast's tcp_stream cancels its timer when each of its reads
// and writes completes, and every cancel runs a handler through the io_context: two extra
// turns of the loop per request, each one an epoll_wait (ADR 0261). Here
// moving the deadline only stores a time; one timer per connection wakes at the deadline
// it was armed for, re-arms if the deadline has moved on, and past it closes the socket,
// which ends the pending read or write with operation_aborted. io thread only.
class Deadline : public std::enable_shared_from_this<Deadline> {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Deadline(tcp::socket& socket) : socket_(socket), timer_(socket.get_executor()) {}
  void expires_after(Clock::duration d) {
    at_ = Clock::now() + d;
    // A later deadline waits for the armed wake-up (which re-arms); an earlier one (the
    // refusal's 500 ms drain after its 2 s write) re-arms now.
    if (!stopped_ && (!armed_ || at_ < armed_at_)) arm();
  }
  void expires_never() { at_ = Clock::time_point::max(); }
  // Before the socket goes: a wake-up already queued finds `stopped_` and does nothing.
  void stop() {
    stopped_ = true;
    if (armed_) timer_.cancel();
  }

 private:
  void arm() {
    armed_ = true;
    armed_at_ = at_;
    // Setting the expiry cancels a pending wait; its handler sees a stale `wait`.
    timer_.expires_at(at_);
    timer_.async_wait([self = shared_from_this(), wait = ++waits_](const boost::system::error_code& ec) {
      if (wait != self->waits_) return;
      self->armed_ = false;
      if (ec || self->stopped_ || self->at_ == Clock::time_point::max()) return;
      if (Clock::now() < self->at_) {
        self->arm();
        return;
      }
      boost::system::error_code ignored;
      self->socket_.close(ignored);
    });
  }

  tcp::socket& socket_;
  asio::steady_timer timer_;
  Clock::time_point at_ = Clock::time_point::max();
  Clock::time_point armed_at_{};  // the expiry of the pending wait, while armed_
  uint64_t waits_ = 0;            // the pending wait's number
  bool armed_ = false;
  bool stopped_ = false;
};

inline tcp::socket& lowest(tcp::socket& s) { return s; }
inline tcp::socket& lowest(TlsStream& s) { return s.next_layer(); }

// A session's stream (the socket, or TLS over it) with its deadline on the socket; the
// deadline stops when this goes. `tls` is the TLS stream's context (null for a socket).
template <class Stream>
struct Connection {
  Connection(tcp::socket s, asio::ssl::context* tls)
      : stream(make(std::move(s), tls)), deadline(std::make_shared<Deadline>(socket())) {
    // Synchronous operations on it (write_answer's first try) return would_block instead
    // of waiting; Asio's asynchronous ones do not change.
    boost::system::error_code ignored;
    socket().non_blocking(true, ignored);
  }
  ~Connection() { deadline->stop(); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  tcp::socket& socket() { return lowest(stream); }
  Stream stream;
  std::shared_ptr<Deadline> deadline;

 private:
  static Stream make(tcp::socket s, asio::ssl::context* tls) {
    if constexpr (kIsTls<Stream>) {
      return Stream(std::move(s), *tls);
    } else {
      (void)tls;
      return s;
    }
  }
};

// TLS: the server handshake within `timeout`; false (the socket closed) when it fails — a
// client that sends plain HTTP fails at its first bytes. Plain: nothing to do.
template <class Stream>
awaitable<bool> handshake(Connection<Stream>& c, std::chrono::milliseconds timeout) {
  if constexpr (kIsTls<Stream>) {
    boost::system::error_code ec;
    c.deadline->expires_after(timeout);
    co_await c.stream.async_handshake(asio::ssl::stream_base::server, asio::redirect_error(use_awaitable, ec));
    if (ec) {
      c.socket().close(ec);
      co_return false;
    }
  } else {
    (void)c;
    (void)timeout;
  }
  co_return true;
}

// After the last answer: plain, the send side is shut; TLS, close_notify is sent and the
// peer's awaited, bounded (a peer that never sends its own is closed at the deadline).
template <class Stream>
awaitable<void> shutdown_send(Connection<Stream>& c, boost::system::error_code& ec) {
  if constexpr (kIsTls<Stream>) {
    c.deadline->expires_after(std::chrono::milliseconds(500));
    co_await c.stream.async_shutdown(asio::redirect_error(use_awaitable, ec));
  } else {
    c.socket().shutdown(tcp::socket::shutdown_send, ec);
  }
}

// Writes an answer: what the socket takes now (an answer is a few hundred bytes, so
// usually all of it), the rest asynchronously. Asio's async_write posts its completion
// even when its first send wrote everything, and every posted completion costs the io
// thread one more loop turn (an epoll_wait) per request (ADR 0262).
// TLS writes asynchronously only: a synchronous TLS write stopped by would_block would
// leave a record half sent.
template <class Stream>
awaitable<void> write_answer(Connection<Stream>& c, http::response<http::string_body>& res,
                             boost::system::error_code& ec) {
  http::response_serializer<http::string_body> sr{res};
  if constexpr (!kIsTls<Stream>) {
    http::write(c.stream, sr, ec);
    if (ec != asio::error::would_block && ec != asio::error::try_again) co_return;
    ec = {};
  }
  co_await http::async_write(c.stream, sr, asio::redirect_error(use_awaitable, ec));
}

class BeastServer final : public HttpServer, public std::enable_shared_from_this<BeastServer> {
 public:
  BeastServer(asio::io_context& ioc, HttpServerOptions options, Handler handler)
      : ioc_(ioc), acceptor_(ioc), options_(std::move(options)), handler_(std::move(handler)) {
    per_client_cap_ = options_.max_connections_per_client > 0 ? options_.max_connections_per_client
                                                              : std::max<size_t>(1, options_.max_connections / 4);
  }

  Status listen() {
    if (Status s = reload_tls(); !s) return s;  // the certificate first: a bad one binds nothing
    auto colon = options_.listen.rfind(':');
    if (colon == std::string::npos) return Status::invalid("listen address must be host:port, got " + options_.listen);
    std::string host = options_.listen.substr(0, colon);
    if (host.empty() || host == "localhost") host = "127.0.0.1";
    int port = 0;
    try {
      port = std::stoi(options_.listen.substr(colon + 1));
    } catch (...) {
      return Status::invalid("bad port in listen address " + options_.listen);
    }
    boost::system::error_code ec;
    auto addr = asio::ip::make_address(host, ec);
    if (ec) return Status::invalid("bad host in listen address " + options_.listen);
    tcp::endpoint ep(addr, static_cast<unsigned short>(port));
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Status::unavailable("cannot listen on " + options_.listen + ": " + ec.message());
    auto bound = acceptor_.local_endpoint();
    address_ = bound.address().to_string() + ":" + std::to_string(bound.port());
    return Status::ok();
  }

  void start() {
    asio::co_spawn(
        ioc_, [self = shared_from_this()]() { return self->accept_loop(); }, asio::detached);
  }

  std::string address() const override { return address_; }
  size_t open_connections() const override { return connections_.load(); }

  bool tls() const override { return !options_.tls_cert_file.empty(); }

  Status reload_tls() override {
    if (!tls()) return Status::ok();
    auto ctx = make_tls_context(options_.name, options_.tls_cert_file, options_.tls_key_file);
    if (!ctx) return ctx.status();
    MutexLock lock(tls_mu_);
    tls_ = std::move(ctx.value());
    return Status::ok();
  }

  void stop_accepting() override {
    asio::post(ioc_, [self = shared_from_this()] {
      boost::system::error_code ec;
      self->acceptor_.close(ec);
    });
  }

 private:
  awaitable<void> accept_loop() {
    for (;;) {
      boost::system::error_code ec;
      tcp::socket socket = co_await acceptor_.async_accept(asio::redirect_error(use_awaitable, ec));
      if (ec) {
        if (!acceptor_.is_open()) co_return;
        if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space) {
          // Out of file descriptors: back off instead of spinning.
          asio::steady_timer t(ioc_, std::chrono::milliseconds(50));
          co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
        }
        continue;
      }
      socket.set_option(tcp::no_delay(true), ec);
      if (!accepted_any_) {
        accepted_any_ = true;
        log::startup("first accept on " + options_.name);
      }
      // Counted here, on the io thread, before the session starts: a burst of accepts
      // cannot overshoot the cap while sessions wait to be scheduled.
      std::string client;
      if (auto peer = socket.remote_endpoint(ec); !ec) client = peer.address().to_string();
      const bool all_full = connections_.load() >= options_.max_connections;
      if (all_full || per_client_[client] >= per_client_cap_) {
        if (per_client_[client] == 0) per_client_.erase(client);
        if (refusing_ >= kMaxRefusing) {
          socket.close(ec);  // a flood: not even a 503 for these
          continue;
        }
        ++refusing_;
        const char* why = all_full ? "too many open connections" : "too many open connections from this client";
        if (auto ctx = tls_context()) {
          asio::co_spawn(
              ioc_,
              [self = shared_from_this(), s = std::move(socket), why, ctx]() mutable {
                return self->refuse<TlsStream>(std::move(s), why, ctx);
              },
              asio::detached);
        } else {
          asio::co_spawn(
              ioc_,
              [self = shared_from_this(), s = std::move(socket), why]() mutable {
                return self->refuse<tcp::socket>(std::move(s), why, nullptr);
              },
              asio::detached);
        }
        continue;
      }
      ++connections_;
      ++per_client_[client];
      // Each connection keeps the context it started with: a reload_tls() meanwhile gives
      // the next one the new certificate.
      if (auto ctx = tls_context()) {
        asio::co_spawn(
            ioc_,
            [self = shared_from_this(), s = std::move(socket), client = std::move(client), ctx]() mutable {
              return self->session<TlsStream>(std::move(s), std::move(client), ctx);
            },
            asio::detached);
      } else {
        asio::co_spawn(
            ioc_,
            [self = shared_from_this(), s = std::move(socket), client = std::move(client)]() mutable {
              return self->session<tcp::socket>(std::move(s), std::move(client), nullptr);
            },
            asio::detached);
      }
    }
  }

  std::shared_ptr<asio::ssl::context> tls_context() {
    MutexLock lock(tls_mu_);
    return tls_;
  }

  // A connection past max_connections: 503 with Retry-After, closed without reading the
  // request (the drain in reject_and_close only keeps the answer from being reset).
  // Over TLS the refusal follows a handshake (bounded as the answer's write is).
  template <class Stream>
  awaitable<void> refuse(tcp::socket socket, const char* why, std::shared_ptr<asio::ssl::context> tls) {
    Connection<Stream> stream(std::move(socket), tls.get());
    if (co_await handshake(stream, std::chrono::seconds(2))) {
      HttpResponse r = HttpResponse::error(503, why);
      r.headers.emplace_back("Retry-After", "1");
      co_await reject_and_close(stream, std::move(r));
    }
    --refusing_;
  }

  // Writes an error answer, then closes politely: shut the send side and drain what the
  // client is still sending, so it reads our answer instead of a reset (platform notes).
  template <class Stream>
  awaitable<void> reject_and_close(Connection<Stream>& stream, HttpResponse r) {
    http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
    res.set(http::field::content_type, r.content_type);
    for (auto& [k, v] : r.headers) res.set(k, v);
    res.set(http::field::connection, "close");
    res.body() = std::move(r.body);
    res.prepare_payload();
    boost::system::error_code ec;
    stream.deadline->expires_after(std::chrono::seconds(2));
    co_await write_answer(stream, res, ec);
    co_await shutdown_send(stream, ec);
    if constexpr (!kIsTls<Stream>) {  // TLS: the shutdown read up to the peer's close_notify
      char sink[4096];
      stream.deadline->expires_after(std::chrono::milliseconds(500));
      for (int i = 0; i < 256 && !ec; ++i) {
        co_await stream.socket().async_read_some(asio::buffer(sink), asio::redirect_error(use_awaitable, ec));
      }
    }
    stream.socket().close(ec);
  }

  // Reads one request into `parser`. Returns 0 when it is complete, -1 when the
  // connection should just close (client gone, slow client), or the status to reject
  // it with (`*why` says why) before closing; `*early` holds check_header's answer
  // instead when it refused the request (the status is then its status).
  template <class Stream>
  awaitable<int> read_request(Connection<Stream>& stream, beast::flat_buffer& buffer,
                              http::request_parser<http::string_body>& parser, std::string* why,
                              std::optional<HttpResponse>* early) {
    boost::system::error_code ec;
    // Empty lines before a request line are allowed (RFC 9112 §2.2); some clients send
    // a CRLF after a body.
    // 1. The whole header block, checked on the raw bytes (Beast unfolds obs-fold and
    //    waits for ever on bare LF line endings).
    size_t from = 0;
    for (;;) {
      std::string_view data(static_cast<const char*>(buffer.data().data()), buffer.size());
      while (from == 0 && data.size() >= 2 && data[0] == '\r' && data[1] == '\n') {
        buffer.consume(2);
        data.remove_prefix(2);
      }
      HeaderScan scan = scan_header_block(data, from);
      if (scan.state == HeaderScan::kBad) {
        *why = std::string("malformed HTTP request: ") + scan.why;
        co_return 400;
      }
      if (scan.state == HeaderScan::kComplete) break;
      from = scan.offset;
      if (data.size() > static_cast<size_t>(options_.max_header)) {
        *why = "request headers too large";
        co_return 431;
      }
      size_t n = co_await stream.stream.async_read_some(buffer.prepare(4096), asio::redirect_error(use_awaitable, ec));
      if (ec) co_return -1;  // closed, reset or too slow
      buffer.commit(n);
    }
    // 2. Beast parses the header from the buffer, here and now: Beast's async_read_header
    //    and async_read post their completion when they read nothing (one more turn of the
    //    loop each, and the request usually arrives whole).
    parser.eager(false);
    put_buffered(buffer, parser, ec);
    if (ec == http::error::need_more) {  // cannot happen after a complete header block; Beast's word rules
      ec = {};
      co_await http::async_read_header(stream.stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
    }
    if (!ec) {
      // 3. Framing.
      if (const char* bad = framing_error(parser.get())) {
        *why = bad;
        co_return 400;
      }
      if (options_.check_header) {
        HeaderView header(parser.get());
        if ((*early = options_.check_header(header))) co_return (*early)->status;
      }
      // 4. The body: what the buffer holds of it parsed here, the rest read.
      parser.eager(true);
      if (!parser.is_done()) put_buffered(buffer, parser, ec);
      if (ec == http::error::need_more) ec = {};
      if (!ec && !parser.is_done()) {
        co_await http::async_read(stream.stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
      }
    }
    if (!ec) co_return 0;
    if (ec == http::error::body_limit) {
      *why = "body larger than " + std::to_string(options_.max_body) + " bytes";
      co_return 413;
    }
    if (ec == http::error::header_limit) {
      *why = "request headers too large";
      co_return 431;
    }
    if (ec == http::error::buffer_overflow) {
      // The read buffer is full of one incomplete chunk-size line (its extensions) or
      // trailer section: Beast needs it whole, so its size is bounded by the buffer's.
      *why = "chunk extensions or trailer section too large";
      co_return 431;
    }
    // end_of_stream (client closed), timeout (slow client), reset: just close. A
    // malformed request gets a 400 first.
    bool malformed = ec.category() == http::make_error_code(http::error::bad_target).category() &&
                     ec != http::error::end_of_stream && ec != http::error::partial_message;
    if (!malformed) co_return -1;
    *why = "malformed HTTP request: " + ec.message();
    co_return 400;
  }

  // Framing (RFC 9112 §6.1, §6.3): exactly one `chunked` coding or one Content-Length,
  // never both; what is wrong, or nullptr. Beast 1.74 reads `chunked, identity` or any
  // other coding as "no body" and would parse the body as the next request.
  static const char* framing_error(const http::request_parser<http::string_body>::value_type& h) {
    size_t te = h.count(http::field::transfer_encoding);
    size_t cl = h.count(http::field::content_length);
    if (te > 1) return "more than one Transfer-Encoding";
    if (te == 1 && !beast::iequals(h[http::field::transfer_encoding], "chunked")) {
      return "Transfer-Encoding other than chunked";
    }
    if (te && cl) return "Transfer-Encoding together with Content-Length";
    if (cl > 1 || (cl == 1 && h[http::field::content_length].find(',') != beast::string_view::npos)) {
      return "more than one Content-Length";
    }
    return nullptr;
  }

  // Feeds `parser` what `buffer` holds (as Beast's read does between reads) until the
  // parser is done (with the header only, unless eager), fails, or needs more: then `ec`
  // is http::error::need_more.
  static void put_buffered(beast::flat_buffer& buffer, http::request_parser<http::string_body>& parser,
                           boost::system::error_code& ec) {
    ec = {};
    for (;;) {
      if (buffer.size() == 0) {
        ec = http::error::need_more;
        return;
      }
      const size_t used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec) return;  // need_more included
      if (parser.is_done() || (!parser.eager() && parser.is_header_done())) return;
    }
  }

  // One open connection, counted up by accept_loop and down here; io thread, as accept_loop.
  struct ConnectionCount {
    std::atomic<size_t>& n;
    std::unordered_map<std::string, size_t>& per_client;
    std::string client;
    ~ConnectionCount() {
      --n;
      if (auto it = per_client.find(client); it != per_client.end() && --it->second == 0) per_client.erase(it);
    }
  };

  template <class Stream>
  awaitable<void> session(tcp::socket socket, std::string client, std::shared_ptr<asio::ssl::context> tls) {
    ConnectionCount count{connections_, per_client_, std::move(client)};
    Connection<Stream> stream(std::move(socket), tls.get());
    if (!co_await handshake(stream, options_.read_timeout)) co_return;
    const auto born = std::chrono::steady_clock::now();
    // Bounded: Beast holds a chunk-size line (with its extensions) and the trailer section
    // whole and counts them against neither header_limit nor body_limit; body bytes and
    // the header pass through (the header block is checked against max_header first).
    beast::flat_buffer buffer(static_cast<size_t>(options_.max_header) + kReadSlack);
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.header_limit(static_cast<std::uint32_t>(options_.max_header));
      parser.body_limit(static_cast<std::uint64_t>(options_.max_body));
      // One deadline for the whole request (header and body): slowloris gets read_timeout.
      stream.deadline->expires_after(options_.read_timeout);
      boost::system::error_code ec;
      std::string why;
      std::optional<HttpResponse> early;
      int rejected = co_await read_request(stream, buffer, parser, &why, &early);
      if (rejected > 0) {
        // A named answer: g++ 12 destroys a temporary argument of a coroutine call twice.
        HttpResponse answer = early ? std::move(*early) : HttpResponse::error(rejected, why);
        co_await reject_and_close(stream, std::move(answer));
        co_return;
      }
      if (rejected < 0) {
        stream.socket().close(ec);
        co_return;
      }
      stream.deadline->expires_never();
      BeastRequest request(parser.release());
      auto slot = std::make_shared<ResponseSlot>(stream.socket().get_executor());
      {
        auto ex = stream.socket().get_executor();
        Responder respond = [slot, ex, &ioc = ioc_](HttpResponse r) {
          // On the io thread (http-in's PubAcks, ADR 0130): no post, no wake-up.
          if (ioc.get_executor().running_in_this_thread()) {
            slot->response = std::move(r);
            slot->timer.cancel();
            return;
          }
          asio::post(ex, [slot, r = std::move(r)]() mutable {
            slot->response = std::move(r);
            slot->timer.cancel();
          });
        };
        try {
          handler_(request, std::move(respond));
        } catch (const std::exception& e) {
          log::error("http handler failed", {{"server", options_.name}, {"error", e.what()}});
          slot->response = HttpResponse::error(500, "internal error");
        }
      }
      while (!slot->response) {
        co_await slot->timer.async_wait(asio::redirect_error(use_awaitable, ec));
      }
      HttpResponse& r = *slot->response;
      http::response<http::string_body> res{static_cast<http::status>(r.status), request.version()};
      if (!r.body.empty() || r.status >= 200) res.set(http::field::content_type, r.content_type);
      for (auto& [k, v] : r.headers) res.set(k, v);
      // Past max_connection_age the answer closes the connection: with the read_timeout
      // on each request, no client holds one longer than that and one request more.
      bool keep = request.keep_alive() && !r.close &&
                  std::chrono::steady_clock::now() - born < options_.max_connection_age;
      res.keep_alive(keep);
      res.body() = std::move(r.body);
      res.prepare_payload();
      stream.deadline->expires_after(options_.read_timeout);
      co_await write_answer(stream, res, ec);
      if (ec || !keep) {
        if (!ec || !kIsTls<Stream>) co_await shutdown_send(stream, ec);
        stream.socket().close(ec);
        co_return;
      }
    }
  }

  asio::io_context& ioc_;
  tcp::acceptor acceptor_;
  HttpServerOptions options_;
  Handler handler_;
  std::string address_;
  std::atomic<size_t> connections_{0};
  // Open connections by client address (io thread only), capped at per_client_cap_.
  std::unordered_map<std::string, size_t> per_client_;
  size_t per_client_cap_ = 1;
  // What the read buffer holds past max_header: room for one read of body bytes.
  static constexpr size_t kReadSlack = 64 * 1024;
  // Refusals in progress (io thread only); past kMaxRefusing a refused socket is closed
  // without an answer so a flood cannot use up descriptors on 503s.
  static constexpr size_t kMaxRefusing = 64;
  size_t refusing_ = 0;
  bool accepted_any_ = false;  // io thread: for the start-up timeline's "first accept"
  // The TLS context new connections take (null: plain HTTP); replaced by reload_tls().
  Mutex tls_mu_;
  std::shared_ptr<asio::ssl::context> tls_ GUARDED_BY(tls_mu_);
};

// Keeps the shared_ptr-owned server alive behind the unique_ptr the API hands out.
class ServerHandle final : public HttpServer {
 public:
  explicit ServerHandle(std::shared_ptr<BeastServer> s) : s_(std::move(s)) {}
  ~ServerHandle() override { s_->stop_accepting(); }
  std::string address() const override { return s_->address(); }
  void stop_accepting() override { s_->stop_accepting(); }
  size_t open_connections() const override { return s_->open_connections(); }
  bool tls() const override { return s_->tls(); }
  Status reload_tls() override { return s_->reload_tls(); }

 private:
  std::shared_ptr<BeastServer> s_;
};

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::create(IoLoop& loop, HttpServerOptions options, Handler handler) {
  auto& ioc = *static_cast<asio::io_context*>(loop.native());
  auto server = std::make_shared<BeastServer>(ioc, std::move(options), std::move(handler));
  if (Status s = server->listen(); !s) return s;
  server->start();
  return std::unique_ptr<HttpServer>(new ServerHandle(std::move(server)));
}

}  // namespace weir

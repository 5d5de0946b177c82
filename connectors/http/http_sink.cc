#include "connectors/http/http_sink.h"

#include <curl/curl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <nlohmann/json.hpp>

#include "connectors/http/http1_connection.h"
#include "connectors/http/signature.h"
#include "connectors/http/sink_auth.h"
#include "runtime/loop/io_loop.h"
#include "runtime/base/log.h"
#include "runtime/base/redact.h"
#include "runtime/base/retry_after.h"
#include "runtime/base/thread_annotations.h"
#include "runtime/base/token_bucket.h"

namespace weir::connectors {
namespace {
namespace asio = boost::asio;

constexpr size_t kReasonBodyBytes = 200;
// A request still with curl this long past its timeout is reported (Client::warn_overdue).
constexpr auto kOverdueMargin = std::chrono::seconds(5);
constexpr std::string_view kBlanks = " \t\r\n";

void global_init_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// Whether libcurl would take a proxy from the environment for some request. libcurl looks
// the variables up again for every request (five getenv calls each, 0.3 % of weir's CPU in
// a closed-loop profile); weir never changes its environment, so when none is set at the
// first request they stay unset, and the sinks tell curl "no proxy" once.
bool environment_names_a_proxy() {
  static const bool named = [] {
    for (const char* name :
         {"http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"}) {
      if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return true;
    }
    return false;
  }();
  return named;
}

std::string_view trim(std::string_view s) {
  const size_t begin = s.find_first_not_of(kBlanks);
  if (begin == std::string_view::npos) return {};
  const size_t end = s.find_last_not_of(kBlanks);
  return s.substr(begin, end - begin + 1);
}

char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

bool istarts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && iequals(s.substr(0, prefix.size()), prefix);
}

// RFC 9110 token characters (header names, methods).
bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) != 0) continue;
    if (std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos) continue;
    return false;
  }
  return true;
}

// No CR/LF/NUL or other controls but tab: anything else could split or forge headers.
bool is_header_value(std::string_view s) {
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) return false;
  }
  return true;
}

// Up to kReasonBodyBytes of a response body as one printable ASCII line.
std::string sanitize_body(std::string_view body) {
  const bool truncated = body.size() > kReasonBodyBytes;
  body = trim(body.substr(0, kReasonBodyBytes));
  std::string out;
  out.reserve(body.size() + 3);
  for (char c : body) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      if (!out.empty() && out.back() != ' ') out.push_back(' ');
    } else if (u >= 0x80) {
      out.push_back('?');
    } else {
      out.push_back(c);
    }
  }
  if (truncated) out += "...";
  return out;
}

// scheme://[userinfo@]host[:port][/path][?query][#fragment], split without libcurl:
// start() checks a sink's URL and names it in logs before the first delivery loads curl
// (ADR 0161). curl parses the URL again when it sends; what it rejects is a dead delivery.
struct UrlParts {
  std::string scheme;  // lower case
  std::string host;    // as written; IPv6 literals keep their brackets
  std::string port;    // digits or empty
  std::string path;    // "/" when empty
};

std::optional<UrlParts> split_url(std::string_view url) {
  for (char c : url) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) return std::nullopt;  // spaces and controls: not a URL
  }
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos || sep == 0) return std::nullopt;
  UrlParts out;
  for (char c : url.substr(0, sep)) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '+' && c != '-' && c != '.') return std::nullopt;
    out.scheme.push_back(lower(c));
  }
  if (std::isalpha(static_cast<unsigned char>(out.scheme.front())) == 0) return std::nullopt;
  std::string_view rest = url.substr(sep + 3);
  const size_t auth_end = rest.find_first_of("/?#");
  std::string_view auth = rest.substr(0, auth_end);
  std::string_view tail = auth_end == std::string_view::npos ? std::string_view{} : rest.substr(auth_end);
  if (const size_t at = auth.rfind('@'); at != std::string_view::npos) auth = auth.substr(at + 1);
  std::string_view port;
  if (!auth.empty() && auth.front() == '[') {
    const size_t close = auth.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    std::string_view after = auth.substr(close + 1);
    if (!after.empty() && after.front() != ':') return std::nullopt;
    if (!after.empty()) port = after.substr(1);
    auth = auth.substr(0, close + 1);
  } else if (const size_t colon = auth.rfind(':'); colon != std::string_view::npos) {
    port = auth.substr(colon + 1);
    auth = auth.substr(0, colon);
  }
  for (char c : port) {
    if (std::isdigit(static_cast<unsigned char>(c)) == 0) return std::nullopt;
  }
  out.host = std::string(auth);
  out.port = std::string(port);
  out.path = std::string(tail.substr(0, tail.find_first_of("?#")));
  if (out.path.empty()) out.path = "/";
  return out;
}

// "scheme://host:port" in lower case with the scheme's default port filled in, so two
// spellings of one origin compare equal; nullopt for a URL that does not parse, is not
// http(s) or carries a user (docs/adr/0317-per-event-urls.md).
std::optional<std::string> origin_key(std::string_view url) {
  const auto u = split_url(url);
  if (!u || (u->scheme != "http" && u->scheme != "https") || u->host.empty()) return std::nullopt;
  const std::string_view rest = url.substr(url.find("://") + 3);
  if (rest.substr(0, rest.find_first_of("/?#")).find('@') != std::string_view::npos) return std::nullopt;
  std::string host = u->host;
  std::transform(host.begin(), host.end(), host.begin(), lower);
  const std::string port = u->port.empty() ? (u->scheme == "https" ? "443" : "80") : u->port;
  return u->scheme + "://" + host + ":" + port;
}

}  // namespace

// Named, not anonymous: HttpSink::Impl (external linkage) holds these.
namespace http_sink_detail {

struct Work {
  Delivery delivery;
  std::function<void(DeliveryResult)> done;
  // Headers computed from the event by deliver() (`headers: {Name: {expr: …}}`; ADR 0301):
  // name and value, the value checked for control characters.
  std::vector<std::pair<std::string, std::string>> event_headers = {};
  std::string url = {};       // `url: {expr: …}` (ADR 0317): this delivery's URL; empty = spec.url
  bool auth_retried = false;  // sent again once after a 401 with a new token (Client::refused_token)
};

void finish(Work& work, DeliveryResult result) {
  if (!work.done) return;
  // A throwing callback must not take the sink thread (and every other delivery) down.
  try {
    work.done(std::move(result));
  } catch (const std::exception& e) {
    log::error("http sink: done callback threw", {{"what", e.what()}});
  } catch (...) {
    log::error("http sink: done callback threw");
  }
  work.done = nullptr;
}

struct Client;
class Loop;

// One reusable request: an easy handle with its fixed options set once, the header list
// nodes (owned here, not by curl_slist_append), and the bits of the response we keep. A
// sink on weir's own client (Client::native) has a connection instead of the easy handle.
struct Slot final : http1::Connection::Owner {
  CURL* easy = nullptr;
  std::shared_ptr<http1::Connection> conn;  // native: opened at the first request, kept
  std::string head;                         // native: the request's head, as sent
  Client* owner = nullptr;                  // the sink whose request this is
  Work work;
  std::vector<curl_slist> header_nodes;
  std::string idempotency_header;
  std::string traceparent_header;  // ADR 0140: the sink span's context, per request
  std::string tracestate_header;
  // Per request beyond the three above: event headers (ADR 0301), signature headers (ADR
  // 0300) and the oauth2 Authorization (ADR 0302), as curl or the native head spells them,
  // and curl's list nodes for them.
  std::vector<std::string> extra_headers;
  std::vector<curl_slist> extra_nodes;
  std::string bearer;                              // `oauth2:` the token this request carries, sent among extra_headers
  std::string url;                                 // the URL curl was last given for this handle (ADR 0317)
  std::string response_head;                       // first bytes of the body, for dead reasons
  std::string retry_after;                         // raw Retry-After of the last response
  bool busy = false;                               // handed to curl
  std::chrono::steady_clock::time_point launched;  // when handed to curl
  bool overdue_logged = false;                     // warned once as past its timeout
  bool resent = false;                             // sent again on a fresh connection (Client::resend)
  Slot() = default;
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
  ~Slot() {
    if (easy != nullptr) curl_easy_cleanup(easy);
    if (conn) conn->abort();
  }
  void on_answer(http1::Connection& connection, http1::Answer& answer) override;
};

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* slot = static_cast<Slot*>(user);
  const size_t n = size * count;
  const size_t room = kReasonBodyBytes + 1 - std::min(slot->response_head.size(), kReasonBodyBytes + 1);
  slot->response_head.append(data, std::min(n, room));
  return n;  // the rest is read and dropped: we only need the start for a reason
}

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* slot = static_cast<Slot*>(user);
  const size_t n = size * count;
  const std::string_view line(data, n);
  if (istarts_with(line, "HTTP/")) {
    // A new response (after 100 Continue, say): forget the previous one's headers.
    slot->retry_after.clear();
    slot->response_head.clear();
  } else if (istarts_with(line, "retry-after:")) {
    const std::string_view value = trim(line.substr(std::string_view("retry-after:").size()));
    slot->retry_after.assign(value.substr(0, kMaxRetryAfterValue));
  }
  return n;
}

// One sink's side of the shared loop. The spec-derived fields are fixed by configure()
// before the loop first sees the client; `mu` guards what deliver()/stop() hand over;
// the rest belongs to the loop thread.
struct Client {
  enum class State { kNew, kRunning, kStopping, kStopped };

  flows::HttpSinkSpec spec;
  HttpSinkOptions options;
  std::string flow;
  std::string sink;
  std::string where;                        // redacted URL, for reasons and logs
  std::string method;                       // upper case
  std::vector<std::string> static_headers;  // "Name: value" lines; fixed after start()
  int pool_size = 1;
  // weir's own HTTP/1.1 client instead of curl (ADR 0270): a plain http:// URL to a
  // numeric address, no userinfo, no proxy in the environment, WEIR_HTTP_SINK_CLIENT not
  // "curl". Then native_to is the address and native_head the request line and the fixed
  // headers.
  bool native = false;
  asio::ip::tcp::endpoint native_to;
  std::string native_head;

  mutable Mutex mu;
  State state GUARDED_BY(mu) = State::kNew;
  std::deque<Work> pending GUARDED_BY(mu);
  bool queued GUARDED_BY(mu) = false;    // in Loop::dirty (or about to be)
  bool detached GUARDED_BY(mu) = false;  // the loop let go of this client for good
  std::condition_variable detached_cv;
  std::shared_ptr<Loop> loop GUARDED_BY(mu);  // from the first delivery until stop()

  // Loop thread only.
  Loop* home = nullptr;   // the loop it is attached to: its sockets' open/close callbacks
  bool attached = false;  // counted in the loop's connection budget
  bool stopping = false;  // has seen state != kRunning
  bool in_turn = false;   // in the loop's list of clients to refill
  std::vector<std::unique_ptr<Slot>> slots;
  std::vector<Slot*> free_slots;
  int active = 0;
  std::optional<std::chrono::steady_clock::time_point> abandon_at;  // set once stopping
  std::vector<Work> to_start;                                       // taken from `pending` under mu, launched after
  std::vector<Work> refused;  // taken from `pending` while stopping, finished after
  // `rate:` (ADR 0296): a delivery leaves `pending` for the pool only with a token. Work
  // that finds none stays in `pending` (the stage's window bounds it; the stage keeps it
  // alive with in-progress acks, ADR 0293) and rate_at is when the next token is there:
  // the loop's chores timer takes the client again then.
  std::optional<TokenBucket> bucket;
  std::optional<std::chrono::steady_clock::time_point> rate_at;
  // `tls:` and `oauth2:` (docs/adr/0302-http-sink-tls-and-oauth2.md): the files read at
  // start, and the token source. Work that finds no usable token waits in awaiting_token
  // (loop thread only; counted in the pool) until the token source calls back.
  std::optional<SinkTls> tls;
  std::unique_ptr<SinkToken> token;
  std::deque<Work> awaiting_token;

  // `headers: {Name: {expr: …}}` (ADR 0301), fixed after start(); evaluated by deliver().
  std::vector<std::pair<std::string, std::shared_ptr<const flows::EventExpression>>> expr_headers;
  // `sign:` (ADR 0300): the secrets read from the environment at start(), the first
  // (newest) first; empty when the sink does not sign. Never logged.
  std::vector<std::string> sign_secrets;

  Status configure();
  Status configure_headers_from_events();
  Status configure_signing();
  // The headers computed from the event and its request metadata `meta` (ADR 0301, ADR
  // 0312) into *out; false with *why when one cannot be sent.
  bool event_headers(const nlohmann::json& event, const std::string& meta,
                     std::vector<std::pair<std::string, std::string>>* out, std::string* why) const;
  // `url: {base, expr, allow}` (docs/adr/0317-per-event-urls.md): the origins a computed
  // URL may name (origin_key spelling), base's first; fixed after start().
  std::vector<std::string> url_origins;
  Status configure_url();
  // The URL of this event's delivery into *out; false with *why (never quoting more of the
  // URL than its origin) when the expression fails or gives a URL the sink may not call.
  bool event_url(const nlohmann::json& event, const std::string& meta, std::string* out, std::string* why) const;
  // What deliver() computes from the event before queueing it: headers and URL.
  bool per_event(const std::string& body, Work* work, std::string* why) const;
  // Fills slot->extra_headers for the request about to go: the event headers and, when
  // signing, the signature headers with this attempt's timestamp.
  void per_request_headers(Slot* slot) const;
  Status configure_auth();
  // The token for `work`'s request in *bearer, or false when the work went to wait for one.
  bool await_token(Work& work, std::string* bearer);
  // Launches the waiting work once a token is there, or finishes it as a retry with the
  // failed token request's reason.
  void resume_awaiting(CURLM* multi);
  // A 401 to a request with a token, the first for its work: the token is dropped, the
  // work waits for a new one and is sent again (once). False when that does not apply.
  bool refused_token(Slot* slot, long status);
  Slot* make_slot();
  void launch(CURLM* multi, Work work);
  void complete(CURLM* multi, Slot* slot, CURLcode code);
  // Sends the slot's request again on a new connection when its first attempt died on a
  // kept-alive connection before any answer byte; false when that does not apply.
  bool resend(CURLM* multi, Slot* slot, CURLcode code);
  void abandon_all(CURLM* multi);
  // Warns (once per request) about requests still with curl well past their timeout:
  // CURLOPT_TIMEOUT_MS should have ended them, and the stage's window stays shut while
  // they are held.
  void warn_overdue(std::chrono::steady_clock::time_point now);
  DeliveryResult classify(CURLcode code, long status, const Slot& slot) const;
  DeliveryResult classify_status(long status, const Slot& slot) const;
  std::string timeout_reason() const;
  // Ends the slot's request with `result`: the slot goes back to the free list, then
  // `done` runs. (Its connection, if any, is closed by the caller when it must be.)
  void release(Slot* slot, DeliveryResult result);

  // The native client (Client::native).
  bool use_native_client();
  void send_native(Slot* slot);
  // Connection::Owner::on_answer of the client's slots.
  void answered(Slot* slot, http1::Answer& answer);
  // Ends native requests past their timeout as retry; the earliest deadline still ahead.
  std::optional<std::chrono::steady_clock::time_point> expire(std::chrono::steady_clock::time_point now);
};

// A socket curl asked the loop to watch (CURLMOPT_SOCKETFUNCTION). Held by the loop's map
// and by its pending waits; `gone` once the loop let go of it (its handlers then do nothing).
// A connection socket curl opened through the loop (Loop::on_open) stays registered with
// the reactor from its first request until curl closes it (Loop::on_close), across the
// requests it carries: registering it again for each request and removing it when curl
// puts the connection back in its cache cost three system calls per delivery
// (epoll_ctl ADD, ioctl FIONBIO, epoll_ctl DEL; ADR 0266). Any other
// socket (the threaded resolver's) is let go of when curl stops watching it: curl closes
// those without telling us, and a number still registered after its close could stand for
// the next socket that gets it.
struct Watch {
  Watch(asio::io_context& io, curl_socket_t s) : sd(io, s), fd(s) {}
  asio::posix::stream_descriptor sd;  // released, never closed by Asio: the socket is curl's
  curl_socket_t fd;
  int want = 0;          // CURL_POLL_IN, _OUT or _INOUT; 0 while curl does not watch it
  bool reading = false;  // an async_wait(read) is pending
  bool writing = false;
  // A write wait was ever started: Asio then keeps EPOLLOUT in the descriptor's epoll
  // registration for good, and every ACK that frees send buffer would wake the loop.
  bool out_registered = false;
  bool gone = false;
  // Out of the reactor (its waits cancelled, their handlers do nothing); the socket stays
  // open, it is curl's.
  void let_go() {
    gone = true;
    sd.release();
  }
};

// An HTTP client loop: a curl multi handle driven by an Asio io_context
// (curl_multi_socket_action), shared by every HttpSink delivering from that loop's
// thread (ADR 0160, 0260). A delivery from an IoLoop's thread — the sink loop,
// `weir-sinks`, where the sink stages read their messages (ADR 0258) — runs on that
// loop: the request is sent, its answer read and `done` called on the thread that read
// the message, so the ack leaves with that loop's next write and no other thread wakes.
// From any other thread (a sink stage on cnats' delivery pool, a test) the loop is the
// process's own one with a thread of its own, "weir-http", started by the first such
// delivery and ended with the last of its sinks' stop() (ADR 0161).
class Loop {
 public:
  static std::shared_ptr<Loop> acquire();  // nullptr when curl cannot make a multi handle
  // `own`: the loop's own IoLoop (not started), or nullptr to run on `io`'s thread.
  Loop(asio::io_context& io, std::unique_ptr<IoLoop> own);
  ~Loop();
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  // Puts `c` on the list the loop looks at in its next turn and posts that turn unless
  // one is posted already. Called with c->mu held (lock order: a client's mu, then the
  // loop's), when c->queued goes false → true: under the client's lock, a mark can never
  // land after the loop has let go of the client.
  void mark(Client* c) REQUIRES(c->mu);

  // CURLOPT_OPENSOCKETFUNCTION / CURLOPT_CLOSESOCKETFUNCTION of every easy handle on this
  // loop (data: the loop): the sockets the loop may keep registered between requests.
  static curl_socket_t on_open(void* self, curlsocktype purpose, curl_sockaddr* address);
  static int on_close(void* self, curl_socket_t s);

  asio::io_context& io() { return io_; }
  // A native request of `c` has finished (Client::answered): refills c and runs the turn.
  void answered(Client* c);
  // Puts `c` on the list service() refills in its next round (once).
  void refill(Client* c);

 private:
  static int on_socket(CURL* easy, curl_socket_t s, int what, void* self, void* watch);
  static int on_timer(CURLM* multi, long timeout_ms, void* self);
  void arm(const std::shared_ptr<Watch>& w);
  void on_ready(const std::shared_ptr<Watch>& w, int bits);
  void on_timeout();
  // Reads curl's finished transfers and completes them; their sinks are refilled next.
  void collect();
  // Runs curl's due work, completes finished transfers, takes the marked clients' work
  // and launches it (or refuses it when stopping), lets go of stopped clients and arms
  // the chores timer. Ends every handler of the loop.
  void service();
  void take(std::vector<Client*>& turn);
  void detach(Client* c);
  void reap(std::chrono::steady_clock::time_point now);
  void arm_chores(std::chrono::steady_clock::time_point now);
  void apply_limits();

  std::unique_ptr<IoLoop> own_;  // first: destroyed last (the io_context below is its)
  asio::io_context& io_;
  CURLM* multi_ = nullptr;
  asio::steady_timer timer_;   // curl's next timeout
  asio::steady_timer chores_;  // stop grace, overdue warnings
  std::optional<std::chrono::steady_clock::time_point> chores_at_;
  std::unordered_map<curl_socket_t, std::shared_ptr<Watch>> watches_;
  std::unordered_set<curl_socket_t> opened_;  // by on_open and not yet closed by on_close

  Mutex mu_;
  std::vector<Client*> dirty_ GUARDED_BY(mu_);
  bool turn_posted_ GUARDED_BY(mu_) = false;

  // Loop thread only.
  std::vector<Client*> clients_;  // attached, until their stop() completes
  std::vector<Client*> turn_;     // clients to refill: marked, or with completions
  std::vector<Client*> taking_;   // service()'s round: turn_ swapped in, then the marked
  bool limits_changed_ = false;
  long budget_ = 0;  // sum of the attached sinks' max_connections
  std::chrono::steady_clock::time_point next_overdue_check_{};
  // The earliest end of a native request's timeout (arm_chores); service() expires them.
  std::optional<std::chrono::steady_clock::time_point> native_deadline_;
  // The earliest Client::rate_at (arm_chores); service() takes those clients again.
  std::optional<std::chrono::steady_clock::time_point> rate_due_;
  bool busy_ = false;  // in one of the loop's handlers (service() ends each)
  bool kick_ = false;  // curl asked to run at once (timeout 0): service() calls it
};

Status Client::configure() {
  where = redact_url(spec.url);
  {
    const auto u = split_url(spec.url);
    if (!u) return Status::invalid("http sink " + sink + ": url does not parse");
    if (u->scheme != "http" && u->scheme != "https") {
      return Status::invalid("http sink " + sink + ": url scheme must be http or https");
    }
    if (u->host.empty()) return Status::invalid("http sink " + sink + ": url has no host");
  }
  method = spec.method.empty() ? "POST" : spec.method;
  std::transform(method.begin(), method.end(), method.begin(),
                 [](char c) { return static_cast<char>(std::toupper(static_cast<unsigned char>(c))); });
  if (!is_token(method)) return Status::invalid("http sink " + sink + ": method is not a token");
  // The event is the body: a method whose answer or semantics has no body cannot carry it.
  if (method == "HEAD" || method == "CONNECT" || method == "TRACE") {
    return Status::invalid("http sink " + sink + ": method " + method + " cannot carry the event as a body");
  }
  if (spec.max_connections < 1) {
    return Status::invalid("http sink " + sink + ": max_connections must be at least 1");
  }
  if (spec.timeout.count() <= 0) {
    return Status::invalid("http sink " + sink + ": timeout must be positive");
  }
  pool_size = spec.max_connections;
  bucket.reset();
  if (spec.rate_per_s != 0) {
    // The loader allows 1/day … 1e6/s (flows/loader.cc); a spec built another way is checked here.
    if (!(spec.rate_per_s >= 1.0 / 86400 && spec.rate_per_s <= 1e6)) {
      return Status::invalid("http sink " + sink + ": rate must be between one a day and 1000000/s");
    }
    bucket.emplace(spec.rate_per_s);
  }

  bool user_content_type = false;
  static_headers.clear();
  for (const auto& [name, value] : spec.headers) {
    // Names only in messages: values may hold credentials.
    if (!is_token(name)) return Status::invalid("http sink " + sink + ": bad header name '" + name + "'");
    if (!is_header_value(value)) {
      return Status::invalid("http sink " + sink + ": header " + name + " has control characters");
    }
    if (iequals(name, "Idempotency-Key")) {
      log::warn("http sink: Idempotency-Key is set from the event id; the configured one is ignored",
                {{"flow", flow}, {"sink", sink}});
      continue;
    }
    if (iequals(name, "Content-Type")) user_content_type = true;
    // "Name;" is curl's spelling of a header with an empty value ("Name:" would remove it).
    static_headers.push_back(value.empty() ? name + ";" : name + ": " + value);
  }
  if (Status st = configure_headers_from_events(); !st) return st;
  if (Status st = configure_signing(); !st) return st;
  if (Status st = configure_url(); !st) return st;
  for (const auto& [name, expr] : expr_headers) user_content_type = user_content_type || iequals(name, "Content-Type");
  if (!user_content_type) static_headers.insert(static_headers.begin(), "Content-Type: application/json");
  // Otherwise curl waits up to a second for "100 Continue" before sending a large body.
  static_headers.push_back("Expect:");
  if (Status st = configure_auth(); !st) return st;
  native = use_native_client();
  return Status::ok();
}

Status Client::configure_headers_from_events() {
  expr_headers.clear();
  for (const auto& [name, expr] : spec.header_exprs) {
    if (!expr) continue;
    if (!is_token(name)) return Status::invalid("http sink " + sink + ": bad header name '" + name + "'");
    if (iequals(name, "Idempotency-Key")) {
      log::warn("http sink: Idempotency-Key is set from the event id; the configured one is ignored",
                {{"flow", flow}, {"sink", sink}});
      continue;
    }
    expr_headers.emplace_back(name, expr);
  }
  return Status::ok();
}

// The secrets are read here, once: a missing or unusable one is a start error naming the
// variable, never its value (ADR 0300).
Status Client::configure_signing() {
  sign_secrets.clear();
  const bool standard = spec.sign.scheme == flows::HttpSignSpec::Scheme::kStandard;
  if (!standard && spec.sign.secret_envs.size() > 1) {
    return Status::invalid("http sink " + sink + ": sign scheme github signs with one secret");
  }
  for (const std::string& env : spec.sign.secret_envs) {
    const std::string what = "http sink " + sink + ": sign: environment variable " + env;
    const char* value = std::getenv(env.c_str());
    if (value == nullptr) return Status::invalid(what + " is not set");
    const std::string_view secret(value);
    if (secret.empty()) return Status::invalid(what + " is empty");
    if (standard) {
      // Without the prefix weir's http-in takes the bytes as they are and the reference
      // libraries base64-decode them: only the prefixed form means one key to both.
      if (secret.substr(0, 6) != "whsec_") {
        return Status::invalid(what +
                               " must hold a Standard Webhooks secret: whsec_ followed by the base64 of the key");
      }
      std::string why;
      if (!valid_standard_webhook_secret(secret, &why)) return Status::invalid(what + ": " + why);
    }
    sign_secrets.emplace_back(secret);
  }
  return Status::ok();
}

Status Client::configure_auth() {
  tls.reset();
  token.reset();
  if (spec.tls) {
    // weir's own client speaks no TLS: a tls sink has an https:// URL, which goes to curl
    // (use_native_client()).
    if (split_url(spec.url)->scheme != "https") {
      return Status::invalid("http sink " + sink + ": tls needs an https:// url");
    }
    auto loaded = load_sink_tls(*spec.tls, sink);
    if (!loaded) return loaded.status();
    tls = std::move(loaded.value());
  }
  if (spec.oauth2) {
    oauth2::Client oc;
    oc.token_url = spec.oauth2->token_url;
    oc.token_where = redact_url(spec.oauth2->token_url);
    oc.scopes = spec.oauth2->scopes;
    if (Status st = oauth2::read_credentials("http sink " + sink, spec.oauth2->client_id_env,
                                             spec.oauth2->client_secret_env, nullptr, &oc);
        !st) {
      return st;
    }
    for (const auto& [name, value] : spec.headers) {
      if (iequals(name, "Authorization")) {
        return Status::invalid("http sink " + sink + ": header Authorization and oauth2 exclude each other");
      }
    }
    token = std::make_unique<SinkToken>(std::move(oc), spec.timeout, flow, sink);
  }
  return Status::ok();
}

Status Client::configure_url() {
  url_origins.clear();
  if (!spec.url_expr) return Status::ok();
  auto base = origin_key(spec.url);
  if (!base) return Status::invalid("http sink " + sink + ": url.base is not an http(s) origin");
  url_origins.push_back(std::move(*base));
  for (const std::string& a : spec.url_allow) {
    auto o = origin_key(a);
    if (!o) return Status::invalid("http sink " + sink + ": url.allow has " + a + ", which is not an http(s) origin");
    url_origins.push_back(std::move(*o));
  }
  return Status::ok();
}

bool Client::per_event(const std::string& body, Work* work, std::string* why) const {
  if (expr_headers.empty() && !spec.url_expr) return true;
  const auto event = nlohmann::json::parse(body, nullptr, false);
  if (event.is_discarded()) {
    *why = spec.url_expr ? "url and header expressions: the event is not JSON"
                         : "header expressions: the event is not JSON";
    return false;
  }
  const std::string& meta = work->delivery.meta;  // read as `meta` (ADR 0312)
  return event_headers(event, meta, &work->event_headers, why) && event_url(event, meta, &work->url, why);
}

bool Client::event_url(const nlohmann::json& event, const std::string& meta, std::string* out, std::string* why) const {
  if (!spec.url_expr) return true;
  std::string value, error;
  const std::string what = "url: expression `" + spec.url_expr->text() + "` ";
  if (!spec.url_expr->eval_string(event, &value, &error, meta)) {
    *why = what + error;
    return false;
  }
  // Beyond this receivers answer 414 and logs cut the line: the reason says so at once.
  constexpr size_t kMaxUrl = 8192;
  if (value.size() > kMaxUrl) {
    *why = what + "gave " + std::to_string(value.size()) + " bytes, more than the " + std::to_string(kMaxUrl) +
           " a URL may have here";
    return false;
  }
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) {
      *why = what + "gave a URL with spaces, control characters or bytes beyond ASCII (url_encode() the values)";
      return false;
    }
  }
  if (!value.empty() && value.front() == '/') {
    const std::string& base = spec.url;
    *out = (!base.empty() && base.back() == '/' ? base.substr(0, base.size() - 1) : base) + value;
    return true;
  }
  const auto origin = origin_key(value);
  if (!origin) {
    *why = what + "gave neither a path starting with / nor an http(s) URL without a user";
    return false;
  }
  if (std::find(url_origins.begin(), url_origins.end(), *origin) == url_origins.end()) {
    *why = what + "gave a URL on " + *origin + ", which is neither the sink's url.base nor in url.allow";
    return false;
  }
  *out = std::move(value);
  return true;
}

bool Client::event_headers(const nlohmann::json& event, const std::string& meta,
                           std::vector<std::pair<std::string, std::string>>* out, std::string* why) const {
  if (expr_headers.empty()) return true;
  // Beyond this a receiver answers 431, or cuts the header; the reason says so at once.
  constexpr size_t kMaxValue = 8192;
  out->reserve(expr_headers.size());
  for (const auto& [name, expr] : expr_headers) {
    std::string value, error;
    const std::string what = "header " + name + ": expression `" + expr->text() + "` ";
    if (!expr->eval_string(event, &value, &error, meta)) {
      *why = what + error;
      return false;
    }
    // Values are not quoted in reasons: a header may carry what a dead-letter reader should not see.
    if (!is_header_value(value)) {
      *why = what + "gave a value with control characters (CR, LF, ...), which a header cannot carry";
      return false;
    }
    if (value.size() > kMaxValue) {
      *why = what + "gave " + std::to_string(value.size()) + " bytes, more than the " + std::to_string(kMaxValue) +
             " a header value may have here";
      return false;
    }
    out->emplace_back(name, std::move(value));
  }
  return true;
}

bool Client::await_token(Work& work, std::string* bearer) {
  if (!token) return true;
  if (auto t = token->take(std::chrono::steady_clock::now())) {
    *bearer = std::move(*t);
    return true;
  }
  awaiting_token.push_back(std::move(work));
  return false;
}

void Client::resume_awaiting(CURLM* multi) {
  if (awaiting_token.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  if (auto failure = token->failure(now)) {
    std::deque<Work> failed;
    failed.swap(awaiting_token);
    for (auto& w : failed) finish(w, DeliveryResult::retry(*failure));
    return;
  }
  if (!token->take(now)) return;  // still fetching: its callback brings the client back
  std::deque<Work> ready;
  ready.swap(awaiting_token);
  for (auto& w : ready) launch(multi, std::move(w));
}

bool Client::refused_token(Slot* slot, long status) {
  if (status != 401 || !token || slot->work.auth_retried || stopping) return false;
  token->refused(slot->bearer);
  Work work = std::move(slot->work);
  work.auth_retried = true;
  slot->busy = false;
  --active;
  free_slots.push_back(slot);
  log::info("http sink: 401 with an oauth2 token; fetching a new one and sending again",
            {{"flow", flow}, {"sink", sink}, {"id", work.delivery.event_id}});
  std::string unused;
  // A token newer than the refused one may be there already; otherwise this starts the fetch.
  if (await_token(work, &unused)) {
    awaiting_token.push_front(std::move(work));
  } else {
    // await_token queued it at the back; the re-send goes first.
    awaiting_token.push_front(std::move(awaiting_token.back()));
    awaiting_token.pop_back();
  }
  return true;
}

void Client::per_request_headers(Slot* slot) const {
  std::vector<std::string>& out = slot->extra_headers;
  out.clear();
  for (const auto& [name, value] : slot->work.event_headers) {
    // "Name;" is curl's spelling of a header with an empty value ("Name:" would remove it).
    out.push_back(value.empty() && !native ? name + ";" : name + ": " + value);
  }
  if (!slot->bearer.empty()) out.push_back("Authorization: Bearer " + slot->bearer);
  if (sign_secrets.empty()) return;
  const Delivery& d = slot->work.delivery;
  if (spec.sign.scheme == flows::HttpSignSpec::Scheme::kGithub) {
    out.push_back("X-Hub-Signature-256: " + github_signature(sign_secrets.front(), d.body));
    return;
  }
  // Signed afresh for every attempt: a re-send carries its own time, so it is not refused
  // as too old by a receiver's five-minute window; webhook-id stays the event id.
  const std::string timestamp = std::to_string(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  std::string signatures;
  for (const std::string& secret : sign_secrets) {
    if (!signatures.empty()) signatures.push_back(' ');
    signatures += standard_webhook_signature(secret, d.event_id, timestamp, d.body);
  }
  out.push_back("webhook-id: " + d.event_id);
  out.push_back("webhook-timestamp: " + timestamp);
  out.push_back("webhook-signature: " + signatures);
}

bool Client::use_native_client() {
  if (environment_names_a_proxy()) return false;
  if (spec.url_expr) return false;  // a URL per request: curl's (ADR 0317)
  if (const char* v = std::getenv("WEIR_HTTP_SINK_CLIENT"); v != nullptr && std::string_view(v) == "curl") {
    return false;
  }
  const auto u = split_url(spec.url);
  if (!u || u->scheme != "http") return false;
  const std::string_view url = spec.url;
  const size_t auth_begin = url.find("://") + 3;
  const size_t auth_end = std::min(url.find_first_of("/?#", auth_begin), url.size());
  const std::string_view authority = url.substr(auth_begin, auth_end - auth_begin);
  if (authority.find('@') != std::string_view::npos) return false;  // curl sends userinfo as Basic auth
  std::string_view host = u->host;
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  boost::system::error_code ec;
  const asio::ip::address address = asio::ip::make_address(std::string(host), ec);
  if (ec) return false;  // a name: resolving it is curl's (its resolver, its cache)
  unsigned long port = 80;
  if (!u->port.empty()) {
    port = std::strtoul(u->port.c_str(), nullptr, 10);
    if (port == 0 || port > 65535) return false;
  }
  std::string target(url.substr(auth_end, url.find('#', auth_end) - auth_end));
  if (target.empty() || target.front() == '?') target.insert(0, "/");
  for (char c : target) {
    // Bytes curl would have to escape: left to curl.
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) return false;
  }
  native_to = asio::ip::tcp::endpoint(address, static_cast<unsigned short>(port));
  native_head.assign(method).append(" ").append(target).append(" HTTP/1.1\r\nHost: ");
  native_head.append(authority).append("\r\nUser-Agent: weir\r\nAccept: */*\r\n");
  for (const std::string& h : static_headers) {
    if (h == "Expect:") continue;  // curl's; this client never waits for 100 Continue
    if (h.back() == ';') {         // curl's spelling of an empty value
      native_head.append(h, 0, h.size() - 1).append(":\r\n");
    } else {
      native_head.append(h).append("\r\n");
    }
  }
  return true;
}

Slot* Client::make_slot() {
  auto slot = std::make_unique<Slot>();
  if (native) {
    slot->owner = this;
    slot->response_head.reserve(kReasonBodyBytes + 1);
    slots.push_back(std::move(slot));
    return slots.back().get();
  }
  slot->easy = curl_easy_init();
  if (slot->easy == nullptr) return nullptr;
  slot->owner = this;
  CURL* e = slot->easy;
  curl_easy_setopt(e, CURLOPT_URL, spec.url.c_str());
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(spec.timeout.count()));
  curl_easy_setopt(e, CURLOPT_USERAGENT, "weir");
  if (!environment_names_a_proxy()) {
    curl_easy_setopt(e, CURLOPT_PROXY, "");    // as no proxy variable: none
    curl_easy_setopt(e, CURLOPT_NOPROXY, "");  // and no_proxy is not read either
  }
  if (method == "POST") {
    curl_easy_setopt(e, CURLOPT_POST, 1L);
  } else {
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method.c_str());
  }
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, slot.get());
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, slot.get());
  curl_easy_setopt(e, CURLOPT_PRIVATE, slot.get());
  curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, &Loop::on_open);
  curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, home);
  curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, &Loop::on_close);
  curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, home);
  if (tls) {
    // Blobs: the files as start() read and checked them (docs/adr/0302).
    if (!tls->ca_pem.empty()) {
      curl_blob ca{tls->ca_pem.data(), tls->ca_pem.size(), CURL_BLOB_COPY};
      curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &ca);
      // This CA instead of the system's store, not beside it.
      curl_easy_setopt(e, CURLOPT_CAINFO, nullptr);
      curl_easy_setopt(e, CURLOPT_CAPATH, nullptr);
    }
    if (!tls->cert_pem.empty()) {
      curl_blob cert{tls->cert_pem.data(), tls->cert_pem.size(), CURL_BLOB_COPY};
      curl_blob key{tls->key_pem.data(), tls->key_pem.size(), CURL_BLOB_COPY};
      curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, &cert);
      curl_easy_setopt(e, CURLOPT_SSLCERTTYPE, "PEM");
      curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, &key);
      curl_easy_setopt(e, CURLOPT_SSLKEYTYPE, "PEM");
    }
  }

  // The list lives as long as the slot; only the last three nodes (Idempotency-Key,
  // traceparent, tracestate) change per request (launch()), and extra_nodes after them.
  slot->header_nodes.resize(static_headers.size() + 3);
  for (size_t i = 0; i < static_headers.size(); ++i) {
    slot->header_nodes[i].data = static_headers[i].data();
    slot->header_nodes[i].next = &slot->header_nodes[i + 1];
  }
  for (size_t i = static_headers.size(); i < slot->header_nodes.size(); ++i) {
    slot->header_nodes[i].data = nullptr;
    slot->header_nodes[i].next = nullptr;
  }
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, slot->header_nodes.data());
  slot->response_head.reserve(kReasonBodyBytes + 1);

  slots.push_back(std::move(slot));
  return slots.back().get();
}

// Hangs slot->extra_headers (ADR 0300, 0301) behind the last of the request's dynamic
// header nodes. The strings are complete before the nodes point into them.
static void link_extra_headers(Slot* slot, curl_slist* dynamic) {
  curl_slist* tail = dynamic;
  while (tail->next != nullptr) tail = tail->next;
  slot->extra_nodes.resize(slot->extra_headers.size());
  for (size_t i = 0; i < slot->extra_nodes.size(); ++i) {
    slot->extra_nodes[i].data = slot->extra_headers[i].data();
    slot->extra_nodes[i].next = nullptr;
    tail->next = &slot->extra_nodes[i];
    tail = tail->next;
  }
}

void Client::launch(CURLM* multi, Work work) {
  const std::string& id = work.delivery.event_id;
  if (id.empty() || !is_header_value(id)) {
    finish(work, DeliveryResult::dead("event id is not usable as an Idempotency-Key header"));
    return;
  }
  std::string bearer;
  if (!await_token(work, &bearer)) return;
  Slot* slot = nullptr;
  if (!free_slots.empty()) {
    slot = free_slots.back();
    free_slots.pop_back();
  } else {
    slot = make_slot();
    if (slot == nullptr) {
      finish(work, DeliveryResult::retry("curl_easy_init failed (" + where + ")"));
      return;
    }
  }
  slot->work = std::move(work);
  slot->bearer = std::move(bearer);
  slot->response_head.clear();
  slot->retry_after.clear();
  per_request_headers(slot);
  if (native) {
    send_native(slot);
    slot->busy = true;
    slot->launched = std::chrono::steady_clock::now();
    slot->overdue_logged = false;
    ++active;
    return;
  }
  slot->idempotency_header.assign("Idempotency-Key: ").append(slot->work.delivery.event_id);
  curl_slist* dynamic = &slot->header_nodes[slot->header_nodes.size() - 3];
  dynamic[0].data = slot->idempotency_header.data();
  dynamic[0].next = nullptr;
  dynamic[1].next = nullptr;
  dynamic[2].next = nullptr;
  const Delivery& d = slot->work.delivery;
  if (!d.traceparent.empty() && is_header_value(d.traceparent)) {
    slot->traceparent_header.assign("traceparent: ").append(d.traceparent);
    dynamic[0].next = &dynamic[1];
    dynamic[1].data = slot->traceparent_header.data();
    dynamic[1].next = nullptr;
    if (!d.tracestate.empty() && is_header_value(d.tracestate)) {
      slot->tracestate_header.assign("tracestate: ").append(d.tracestate);
      dynamic[1].next = &dynamic[2];
      dynamic[2].data = slot->tracestate_header.data();
    }
  }
  link_extra_headers(slot, dynamic);
  if (spec.url_expr) {
    // Kept in the slot: curl reads the string while the request runs. Connections are
    // reused per origin by curl's own pool.
    slot->url = slot->work.url.empty() ? spec.url : slot->work.url;
    curl_easy_setopt(slot->easy, CURLOPT_URL, slot->url.c_str());
  }
  if (slot->resent) {
    slot->resent = false;
    curl_easy_setopt(slot->easy, CURLOPT_FRESH_CONNECT, 0L);
  }
  const std::string& body = slot->work.delivery.body;
  curl_easy_setopt(slot->easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(slot->easy, CURLOPT_POSTFIELDS, body.data());
  const CURLMcode rc = curl_multi_add_handle(multi, slot->easy);
  if (rc != CURLM_OK) {
    Work failed = std::move(slot->work);
    free_slots.push_back(slot);
    finish(failed, DeliveryResult::retry(std::string("curl: ") + curl_multi_strerror(rc) + " (" + where + ")"));
    return;
  }
  slot->busy = true;
  slot->launched = std::chrono::steady_clock::now();
  slot->overdue_logged = false;
  ++active;
}

DeliveryResult Client::classify_status(long status, const Slot& slot) const {
  if (status >= 200 && status <= 299) return DeliveryResult::ok();
  const std::string what = "HTTP " + std::to_string(status) + " from " + where;
  if (status < 100) return DeliveryResult::retry("no HTTP status from " + where);
  if ((status >= 500 && status <= 599) || status == 408 || status == 429) {
    return DeliveryResult::retry(what, parse_retry_after(slot.retry_after, std::chrono::system_clock::now()));
  }
  const std::string body = sanitize_body(slot.response_head);
  return DeliveryResult::dead(body.empty() ? what : what + ": " + body);
}

std::string Client::timeout_reason() const {
  return "timeout after " + std::to_string(spec.timeout.count()) + "ms (" + where + ")";
}

void Client::release(Slot* slot, DeliveryResult result) {
  Work work = std::move(slot->work);
  slot->busy = false;
  --active;
  free_slots.push_back(slot);
  finish(work, std::move(result));
}

DeliveryResult Client::classify(CURLcode code, long status, const Slot& slot) const {
  if (code == CURLE_OK) return classify_status(status, slot);
  if (code == CURLE_OPERATION_TIMEDOUT) return DeliveryResult::retry(timeout_reason());
  // curl_easy_strerror, not the error buffer: the buffer may quote parts of the request.
  const std::string what = std::string(curl_easy_strerror(code)) + " (" + where + ")";
  // start() took only http and https URLs: curl's "Unsupported protocol" is then an answer
  // it could not read as HTTP (a broken status line), the receiver's fault and a retry.
  if (code == CURLE_URL_MALFORMAT || code == CURLE_BAD_FUNCTION_ARGUMENT) return DeliveryResult::dead(what);
  return DeliveryResult::retry(what);
}

// A receiver may close a kept-alive connection at any time without saying so (its idle
// timeout, a restart): a request written to it just then fails with nothing answered.
// curl sends such a request again on a new connection itself when the failure shows while
// it reads, not when the write fails (curl 7.88: "Failed sending data to the peer"). Every
// request carries its Idempotency-Key, so sending it again once on a new connection is
// safe (as Go's net/http does for such requests) and spares the event a retry backoff.
// Only for a connection this transfer did not open (CURLINFO_NUM_CONNECTS 0) and with no
// answer header read: a new connection's failure, or a partial answer, is the receiver's.
bool Client::resend(CURLM* multi, Slot* slot, CURLcode code) {
  if (slot->resent || stopping) return false;
  if (code != CURLE_SEND_ERROR && code != CURLE_RECV_ERROR && code != CURLE_GOT_NOTHING) return false;
  long connects = -1;
  long header_bytes = -1;
  curl_easy_getinfo(slot->easy, CURLINFO_NUM_CONNECTS, &connects);
  curl_easy_getinfo(slot->easy, CURLINFO_HEADER_SIZE, &header_bytes);
  if (connects != 0 || header_bytes != 0) return false;
  slot->resent = true;  // no header read: response_head and retry_after are still empty
  curl_easy_setopt(slot->easy, CURLOPT_FRESH_CONNECT, 1L);
  if (curl_multi_add_handle(multi, slot->easy) != CURLM_OK) return false;
  slot->launched = std::chrono::steady_clock::now();
  slot->overdue_logged = false;
  log::debug(
      "http sink: request sent again on a new connection",
      {{"flow", flow}, {"sink", sink}, {"id", slot->work.delivery.event_id}, {"error", curl_easy_strerror(code)}});
  return true;
}

void Client::complete(CURLM* multi, Slot* slot, CURLcode code) {
  long status = 0;
  curl_easy_getinfo(slot->easy, CURLINFO_RESPONSE_CODE, &status);
  curl_multi_remove_handle(multi, slot->easy);
  if (resend(multi, slot, code)) return;
  if (code == CURLE_OK && refused_token(slot, status)) return;
  release(slot, classify(code, status, *slot));
}

void Client::abandon_all(CURLM* multi) {
  for (auto& slot : slots) {
    if (!slot->busy) continue;
    // Closes this request's connection mid-request; the receiver may still act on what it
    // got. Other sinks' transfers on the same multi are not touched.
    if (slot->conn) {
      slot->conn->abort();
      slot->conn.reset();
    } else {
      curl_multi_remove_handle(multi, slot->easy);
    }
    release(slot.get(), DeliveryResult::retry("sink stopping; request abandoned (" + where + ")"));
  }
}

void Client::warn_overdue(std::chrono::steady_clock::time_point now) {
  for (auto& slot : slots) {
    if (!slot->busy || slot->overdue_logged || now - slot->launched < spec.timeout + kOverdueMargin) continue;
    slot->overdue_logged = true;
    log::warn("http sink: request still with curl past its timeout",
              {{"flow", flow},
               {"sink", sink},
               {"id", slot->work.delivery.event_id},
               {"age_ms",
                std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - slot->launched).count())},
               {"active", std::to_string(active)},
               {"pool", std::to_string(pool_size)}});
  }
}

void Slot::on_answer(http1::Connection& /*connection*/, http1::Answer& answer) {
  // What `done` leaves (the stage's ack written, its next delivery's round) runs as this
  // handler ends, not in posted handlers: each would cost the loop a zero-timeout
  // epoll_wait per event.
  IoLoop::Batch batch;
  owner->answered(this, answer);
}

void Client::send_native(Slot* slot) {
  const Delivery& d = slot->work.delivery;
  std::string& h = slot->head;
  h.assign(native_head).append("Idempotency-Key: ").append(d.event_id).append("\r\n");
  if (!d.traceparent.empty() && is_header_value(d.traceparent)) {
    h.append("traceparent: ").append(d.traceparent).append("\r\n");
    if (!d.tracestate.empty() && is_header_value(d.tracestate)) {
      h.append("tracestate: ").append(d.tracestate).append("\r\n");
    }
  }
  for (const std::string& line : slot->extra_headers) h.append(line).append("\r\n");
  h.append("Content-Length: ").append(std::to_string(d.body.size())).append("\r\n\r\n");
  if (!slot->conn) slot->conn = std::make_shared<http1::Connection>(home->io(), native_to, kReasonBodyBytes + 1);
  slot->conn->send(slot, h, d.body);
}

namespace {
// A native request's failure, worded like curl's where curl has a word for it.
std::string native_error(const boost::system::error_code& ec) {
  if (ec == boost::beast::http::error::end_of_stream) return "Server returned nothing (no headers, no data)";
  if (ec == boost::beast::http::error::partial_message) return "answer cut short";
  return ec.message();
}
}  // namespace

void Client::answered(Slot* slot, http1::Answer& answer) {
  if (!slot->busy) return;
  // As resend() for curl: a kept-alive connection the receiver had closed, nothing
  // answered. Sent once more, on a new connection (the failed one is closed).
  if (answer.error && answer.nothing_read && answer.reused && !slot->resent && !stopping) {
    slot->resent = true;
    slot->launched = std::chrono::steady_clock::now();
    slot->overdue_logged = false;
    log::debug(
        "http sink: request sent again on a new connection",
        {{"flow", flow}, {"sink", sink}, {"id", slot->work.delivery.event_id}, {"error", native_error(answer.error)}});
    slot->conn->send(slot, slot->head, slot->work.delivery.body);
    return;
  }
  slot->resent = false;
  if (!answer.error && refused_token(slot, answer.status)) {
    home->answered(this);
    return;
  }
  DeliveryResult result;
  if (answer.error) {
    result = DeliveryResult::retry(native_error(answer.error) + " (" + where + ")");
  } else {
    slot->retry_after = std::move(answer.retry_after);
    slot->response_head = std::move(answer.body_head);
    result = classify_status(answer.status, *slot);
  }
  release(slot, std::move(result));
  home->answered(this);
}

std::optional<std::chrono::steady_clock::time_point> Client::expire(std::chrono::steady_clock::time_point now) {
  std::optional<std::chrono::steady_clock::time_point> next;
  for (auto& slot : slots) {
    if (!slot->busy) continue;
    const auto deadline = slot->launched + spec.timeout;
    if (deadline > now) {
      if (!next || deadline < *next) next = deadline;
      continue;
    }
    // As curl's TIMEOUT_MS: the connection is closed, the request is a retry.
    slot->conn->abort();
    slot->conn.reset();
    slot->resent = false;
    release(slot.get(), DeliveryResult::retry(timeout_reason()));
  }
  return next;
}

// The key of the loop attached to an IoLoop (IoLoop::attachment).
constexpr char kAttachmentKey = 0;

std::shared_ptr<Loop> Loop::acquire() {
  if (IoLoop* io = IoLoop::current()) {
    return std::static_pointer_cast<Loop>(io->attachment(&kAttachmentKey, [io]() -> std::shared_ptr<void> {
      global_init_once();
      auto loop = std::make_shared<Loop>(*static_cast<asio::io_context*>(io->native()), nullptr);
      if (loop->multi_ == nullptr) return nullptr;
      return loop;
    }));
  }
  // Leaked on purpose: sinks may still stop during static destruction.
  static auto* mu = new Mutex;
  static auto* current = new std::weak_ptr<Loop>;
  MutexLock lock(*mu);
  if (auto loop = current->lock()) return loop;
  global_init_once();
  auto own = std::make_unique<IoLoop>("weir-http");
  auto* io = static_cast<asio::io_context*>(own->native());
  auto loop = std::make_shared<Loop>(*io, std::move(own));
  if (loop->multi_ == nullptr) return nullptr;
  // Started here: the thread (and its name) is there when the first deliver() returns.
  loop->own_->start();
  *current = loop;
  return loop;
}

Loop::Loop(asio::io_context& io, std::unique_ptr<IoLoop> own)
    : own_(std::move(own)), io_(io), multi_(curl_multi_init()), timer_(io), chores_(io) {
  if (multi_ == nullptr) return;
  curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &Loop::on_socket);
  curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
  curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &Loop::on_timer);
  curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
}

Loop::~Loop() {
  // Runs where no handler of this loop can run any more: after its own thread is joined,
  // or — on an IoLoop's thread — from IoLoop::stop() after that thread has ended.
  if (own_) own_->stop();
  // Out of the reactor before curl closes the sockets.
  for (auto& [fd, w] : watches_) w->let_go();
  watches_.clear();
  if (multi_ != nullptr) curl_multi_cleanup(multi_);
}

void Loop::mark(Client* c) {
  bool post = false;
  {
    MutexLock lock(mu_);
    dirty_.push_back(c);
    post = !turn_posted_;
    turn_posted_ = true;
  }
  if (!post) return;
  // From a read handler of the loop's own thread (the sink stage's messages arrive in
  // one) the turn runs as that handler ends, with whatever else it delivered; from any
  // other handler of that thread it is posted (no wake-up), from another thread it wakes
  // the loop.
  if (io_.get_executor().running_in_this_thread() &&
      IoLoop::at_batch_end([](void* loop) { static_cast<Loop*>(loop)->service(); },
                           std::shared_ptr<void>(std::shared_ptr<void>(), this))) {
    return;
  }
  asio::post(io_, [this] { service(); });
}

int Loop::on_socket(CURL* /*easy*/, curl_socket_t s, int what, void* self, void* /*watch*/) {
  auto* loop = static_cast<Loop*>(self);
  auto it = loop->watches_.find(s);
  if (it != loop->watches_.end()) {
    Watch& w = *it->second;
    if (what == CURL_POLL_REMOVE && !w.out_registered && loop->opened_.count(s) != 0) {
      // An idle connection in curl's cache: stays registered for its next request. A wait
      // still pending fires at most once (the peer closing it) and finds curl not watching.
      w.want = 0;
      return 0;
    }
    if (what == CURL_POLL_REMOVE || (w.out_registered && (what & CURL_POLL_OUT) == 0)) {
      // Let go of (a socket curl closes without on_close) or registered afresh without
      // EPOLLOUT (once per connection: after its connect or a body larger than the socket
      // buffer).
      w.let_go();
      loop->watches_.erase(it);
      it = loop->watches_.end();
      if (what == CURL_POLL_REMOVE) return 0;
    }
  }
  if (it == loop->watches_.end()) {
    try {
      it = loop->watches_.emplace(s, std::make_shared<Watch>(loop->io_, s)).first;
    } catch (const std::exception& e) {  // the reactor refused the descriptor
      log::error("http sink: cannot watch a socket", {{"what", e.what()}});
      return -1;  // curl fails the transfer on it
    }
  }
  it->second->want = what;
  loop->arm(it->second);
  return 0;
}

int Loop::on_timer(CURLM* /*multi*/, long timeout_ms, void* self) {
  auto* loop = static_cast<Loop*>(self);
  if (timeout_ms < 0) {
    loop->timer_.cancel();
    return 0;
  }
  // Never socket_action from inside curl's callback. A timeout of 0 (curl wants to run at
  // once: a new transfer) is served by the handler this call came from, on its way out
  // (service()), without a timer syscall or another turn; curl calls this only from
  // within the loop's own calls, so a post is only the fallback.
  if (timeout_ms == 0) {
    loop->timer_.cancel();
    loop->kick_ = true;
    if (!loop->busy_) asio::post(loop->io_, [loop] { loop->on_timeout(); });
    return 0;
  }
  loop->timer_.expires_after(std::chrono::milliseconds(timeout_ms));
  loop->timer_.async_wait([loop](const boost::system::error_code& ec) {
    if (!ec) loop->on_timeout();
  });
  return 0;
}

void Loop::arm(const std::shared_ptr<Watch>& w) {
  if (w->gone) return;
  if ((w->want & CURL_POLL_IN) != 0 && !w->reading) {
    w->reading = true;
    w->sd.async_wait(asio::posix::stream_descriptor::wait_read, [this, w](const boost::system::error_code& ec) {
      w->reading = false;
      if (!ec && !w->gone) on_ready(w, CURL_CSELECT_IN);
    });
  }
  if ((w->want & CURL_POLL_OUT) != 0 && !w->writing) {
    w->writing = true;
    w->out_registered = true;
    w->sd.async_wait(asio::posix::stream_descriptor::wait_write, [this, w](const boost::system::error_code& ec) {
      w->writing = false;
      if (!ec && !w->gone) on_ready(w, CURL_CSELECT_OUT);
    });
  }
}

curl_socket_t Loop::on_open(void* self, curlsocktype /*purpose*/, curl_sockaddr* address) {
  // As curl's own opening, plus close-on-exec: an exec source's child gets no sink socket.
  const curl_socket_t s = ::socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
  if (s != CURL_SOCKET_BAD) static_cast<Loop*>(self)->opened_.insert(s);
  return s;
}

int Loop::on_close(void* self, curl_socket_t s) {
  auto* loop = static_cast<Loop*>(self);
  loop->opened_.erase(s);
  const auto it = loop->watches_.find(s);
  if (it != loop->watches_.end()) {
    // Out of the reactor while the number is still this socket's.
    it->second->let_go();
    loop->watches_.erase(it);
  }
  return ::close(s);
}

void Loop::on_ready(const std::shared_ptr<Watch>& w, int bits) {
  busy_ = true;
  int running = 0;
  // A kept socket's wait may fire while curl does not watch it (an idle connection's peer
  // closed it): curl finds out when it next picks the connection.
  const int asked = bits == CURL_CSELECT_IN ? CURL_POLL_IN : CURL_POLL_OUT;
  if ((w->want & asked) != 0) curl_multi_socket_action(multi_, w->fd, bits, &running);
  // Asio watches descriptors edge-triggered and curl reads one buffer per call. What curl
  // left in the socket still signals: arm()'s async_wait is a non-speculative reactor
  // operation, which Boost 1.74 starts with EPOLL_CTL_MOD (epoll_reactor.ipp, start_op),
  // and the kernel then looks at the socket again and reports it ready (as NatsLoop relies
  // on, ADR 0261). A finished request's socket is gone (curl let go of it): nothing to arm.
  arm(w);
  service();
}

void Loop::on_timeout() {
  kick_ = true;
  service();
}

void Loop::collect() {
  int left = 0;
  while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
    if (msg->msg != CURLMSG_DONE) continue;
    CURL* easy = msg->easy_handle;
    const CURLcode code = msg->data.result;  // msg is invalid after remove_handle
    char* priv = nullptr;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
    auto* slot = reinterpret_cast<Slot*>(priv);
    Client* c = slot->owner;
    c->complete(multi_, slot, code);
    refill(c);
  }
}

void Loop::apply_limits() {
  // Each sink keeps at most max_connections requests in flight (its own FIFO), so the sum
  // bounds connections: curl never queues a request (its TIMEOUT_MS would count the queue)
  // and keeps every sink's connections alive in its cache between requests.
  const long n = std::max(1L, budget_);
  curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS, n);
  curl_multi_setopt(multi_, CURLMOPT_MAX_TOTAL_CONNECTIONS, n);
  curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, n);
  limits_changed_ = false;
}

// Moves each listed client's waiting work into its to_start (as far as its pool has room)
// or, once it is stopping, into refused. One lock of mu_ and one of each client's mu.
void Loop::take(std::vector<Client*>& turn) {
  {
    MutexLock lock(mu_);
    turn_posted_ = false;
    for (Client* c : dirty_) {
      if (c->in_turn) continue;
      c->in_turn = true;
      turn.push_back(c);
    }
    dirty_.clear();
  }
  const auto now = std::chrono::steady_clock::now();
  for (Client* c : turn) {
    c->in_turn = false;
    if (!c->attached) {
      c->attached = true;
      c->home = this;
      clients_.push_back(c);
      budget_ += c->pool_size;
      limits_changed_ = true;
    }
    MutexLock lock(c->mu);
    c->queued = false;
    c->rate_at.reset();
    if (c->state != Client::State::kRunning) {
      if (!c->stopping) {
        c->stopping = true;
        c->abandon_at = now + c->options.stop_grace;
      }
      for (auto& w : c->pending) c->refused.push_back(std::move(w));
      c->pending.clear();
      for (auto& w : c->awaiting_token) c->refused.push_back(std::move(w));
      c->awaiting_token.clear();
      continue;
    }
    while (!c->pending.empty() &&
           c->active + static_cast<int>(c->to_start.size() + c->awaiting_token.size()) < c->pool_size) {
      if (c->bucket && !c->bucket->try_take(now)) {
        c->rate_at = c->bucket->next_token(now);
        break;
      }
      c->to_start.push_back(std::move(c->pending.front()));
      c->pending.pop_front();
    }
  }
}

void Loop::refill(Client* c) {
  if (c->in_turn) return;
  c->in_turn = true;
  turn_.push_back(c);
}

void Loop::answered(Client* c) {
  refill(c);
  service();
}

void Loop::service() {
  busy_ = true;
  if (native_deadline_ || rate_due_) {
    const auto now = std::chrono::steady_clock::now();
    if (rate_due_ && now >= *rate_due_) {
      rate_due_.reset();
      for (Client* c : clients_) {
        if (c->rate_at && *c->rate_at <= now) refill(c);  // a token is there: take its work again
      }
    }
    if (native_deadline_ && now >= *native_deadline_) {
      native_deadline_.reset();
      for (Client* c : clients_) {
        if (!c->native || c->active == 0) continue;
        c->expire(now);
        refill(c);  // its pool has room again
      }
    }
  }
  // Round by round: curl's due work (kick_: new transfers, expired timers), the finished
  // transfers, then the marked clients' work launched. `done` callbacks run here may
  // deliver again (marking clients) and launches make curl due again: go round until a
  // round finds nothing to do.
  for (int round = 0; round < 64; ++round) {
    if (kick_) {
      kick_ = false;
      int running = 0;
      curl_multi_socket_action(multi_, CURL_SOCKET_TIMEOUT, 0, &running);
    }
    collect();
    // Swapped, not moved: both vectors keep their capacity, no allocation per round.
    taking_.clear();
    taking_.swap(turn_);
    take(taking_);
    if (limits_changed_) apply_limits();
    if (taking_.empty() && !kick_) break;
    for (Client* c : taking_) {
      for (auto& w : c->refused) finish(w, DeliveryResult::retry("sink stopping"));
      c->refused.clear();
      c->resume_awaiting(multi_);
      for (auto& w : c->to_start) c->launch(multi_, std::move(w));
      c->to_start.clear();
    }
  }
  {
    MutexLock lock(mu_);
    // Still work after 64 rounds (a sink whose `done` keeps delivering): later, not here.
    if (!dirty_.empty() && !turn_posted_) {
      turn_posted_ = true;
      asio::post(io_, [this] { service(); });
    }
  }
  const auto now = std::chrono::steady_clock::now();
  reap(now);
  arm_chores(now);
  busy_ = false;
  // Abandoned requests (reap) may have made curl due: after the other handlers.
  if (kick_) asio::post(io_, [this] { on_timeout(); });
}

// Sinks being stopped: abandons their requests past the grace, lets go of finished ones;
// warns about overdue requests once a second.
void Loop::reap(std::chrono::steady_clock::time_point now) {
  if (now >= next_overdue_check_) {
    next_overdue_check_ = now + std::chrono::seconds(1);
    for (Client* c : clients_) c->warn_overdue(now);
  }
  for (size_t i = 0; i < clients_.size();) {
    Client* c = clients_[i];
    if (c->stopping && c->active > 0 && now >= *c->abandon_at) c->abandon_all(multi_);
    if (c->stopping && c->active == 0) {
      detach(c);  // erases clients_[i]
      continue;
    }
    ++i;
  }
  if (limits_changed_) apply_limits();
}

// The chores timer: at the earliest stop grace's end, and once a second while requests
// are with curl (overdue warnings). Re-armed only to move it earlier: a timer that fires
// with nothing to do costs one turn, a re-arm per request a syscall each.
void Loop::arm_chores(std::chrono::steady_clock::time_point now) {
  std::optional<std::chrono::steady_clock::time_point> at;
  native_deadline_.reset();
  rate_due_.reset();
  for (Client* c : clients_) {
    if (c->rate_at && (!rate_due_ || *c->rate_at < *rate_due_)) rate_due_ = c->rate_at;
    if (c->stopping && c->active > 0 && (!at || *c->abandon_at < *at)) at = c->abandon_at;
    if (c->active > 0 && (!at || next_overdue_check_ < *at)) at = next_overdue_check_;
    if (c->native && c->active > 0) {
      // expire() with a time before every start: nothing ends, the earliest deadline comes back.
      if (const auto d = c->expire(std::chrono::steady_clock::time_point::min())) {
        if (!native_deadline_ || *d < *native_deadline_) native_deadline_ = d;
      }
    }
  }
  if (native_deadline_ && (!at || *native_deadline_ < *at)) at = native_deadline_;
  if (rate_due_ && (!at || *rate_due_ < *at)) at = rate_due_;
  if (!at || (chores_at_ && *chores_at_ <= *at && *chores_at_ > now)) return;
  chores_at_ = at;
  chores_.expires_at(*at);
  chores_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    chores_at_.reset();
    service();
  });
}

void Loop::detach(Client* c) {
  budget_ -= c->pool_size;
  limits_changed_ = true;
  c->slots.clear();  // every easy handle is out of the multi (active == 0)
  c->free_slots.clear();
  clients_.erase(std::find(clients_.begin(), clients_.end(), c));
  if (c->in_turn) {
    turn_.erase(std::remove(turn_.begin(), turn_.end(), c), turn_.end());
    c->in_turn = false;
  }
  {
    MutexLock lock(mu_);
    dirty_.erase(std::remove(dirty_.begin(), dirty_.end(), c), dirty_.end());
  }
  MutexLock lock(c->mu);
  c->detached = true;
  c->detached_cv.notify_all();
  // From here on the client is its sink's again: stop() may return and destroy it.
}

}  // namespace http_sink_detail

using http_sink_detail::Client;
using http_sink_detail::Loop;
using http_sink_detail::Work;

struct HttpSink::Impl {
  Client client;
};

HttpSink::HttpSink(flows::HttpSinkSpec spec, std::string flow, std::string sink_name, HttpSinkOptions options)
    : impl_(std::make_unique<Impl>()) {
  Client& c = impl_->client;
  c.spec = std::move(spec);
  c.options = options;
  c.flow = std::move(flow);
  c.sink = std::move(sink_name);
}

HttpSink::~HttpSink() { stop(); }

Status HttpSink::start() {
  Client& c = impl_->client;
  {
    MutexLock lock(c.mu);
    if (c.state != Client::State::kNew) return Status::conflict("http sink " + c.sink + ": started twice");
  }
  if (Status st = c.configure(); !st) return st;
  if (c.token) {
    // A token fetch ended: the loop takes the client again (Client::resume_awaiting).
    c.token->on_ready([&c] {
      MutexLock lock(c.mu);
      if (c.state != Client::State::kRunning || !c.loop || c.queued) return;
      c.queued = true;
      c.loop->mark(&c);
    });
  }
  {
    MutexLock lock(c.mu);
    c.state = Client::State::kRunning;
  }
  // The loop (and curl, and OpenSSL) start with the first delivery (ADR 0161).
  log::info("http sink started", {{"flow", c.flow},
                                  {"sink", c.sink},
                                  {"url", c.where},
                                  {"max_connections", std::to_string(c.pool_size)},
                                  {"rate", c.spec.rate.empty() ? "none" : c.spec.rate},
                                  {"client", client()}});
  return Status::ok();
}

void HttpSink::stop() {
  Client& c = impl_->client;
  // First: after this no token callback marks the client (the loop may be letting go of it).
  if (c.token) c.token->stop();
  UniqueLock lock(c.mu);
  if (c.state == Client::State::kNew) {
    c.state = Client::State::kStopped;
    return;
  }
  if (c.state != Client::State::kRunning) return;
  if (!c.loop) {  // never delivered: nothing on the wire, no loop to leave
    c.state = Client::State::kStopped;
    return;
  }
  c.state = Client::State::kStopping;
  if (!c.queued) {
    c.queued = true;
    c.loop->mark(&c);
  }
  // (Already queued: the loop sees the new state when it takes the client.) Waiting here
  // on the loop thread would never end: `done` must not call stop().
  lock.wait(c.detached_cv, [&]() REQUIRES(c.mu) { return c.detached; });
  c.state = Client::State::kStopped;
  std::shared_ptr<Loop> loop = std::move(c.loop);
  lock.unlock();
  loop.reset();  // the last sink to stop ends the loop's thread
}

const char* HttpSink::client() const {
  const Client& c = impl_->client;
  {
    MutexLock lock(c.mu);
    if (c.state == Client::State::kNew) return "";
  }
  return c.native ? "weir" : "curl";
}

int HttpSink::max_in_flight() const { return std::max(1, impl_->client.spec.max_connections); }

int HttpSink::max_retries() const { return impl_->client.spec.retries; }
flows::RetrySpec HttpSink::retry_policy() const { return impl_->client.spec.retry; }
const flows::EventExpression* HttpSink::order_by() const { return impl_->client.spec.order_by.get(); }
int64_t HttpSink::queued() const {
  MutexLock lock(impl_->client.mu);
  return static_cast<int64_t>(impl_->client.pending.size());
}

void HttpSink::deliver(Delivery delivery, std::function<void(DeliveryResult)> done) {
  Client& c = impl_->client;
  const char* refused = nullptr;
  Work work{std::move(delivery), std::move(done)};
  // On the caller's thread, not the loop's; a header or URL that cannot be computed makes
  // this delivery dead with the reason, as the MQTT sink does for its topic (ADR 0301, 0317).
  if (std::string why; !c.per_event(work.delivery.body, &work, &why)) {
    finish(work, DeliveryResult::dead(std::move(why)));
    return;
  }
  {
    MutexLock lock(c.mu);
    if (c.state == Client::State::kRunning && !c.loop) {
      c.loop = Loop::acquire();  // the first delivery: joins (or starts) the loop
      if (!c.loop) refused = "curl_multi_init failed";
    }
    if (refused == nullptr && c.state == Client::State::kRunning) {
      c.pending.push_back(std::move(work));
      // Already queued: the loop takes this one with the others in its next turn.
      if (!c.queued) {
        c.queued = true;
        c.loop->mark(&c);
      }
      return;
    }
    if (refused == nullptr) refused = c.state == Client::State::kNew ? "sink not started" : "sink stopping";
  }
  finish(work, DeliveryResult::retry(refused));
}

std::unique_ptr<weir::Sink> make_http_sink(const flows::HttpSinkSpec& spec, std::string flow, std::string sink_name) {
  return std::make_unique<HttpSink>(spec, std::move(flow), std::move(sink_name));
}

}  // namespace weir::connectors

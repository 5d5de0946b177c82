#include "connectors/poll/poll_source.h"

#include <pthread.h>
#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <utility>

#include "flows/json_limits.h"
#include "runtime/base/log.h"
#include "runtime/base/oauth2.h"
#include "runtime/base/redact.h"
#include "runtime/base/retry_after.h"
#include "runtime/base/thread_annotations.h"

namespace weir::connectors {

using flows::Json;
using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

// ---- Pure parts ------------------------------------------------------------------------

namespace poll {

namespace {
constexpr size_t kMaxOwnIdBytes = 128;

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// An id usable verbatim in an event id (and so in Nats-Msg-Id and Idempotency-Key headers).
bool plain_id(std::string_view id) {
  if (id.empty() || id.size() > kMaxOwnIdBytes) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == ':' || c == '/' ||
           c == '=' || c == '@' || c == '+';
  });
}

Json validators_json(const Validators& v) {
  Json j = Json::object();
  if (!v.url_hash.empty()) j["url"] = v.url_hash;
  if (!v.etag.empty()) j["etag"] = v.etag;
  if (!v.last_modified.empty()) j["last_modified"] = v.last_modified;
  return j;
}

bool validators_from(const Json& j, Validators* out) {
  if (j.is_null()) return true;
  if (!j.is_object()) return false;
  for (auto [key, field] : {std::pair{"url", &out->url_hash}, std::pair{"etag", &out->etag},
                            std::pair{"last_modified", &out->last_modified}}) {
    if (auto it = j.find(key); it != j.end()) {
      if (!it->is_string()) return false;
      *field = it->get<std::string>();
    }
  }
  return true;
}
}  // namespace

const Json* select(const Json& value, std::string_view path) {
  const Json* at = &value;
  while (!path.empty()) {
    const size_t dot = path.find('.');
    const std::string_view segment = path.substr(0, dot);
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
    if (at->is_object()) {
      auto it = at->find(std::string(segment));
      if (it == at->end()) return nullptr;
      at = &*it;
    } else if (at->is_array() && all_digits(segment) && segment.size() < 10) {
      const size_t index = std::stoul(std::string(segment));
      if (index >= at->size()) return nullptr;
      at = &(*at)[index];
    } else {
      return nullptr;
    }
  }
  return at;
}

std::vector<Json> split(const Json& body, std::string_view path) {
  const Json* selected = select(body, path);
  if (selected == nullptr || selected->is_null()) return {};
  if (!selected->is_array()) return {*selected};
  return std::vector<Json>(selected->begin(), selected->end());
}

std::string cursor_of(const Json& body, std::string_view field) {
  if (field.empty()) return "";
  const Json* c = select(body, field);
  if (c == nullptr) return "";
  if (c->is_string()) return c->get<std::string>();
  if (c->is_number_integer()) return c->dump();
  return "";
}

std::string page_url(const std::string& url, const std::string& param, const std::string& cursor) {
  if (cursor.empty() || param.empty()) return url;
  const size_t hash = url.find('#');
  std::string base = url.substr(0, hash);
  const std::string fragment = hash == std::string::npos ? "" : url.substr(hash);
  const bool has_query = base.find('?') != std::string::npos;
  if (has_query && base.back() != '?' && base.back() != '&') base += '&';
  if (!has_query) base += '?';
  return base + url_encode(param) + "=" + url_encode(cursor) + fragment;
}

std::string event_id(std::string_view flow, std::string_view url, std::string_view cursor, size_t index,
                     const Json& item) {
  if (item.is_object()) {
    auto it = item.find("id");
    if (it != item.end() && (it->is_string() || it->is_number_integer())) {
      const std::string id = it->is_string() ? it->get<std::string>() : it->dump();
      if (plain_id(id)) return std::string(flow) + "-id-" + id;
      if (!id.empty()) return std::string(flow) + "-id-h" + sha256_hex(id).substr(0, 32);
    }
  }
  // Newlines cannot occur in a URL or in the compact dump, so the fields cannot run
  // into each other; a cursor with a newline still hashes to something stable.
  std::string material(url);
  material += '\n';
  material += cursor;
  material += '\n';
  material += std::to_string(index);
  material += '\n';
  material += item.dump();
  return std::string(flow) + "-page-" + sha256_hex(material).substr(0, 32);
}

std::string state_key(std::string_view flow, std::string_view url) {
  return "poll." + std::string(flow) + "." + sha256_hex(url).substr(0, 16);
}

std::string PollState::to_json() const {
  Json j = {{"v", 1}, {"cursor", cursor}};
  if (!first.empty()) j["first"] = validators_json(first);
  if (!last.empty()) j["last"] = validators_json(last);
  return j.dump();
}

std::optional<PollState> PollState::from_json(std::string_view text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("v", 0) != 1) return std::nullopt;
  PollState s;
  if (auto it = j.find("cursor"); it != j.end()) {
    if (!it->is_string()) return std::nullopt;
    s.cursor = it->get<std::string>();
  }
  if (!validators_from(j.value("first", Json()), &s.first)) return std::nullopt;
  if (!validators_from(j.value("last", Json()), &s.last)) return std::nullopt;
  return s;
}

const Validators* PollState::validators_for(std::string_view url) const {
  const std::string hash = sha256_hex(url);
  if (!first.empty() && first.url_hash == hash) return &first;
  if (!last.empty() && last.url_hash == hash) return &last;
  return nullptr;
}

}  // namespace poll

// ---- The source ------------------------------------------------------------------------

namespace {

bool valid_header_name(std::string_view name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

bool valid_header_value(std::string_view value) {
  return std::none_of(value.begin(), value.end(), [](char c) { return c == '\r' || c == '\n' || c == '\0'; });
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return std::string(s);
}

struct Response {
  long status = 0;
  std::string body;
  std::string etag, last_modified, retry_after;
};

// Counts a page's publishes in flight. Shared with the publish callbacks, which may run
// after the source is gone.
struct PageAcks {
  Mutex mu;
  std::condition_variable cv;
  size_t outstanding GUARDED_BY(mu) = 0;
  size_t acked GUARDED_BY(mu) = 0;
  size_t dropped GUARDED_BY(mu) = 0;  // larger than the NATS server accepts: never storable
  Status first_error GUARDED_BY(mu);
};

}  // namespace

struct PollSource::Impl {
  flows::PollSourceSpec spec;
  std::string flow;
  PollSourceOptions options;
  std::string where;     // redacted URL for logs
  oauth2::Client oauth;  // token URL, its redacted form, credentials and scopes (OAuth2 only)
  std::string key;       // state key
  std::vector<std::pair<std::string, std::string>> headers;  // spec headers, minus Authorization under OAuth2

  SourceContext context;
  std::thread thread;
  bool started = false;
  std::atomic<bool> stopping{false};
  Mutex mu;
  std::condition_variable wake;

  CURL* curl = nullptr;      // poll thread only (after start)
  poll::PollState state;     // poll thread only
  oauth2::TokenCache token;  // poll thread only
  bool deposed = false;      // poll thread only: another instance wrote our state

  std::atomic<uint64_t> polls{0}, published{0}, token_fetches{0};

  ~Impl() {
    if (curl != nullptr) curl_easy_cleanup(curl);
  }

  // Sleeps until `until` or stop; false when stopping.
  bool sleep_until(SteadyClock::time_point until) {
    UniqueLock lock(mu);
    lock.wait_until(wake, until, [&] { return stopping.load(); });
    return !stopping.load();
  }

  bool lease_held() const { return !context.fence || context.fence().has_value(); }

  // ---- HTTP ----

  static size_t on_body(char* data, size_t size, size_t count, void* user) {
    auto* r = static_cast<std::pair<std::string*, int64_t>*>(user);
    const size_t n = size * count;
    if (static_cast<int64_t>(r->first->size() + n) > r->second) return 0;  // aborts: too large
    r->first->append(data, n);
    return n;
  }

  static size_t on_header(char* data, size_t size, size_t count, void* user) {
    auto* r = static_cast<Response*>(user);
    const size_t n = size * count;
    std::string_view line(data, n);
    if (line.substr(0, 5) == "HTTP/") {  // a new response (after 100 Continue): start over
      r->etag.clear();
      r->last_modified.clear();
      r->retry_after.clear();
      return n;
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return n;
    const std::string_view name = line.substr(0, colon);
    const std::string value = trim(line.substr(colon + 1));
    if (iequals(name, "ETag")) r->etag = value;
    else if (iequals(name, "Last-Modified")) r->last_modified = value;
    else if (iequals(name, "Retry-After")) r->retry_after = value;
    return n;
  }

  static int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    return static_cast<Impl*>(user)->stopping.load() ? 1 : 0;
  }

  // One request on the reused handle. `where` names it in errors (redacted).
  Result<Response> perform(const std::string& url, const std::vector<std::string>& header_lines,
                           const std::string* post_body, const std::string& what) {
    curl_easy_reset(curl);  // keeps the connection cache: keep-alive across polls
    Response r;
    std::pair<std::string*, int64_t> sink{&r.body, options.max_body};
    curl_slist* list = nullptr;
    for (const auto& h : header_lines) list = curl_slist_append(list, h.c_str());
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options.connect_timeout.count()));
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(options.request_timeout.count()));
    curl_easy_setopt(curl, CURLOPT_ACCEPT_ENCODING, "");
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &Impl::on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &Impl::on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &Impl::on_progress);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, this);
    if (post_body != nullptr) {
      curl_easy_setopt(curl, CURLOPT_POST, 1L);
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, post_body->c_str());
      curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(post_body->size()));
    } else {
      curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
    }
    const CURLcode code = curl_easy_perform(curl);
    curl_slist_free_all(list);
    if (code != CURLE_OK) {
      if (code == CURLE_ABORTED_BY_CALLBACK) return Status::unavailable(what + ": stopping");
      if (code == CURLE_WRITE_ERROR) {
        return Status::invalid(what + ": the answer is larger than " + std::to_string(options.max_body) + " bytes");
      }
      // curl_easy_strerror's fixed text only: the error buffer may quote the URL.
      return Status::unavailable(what + ": " + curl_easy_strerror(code));
    }
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r.status);
    return r;
  }

  // ---- OAuth2 ----

  // A fresh token (cached, or fetched now).
  Result<std::string> bearer(bool force_refresh) {
    if (force_refresh) token.invalidate();
    if (auto t = token.get(SteadyClock::now())) return *t;
    const auto asked = SteadyClock::now();
    auto parsed = oauth2::fetch_token(oauth,
                                      [&](const std::string& url, const std::vector<std::string>& lines,
                                          const std::string& body) -> Result<oauth2::Answer> {
                                        auto r = perform(url, lines, &body,
                                                         "oauth2 token request to " + oauth.token_where);
                                        if (!r) return r.status();
                                        return oauth2::Answer{r->status, std::move(r->body)};
                                      });
    if (!parsed) return parsed.status();
    // Lifetime counts from the request, not the answer: the server's clock started then.
    token.set(parsed->access_token, parsed->expires_in, asked);
    token_fetches.fetch_add(1, std::memory_order_acq_rel);
    return parsed->access_token;
  }

  // GET with the spec's headers, validators and the bearer token; on a 401 under OAuth2
  // the token is fetched again and the request repeated once.
  Result<Response> get(const std::string& url, const poll::Validators* validators) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::vector<std::string> lines;
      lines.reserve(headers.size() + 4);
      for (const auto& [name, value] : headers) lines.push_back(name + ": " + value);
      if (validators != nullptr && !validators->etag.empty()) lines.push_back("If-None-Match: " + validators->etag);
      if (validators != nullptr && !validators->last_modified.empty()) {
        lines.push_back("If-Modified-Since: " + validators->last_modified);
      }
      if (spec.oauth2) {
        auto t = bearer(/*force_refresh=*/attempt > 0);
        if (!t) return t.status();
        lines.push_back("Authorization: Bearer " + t.value());
      }
      auto r = perform(url, lines, nullptr, "GET " + where);
      if (!r) return r;
      polls.fetch_add(1, std::memory_order_acq_rel);
      if (r->status == 401 && spec.oauth2 && attempt == 0) {
        log::info("poll: 401 with a cached token; fetching a new one", {{"flow", flow}, {"url", where}});
        continue;
      }
      return r;
    }
    return Status::internal("unreachable");
  }

  // ---- State ----

  // Reads the stored state; retries until it succeeds or the source stops.
  bool load_state() {
    if (context.state == nullptr) return true;
    int failures = 0;
    while (!stopping.load()) {
      auto got = context.state->get(key);
      if (got) {
        if (got.value()) {
          if (auto s = poll::PollState::from_json(*got.value())) {
            state = *s;
            log::info("poll: resuming",
                      {{"flow", flow}, {"url", where}, {"at", state.cursor.empty() ? "first page" : "stored cursor"}});
          } else {
            log::warn("poll: stored state is not readable; starting at the first page", {{"flow", flow}, {"key", key}});
          }
        }
        return true;
      }
      log::warn("poll: cannot read state; retrying", {{"flow", flow}, {"key", key}, {"error", got.status().str()}});
      if (!sleep_until(SteadyClock::now() + backoff(++failures))) return false;
    }
    return false;
  }

  // Writes `next` once its page is acknowledged. False when the poll must end here.
  bool save_state(const poll::PollState& next) {
    if (next == state) return true;
    if (context.state == nullptr) {
      state = next;
      return true;
    }
    if (!lease_held() || stopping.load()) return false;
    Status s = context.state->put(key, next.to_json());
    if (s) {
      state = next;
      return true;
    }
    if (s.code() == Status::Code::kConflict) {
      log::warn("poll: state was written by another instance; this one stops polling", {{"flow", flow}, {"key", key}});
      deposed = true;
      return false;
    }
    // The page's events are stored: go on from memory and write again after the next page.
    log::warn("poll: cannot write state; continuing from memory", {{"flow", flow}, {"key", key}, {"error", s.str()}});
    state = next;
    return true;
  }

  milliseconds backoff(int failures) const {
    milliseconds d = options.backoff_min;
    for (int i = 1; i < failures && d < options.backoff_max; ++i) d *= 2;
    return std::min(d, options.backoff_max);
  }

  // ---- Publishing ----

  // Publishes one page's events and waits for every PubAck. ok only when all were stored.
  Status publish_page(const std::string& cursor, std::vector<Json>& items) {
    if (items.empty()) return Status::ok();
    std::optional<uint64_t> fence;
    if (context.fence) {
      fence = context.fence();
      if (!fence) return Status::conflict("lease not held");
    }
    auto acks = std::make_shared<PageAcks>();
    for (size_t i = 0; i < items.size(); ++i) {
      {
        UniqueLock lock(acks->mu);
        while (acks->outstanding >= options.max_in_flight && !stopping.load()) {
          lock.wait_for(acks->cv, milliseconds(50));
        }
        if (stopping.load()) break;
        if (!acks->first_error.is_ok()) break;
        ++acks->outstanding;
      }
      IngestEvent event;
      event.id = poll::event_id(flow, spec.url, cursor, i, items[i]);
      event.body = items[i].dump();
      if (fence) event.headers.emplace_back("Weir-Fence", std::to_string(*fence));
      // Not under acks->mu: the callback may run synchronously and take it.
      context.ingest->publish(std::move(event), options.publish_timeout,
                              [acks, flow = flow](const Status& status, const std::string& id) {
                                MutexLock lock(acks->mu);
                                --acks->outstanding;
                                if (status) {
                                  ++acks->acked;
                                } else if (status.code() == Status::Code::kTooLarge) {
                                  // No later poll could store it either: logged and passed
                                  // over, so the cursor moves on instead of failing forever.
                                  ++acks->dropped;
                                  log::error("poll: item dropped: it can never be stored",
                                             {{"flow", flow}, {"id", id}, {"reason", status.message()}});
                                } else if (acks->first_error.is_ok()) {
                                  acks->first_error = status;
                                }
                                acks->cv.notify_all();
                              });
    }
    UniqueLock lock(acks->mu);
    while (acks->outstanding > 0 && !stopping.load()) lock.wait_for(acks->cv, milliseconds(50));
    published.fetch_add(acks->acked, std::memory_order_acq_rel);
    if (!acks->first_error.is_ok()) return acks->first_error;
    if (acks->outstanding > 0 || acks->acked + acks->dropped < items.size()) return Status::unavailable("stopping");
    return Status::ok();
  }

  // ---- One poll ----

  struct Outcome {
    bool ok = true;
    milliseconds retry_after{0};
  };

  Outcome poll_once() {
    std::string cursor = state.cursor;
    for (int page = 0; page < options.max_pages; ++page) {
      if (stopping.load() || !lease_held()) return {};
      const std::string url = poll::page_url(spec.url, spec.cursor_param, cursor);
      const poll::Validators* validators = page == 0 ? state.validators_for(url) : nullptr;
      auto r = get(url, validators);
      if (!r) {
        if (!stopping.load()) log::warn("poll failed", {{"flow", flow}, {"error", r.status().str()}});
        return {false, {}};
      }
      if (r->status == 304) {
        log::debug("poll: not modified", {{"flow", flow}, {"url", where}});
        return {};
      }
      if (r->status < 200 || r->status > 299) {
        log::warn("poll: unexpected answer", {{"flow", flow}, {"url", where}, {"status", std::to_string(r->status)}});
        Outcome o{false, {}};
        if (!r->retry_after.empty() && (r->status == 429 || r->status == 503)) {
          if (auto d = parse_retry_after(r->retry_after, std::chrono::system_clock::now())) o.retry_after = *d;
        }
        return o;
      }
      Json body;
      if (!r->body.empty()) {
        flows::JsonError err;
        auto parsed = flows::parse_json(r->body, context.max_depth, &err);
        if (!parsed) {
          // Too deep is refused like invalid JSON: nothing of it is stored.
          log::warn(
              err.too_deep ? "poll: the answer is nested too deep" : "poll: the answer is not JSON",
              {{"flow", flow}, {"url", where}, {"bytes", std::to_string(r->body.size())}, {"error", err.message}});
          return {false, {}};
        }
        body = std::move(*parsed);
      }
      std::vector<Json> items = poll::split(body, spec.split);
      const std::string next = poll::cursor_of(body, spec.cursor_field);
      if (Status s = publish_page(cursor, items); !s) {
        if (!stopping.load() && s.code() != Status::Code::kConflict) {
          log::warn("poll: events not stored; the page will be fetched again",
                    {{"flow", flow}, {"url", where}, {"error", s.str()}});
        }
        return {false, {}};
      }
      poll::PollState after = state;
      poll::Validators v{poll::sha256_hex(url), r->etag, r->last_modified};
      if (v.empty()) v = {};
      if (page == 0) after.first = v;
      after.last = v;
      // No cursor: the walk is complete and the next poll starts at the first page again.
      after.cursor = next;
      if (!save_state(after)) return {};
      log::debug("poll: page stored", {{"flow", flow},
                                       {"url", where},
                                       {"events", std::to_string(items.size())},
                                       {"more", next.empty() ? "no" : "yes"}});
      if (next.empty() || next == cursor || items.empty()) return {};
      cursor = next;
    }
    return {};
  }

  void run() {
    if (!load_state()) return;
    int failures = 0;
    auto next = SteadyClock::now();
    while (!stopping.load()) {
      if (!sleep_until(next)) return;
      if (!lease_held()) {
        // The Singleton stops this source soon; do nothing meanwhile.
        next = SteadyClock::now() + std::min<milliseconds>(spec.every, milliseconds(100));
        continue;
      }
      const auto began = SteadyClock::now();
      Outcome o = poll_once();
      if (deposed) {
        // Park until stopped: the new holder owns the cursor now.
        UniqueLock lock(mu);
        lock.wait(wake, [&] { return stopping.load(); });
        return;
      }
      if (o.ok) {
        failures = 0;
        next = std::max(began + spec.every, SteadyClock::now());
      } else {
        next = SteadyClock::now() + std::max(backoff(++failures), std::min(o.retry_after, milliseconds(3600000)));
      }
    }
  }
};

PollSource::PollSource(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PollSource::~PollSource() { stop(); }

Result<std::unique_ptr<PollSource>> PollSource::create(const flows::PollSourceSpec& spec, std::string flow,
                                                       PollSourceOptions options) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  auto http_url = [](const std::string& u) { return u.rfind("http://", 0) == 0 || u.rfind("https://", 0) == 0; };
  if (!http_url(spec.url)) return Status::invalid("poll: url must start with http:// or https://");
  if (spec.every.count() < 1) return Status::invalid("poll: `every` must be at least 1ms");
  if (!spec.cursor_field.empty() && spec.cursor_param.empty()) {
    return Status::invalid("poll: cursor_field needs cursor_param");
  }
  if (options.max_pages < 1 || options.max_in_flight < 1 || options.max_body < 1) {
    return Status::invalid("poll: max_pages, max_in_flight and max_body must be positive");
  }
  auto impl = std::make_unique<Impl>();
  impl->spec = spec;
  impl->flow = std::move(flow);
  impl->options = std::move(options);
  impl->where = redact_url(spec.url);
  impl->key = poll::state_key(impl->flow, spec.url);
  for (const auto& [name, value] : spec.headers) {
    if (!valid_header_name(name)) return Status::invalid("poll: header name '" + name + "' is not valid");
    // The value may hold a secret: name the header only.
    if (!valid_header_value(value)) return Status::invalid("poll: header " + name + " has a line break in its value");
    if (spec.oauth2 && iequals(name, "Authorization")) continue;  // the token replaces it
    impl->headers.emplace_back(name, value);
  }
  if (std::none_of(impl->headers.begin(), impl->headers.end(),
                   [](const auto& h) { return iequals(h.first, "Accept"); })) {
    impl->headers.emplace_back("Accept", "application/json");
  }
  if (spec.oauth2) {
    const auto& o = *spec.oauth2;
    if (!http_url(o.token_url)) return Status::invalid("poll: oauth2.token_url must start with http:// or https://");
    impl->oauth.token_url = o.token_url;
    impl->oauth.token_where = redact_url(o.token_url);
    impl->oauth.scopes = o.scopes;
    if (Status st = oauth2::read_credentials("poll", o.client_id_env, o.client_secret_env, impl->options.env,
                                             &impl->oauth);
        !st) {
      return st;
    }
  }
  return std::unique_ptr<PollSource>(new PollSource(std::move(impl)));
}

Status PollSource::start(SourceContext& context) {
  Impl& m = *impl_;
  if (m.started) return Status::invalid("poll: started twice");
  if (context.ingest == nullptr) return Status::invalid("poll: no ingest");
  m.curl = curl_easy_init();
  if (m.curl == nullptr) return Status::internal("poll: curl_easy_init failed");
  m.context = context;
  if (m.context.state == nullptr) {
    log::warn("poll: no state store; the cursor and ETag are kept in memory only", {{"flow", m.flow}});
  }
  m.stopping = false;
  m.started = true;
  m.thread = std::thread([&m] { m.run(); });
  pthread_setname_np(m.thread.native_handle(), "poll-src");
  return Status::ok();
}

void PollSource::stop() {
  Impl& m = *impl_;
  if (!m.started) return;
  {
    MutexLock lock(m.mu);
    m.stopping = true;
  }
  m.wake.notify_all();
  m.thread.join();
  m.started = false;
}

uint64_t PollSource::polls() const { return impl_->polls.load(std::memory_order_acquire); }
uint64_t PollSource::events_published() const { return impl_->published.load(std::memory_order_acquire); }
uint64_t PollSource::token_fetches() const { return impl_->token_fetches.load(std::memory_order_acquire); }

}  // namespace weir::connectors

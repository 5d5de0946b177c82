// The flow file schema: YAML/JSON source tree → validated specs and compiled steps.
// Every problem becomes a Diagnostic with file:line:column; loading goes on after a
// problem so that one run reports all of them.
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <fstream>
#include <optional>
#include <tuple>
#include <set>
#include <sstream>
#include <sys/stat.h>

#include "flows/cron.h"
#include "flows/program.h"
#include "flows/request_meta.h"
#include "flows/schema.h"
#include "flows/source_tree.h"
#include "flows/testing.h"
#include "flows/text.h"
#include "flows/value.h"

namespace weir::flows {

namespace {

constexpr int kMaxStepNesting = 16;
constexpr int64_t kMaxTableBytes = 512LL << 20;

bool valid_name(std::string_view s) {
  if (s.empty() || s.size() > 63 || !(s[0] >= 'a' && s[0] <= 'z')) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  }
  return true;
}

bool valid_identifier(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// A NATS subject a flow may not read or write (docs/adr/0274): weir's own (`weir.…` and a
// cluster's `weirc.…`, runtime/nats/bus_names.cc) hold other flows' events, and every
// `$`-prefixed one is the server's (`$JS.API`, `$KV`, `$SYS`): a flow reaching them could
// read or rewrite other flows' events, state and streams. A source subject that starts
// with a wildcard would match weir's own subjects too. nullptr when the subject is fine.
const char* reserved_subject(std::string_view subject, bool source) {
  if (!subject.empty() && subject[0] == '$') return "is a NATS system subject ($…); flows may not use those";
  const std::string_view first = subject.substr(0, subject.find('.'));
  if (first == "weir" || first == "weirc") {
    return "is inside weir's own subjects (weir.…, weirc.…); chain flows with a `flow` sink and source";
  }
  if (source && (first == "*" || first == ">")) {
    return "starts with a wildcard, which would match weir's own subjects too; name its first token";
  }
  return nullptr;
}

// An HTTP sink's `rate:` — "<number>/s", "/min" or "/h" — as deliveries per second, or
// the reason it is not one. The number is a plain decimal (digits with at most one point:
// `0.5/s` is one every 2 s); signs, exponents and words are refused so that a typo cannot
// read as some other rate. Bounds: at most 1,000,000/s (the token bucket's interval is
// whole nanoseconds, runtime/base/token_bucket.h) and at least one a day.
constexpr double kMaxRatePerSecond = 1e6;
constexpr double kMinRatePerSecond = 1.0 / 86400;

std::optional<double> parse_rate(std::string_view text, std::string* why) {
  const size_t slash = text.find('/');
  std::string_view number = text.substr(0, slash);
  while (!number.empty() && number.back() == ' ') number.remove_suffix(1);
  bool digits = false;
  int points = 0;
  for (char c : number) {
    if (c >= '0' && c <= '9') {
      digits = true;
    } else if (c == '.') {
      ++points;
    } else {
      digits = false;
      break;
    }
  }
  if (!digits || points > 1) {
    *why = "must be a positive number per unit such as 200/s, 30/min, 1000/h or 0.5/s";
    return std::nullopt;
  }
  if (slash == std::string_view::npos) {
    *why = "needs a unit: N/s, N/min or N/h (e.g. 200/s)";
    return std::nullopt;
  }
  std::string_view unit = text.substr(slash + 1);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  double per = 0;  // seconds per unit
  if (unit == "s") {
    per = 1;
  } else if (unit == "min") {
    per = 60;
  } else if (unit == "h") {
    per = 3600;
  } else {
    *why = "has an unknown unit \"/" + std::string(unit) + "\"; use /s, /min or /h";
    return std::nullopt;
  }
  const double n = std::strtod(std::string(number).c_str(), nullptr);
  if (!(n > 0)) {
    *why = "must be more than 0 (leave `rate` out for no limit)";
    return std::nullopt;
  }
  const double per_s = n / per;
  if (per_s > kMaxRatePerSecond) {
    *why = "must be at most 1000000/s";
    return std::nullopt;
  }
  if (per_s < kMinRatePerSecond) {
    *why = "must be at least one a day (e.g. 1/h or 0.05/h)";
    return std::nullopt;
  }
  return per_s;
}

std::string join(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string quote(const std::string& s) { return "\"" + s + "\""; }

// RFC 9110 token characters: what an HTTP header name may hold.
bool valid_header_name(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c)) != 0) continue;
    if (std::string_view("!#$%&'*+-.^_`|~").find(c) == std::string_view::npos) return false;
  }
  return true;
}

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string dirname_of(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

bool read_file(const std::string& path, int64_t max_bytes, std::string* out, std::string* error) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    *error = "cannot read " + path + ": " + std::strerror(errno);
    return false;
  }
  if (S_ISDIR(st.st_mode)) {
    *error = path + " is a directory";
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    // A device or FIFO (/dev/zero, /dev/stdin) would never end or never answer.
    *error = path + " is not a regular file";
    return false;
  }
  if (st.st_size > max_bytes) {
    *error = path + " is larger than " + std::to_string(max_bytes >> 20) + " MiB";
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot read " + path + ": " + std::strerror(errno);
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

class Loader {
 public:
  Loader(std::string_view source, std::string file, std::string dir, bool allow_table_files,
         std::vector<Diagnostic>* diags)
      : src_(source), file_(std::move(file)), dir_(std::move(dir)), allow_table_files_(allow_table_files), d_(*diags) {
    // Offsets of line starts, to place errors inside expressions.
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::shared_ptr<const Flow> load(const SrcNode& root);

 private:
  // ---- diagnostics ------------------------------------------------------------------

  void error(const SrcNode& at, std::string message) {
    // A scalar whose ${} substitution failed is reported already; its text is no use.
    if (at.bad) return;
    d_.push_back(Diagnostic{Location{file_, at.line, at.column}, std::move(message)});
  }

  // The place of byte `offset` of an expression written in scalar `n`: walks the source
  // from the scalar's start, matching the scalar's text (which has quotes, escapes,
  // block indentation and folded line breaks taken out).
  Location expr_location(const SrcNode& n, size_t offset) const {
    std::string_view t(n.text);
    offset = std::min(offset, t.size());
    size_t j = n.offset >= 0 ? static_cast<size_t>(n.offset) : 0;
    const size_t size = src_.size();
    auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
    if (n.block) {
      // `|` / `>`: the content starts on the next line; its indentation is the first
      // content line's.
      size_t next = static_cast<size_t>(n.line);  // 0-based index of the next line
      if (next >= line_starts_.size()) return Location{file_, n.line, n.column};
      j = line_starts_[next];
      size_t indent = 0;
      while (j + indent < size && src_[j + indent] == ' ') ++indent;
      j += indent;
      for (size_t i = 0; i < offset && j < size; ++i) {
        if (t[i] == '\n') {
          while (j < size && src_[j] != '\n') ++j;
          if (j < size) ++j;
          for (size_t k = 0; k < indent && j < size && src_[j] == ' '; ++k) ++j;
        } else {
          ++j;
        }
      }
    } else {
      if (n.quoted && j < size && (src_[j] == '"' || src_[j] == '\'')) ++j;
      for (size_t i = 0; i < offset && j < size; ++i) {
        // A matching byte and any other both advance by one; the order of the tests matters.
        // NOLINTNEXTLINE(bugprone-branch-clone)
        if (src_[j] == t[i]) {
          ++j;
        } else if (t[i] == ' ' && is_space(src_[j])) {
          while (j < size && is_space(src_[j])) ++j;  // a folded line break
        } else if (src_[j] == '\\') {
          j += j + 1 < size && src_[j + 1] == 'u' ? 6 : 2;  // an escape
        } else if (src_[j] == '\'' && j + 1 < size && src_[j + 1] == '\'') {
          j += 2;  // '' in a single-quoted scalar
        } else {
          ++j;
        }
      }
    }
    j = std::min(j, size);
    size_t line = static_cast<size_t>(std::upper_bound(line_starts_.begin(), line_starts_.end(), j) -
                                      line_starts_.begin());
    size_t start = line_starts_[line - 1];
    return Location{file_, static_cast<int>(line), 1 + static_cast<int>(utf8_length(src_.substr(start, j - start)))};
  }

  // ---- typed getters -----------------------------------------------------------------

  bool is_map(const SrcNode& n, const std::string& what) {
    if (n.is_map()) return true;
    error(n, what + " must be a mapping, got " + n.describe());
    return false;
  }

  // `allowed`: one of flows/schema.h's key lists (the docs test reads the same lists).
  void check_keys(const SrcNode& map, const std::string& what, schema::Keys allowed) {
    for (const auto& k : map.keys) {
      bool ok = false;
      for (std::string_view a : allowed) ok = ok || k.text == a;
      if (ok) continue;
      std::vector<std::string> names(allowed.begin(), allowed.end());
      // A near miss names the one key meant (docs/connectors.md); otherwise the whole list.
      if (std::string near = did_you_mean(k.text, names, true); !near.empty()) {
        error(k, "unknown key " + quote(k.text) + " in " + what + " (" + near + ")");
      } else {
        error(k, "unknown key " + quote(k.text) + " in " + what + "; expected one of: " + join(names));
      }
    }
  }

  // Key of a single-key mapping such as a step or a source; reports otherwise.
  const SrcNode* single_key(const SrcNode& map, const std::string& what, std::string* key) {
    if (!is_map(map, what)) return nullptr;
    if (map.keys.size() != 1) {
      error(map, what + " must have exactly one key, found " + std::to_string(map.keys.size()));
      return nullptr;
    }
    *key = map.keys[0].text;
    return &map.items[0];
  }

  bool scalar_text(const SrcNode& n, const std::string& what, std::string* out, bool allow_empty = false) {
    if (!n.is_scalar() || (!allow_empty && n.text.empty())) {
      error(n, what + " must be a string, got " + (n.is_scalar() ? std::string("an empty string") : n.describe()));
      return false;
    }
    *out = n.text;
    return true;
  }

  bool get_string(const SrcNode& map, const char* key, const std::string& what, std::string* out,
                  bool required = false) {
    const SrcNode* n = map.get(key);
    if (n == nullptr) {
      if (required) error(map, what + " needs `" + key + "`");
      return false;
    }
    return scalar_text(*n, what + "." + key, out);
  }

  bool get_int(const SrcNode& map, const char* key, const std::string& what, int64_t lo, int64_t hi, int64_t* out) {
    const SrcNode* n = map.get(key);
    if (n == nullptr) return false;
    Json v = n->is_scalar() ? resolve_plain_scalar(n->text) : Json();
    int64_t i;
    if (!n->is_scalar() || !weir::flows::get_int(v, &i)) {
      error(*n, what + "." + key + " must be an integer, got " + n->describe());
      return false;
    }
    if (i < lo || i > hi) {
      error(*n, what + "." + key + " must be between " + std::to_string(lo) + " and " + std::to_string(hi));
      return false;
    }
    *out = i;
    return true;
  }

  template <typename T>
  void get_int_into(const SrcNode& map, const char* key, const std::string& what, int64_t lo, int64_t hi, T* out) {
    int64_t v;
    if (get_int(map, key, what, lo, hi, &v)) *out = static_cast<T>(v);
  }

  bool get_bool(const SrcNode& map, const char* key, const std::string& what, bool* out) {
    const SrcNode* n = map.get(key);
    if (n == nullptr) return false;
    Json v = n->is_scalar() ? resolve_plain_scalar(n->text) : Json();
    if (!v.is_boolean()) {
      error(*n, what + "." + key + " must be true or false, got " + n->describe());
      return false;
    }
    *out = v.get<bool>();
    return true;
  }

  bool get_duration(const SrcNode& map, const char* key, const std::string& what, Millis* out) {
    const SrcNode* n = map.get(key);
    if (n == nullptr) return false;
    std::optional<Millis> d;
    if (n->is_scalar()) d = parse_duration(n->text);
    if (!d || d->count() <= 0) {
      error(*n, what + "." + key + " must be a positive duration such as 250ms, 2s, 1m or 1h, got " +
                    (n->is_scalar() ? quote(n->text) + ": " + duration_hint(n->text) : n->describe()));
      return false;
    }
    *out = *d;
    return true;
  }

  bool get_size(const SrcNode& map, const char* key, const std::string& what, int64_t* out) {
    const SrcNode* n = map.get(key);
    if (n == nullptr) return false;
    std::optional<int64_t> s;
    if (n->is_scalar()) s = parse_size(n->text);
    if (!s || *s <= 0) {
      error(*n, what + "." + key + " must be a positive size such as 512KiB, 1MiB or a number of bytes");
      return false;
    }
    *out = *s;
    return true;
  }

  bool get_rate(const SrcNode& map, const char* key, const std::string& what, double* per_s, std::string* text) {
    const SrcNode* n = map.get(key);
    if (n == nullptr) return false;
    std::string why = "must be a rate such as 200/s, 30/min or 1000/h";
    std::optional<double> r;
    if (n->is_scalar()) r = parse_rate(n->text, &why);
    if (!r) {
      error(*n, what + "." + key + " " + why + ", got " + (n->is_scalar() ? quote(n->text) : n->describe()));
      return false;
    }
    *per_s = *r;
    *text = n->text;
    return true;
  }

  bool get_string_map(const SrcNode& map, const char* key, const std::string& what,
                      std::map<std::string, std::string>* out) {
    const SrcNode* n = map.get(key);
    if (n == nullptr) return false;
    if (!is_map(*n, what + "." + key)) return false;
    bool ok = true;
    for (size_t i = 0; i < n->keys.size(); ++i) {
      std::string v;
      if (scalar_text(n->items[i], what + "." + key + "." + n->keys[i].text, &v, true)) {
        (*out)[n->keys[i].text] = v;
      } else {
        ok = false;
      }
    }
    return ok;
  }

  // `retry: {backoff: [1s, 5s, ...], give_up_after: 72h}` (docs/adr/0295): either key may be
  // left out (its default stays).
  void retry_schedule(const SrcNode& n, const std::string& what, RetrySpec* out) {
    if (!is_map(n, what)) return;
    check_keys(n, what, schema::kHttpSinkRetry);
    if (const SrcNode* b = n.get("backoff")) {
      if (!b->is_seq() || b->items.empty() || b->items.size() > 32) {
        error(*b, what + ".backoff must be a list of 1 to 32 durations such as [1s, 5s, 30s, 2m, 1h], got " +
                      b->describe());
      } else {
        std::vector<Millis> steps;
        for (size_t i = 0; i < b->items.size(); ++i) {
          const SrcNode& item = b->items[i];
          std::optional<Millis> d;
          if (item.is_scalar()) d = parse_duration(item.text);
          if (!d || d->count() <= 0 || *d > std::chrono::hours(24)) {
            error(item, what + ".backoff[" + std::to_string(i) +
                            "] must be a positive duration of at most 24h such as 500ms, 5s, 2m or 1h, got " +
                            (item.is_scalar() ? quote(item.text) + ": " + duration_hint(item.text) : item.describe()));
            return;
          }
          steps.push_back(*d);
        }
        out->backoff = std::move(steps);
      }
    }
    get_duration(n, "give_up_after", what, &out->give_up_after);
  }

  bool get_string_list(const SrcNode& n, const std::string& what, std::vector<std::string>* out) {
    if (!n.is_seq()) {
      error(n, what + " must be a list of strings, got " + n.describe());
      return false;
    }
    bool ok = true;
    for (size_t i = 0; i < n.items.size(); ++i) {
      std::string v;
      if (scalar_text(n.items[i], what + "[" + std::to_string(i) + "]", &v)) out->push_back(v);
      else ok = false;
    }
    return ok;
  }

  void check_env_name(const SrcNode& map, const char* key, const std::string& what, std::string* out) {
    if (!get_string(map, key, what, out)) return;
    const SrcNode& at = *map.get(key);
    if (!valid_identifier(*out)) {
      error(at, what + "." + key + " must name an environment variable (letters, digits, _)");
      return;
    }
    // MQTT takes an empty user name or password; the other secrets must have a value (the
    // connectors' own checks at start, which Flow::secret_variables lets run ahead of them).
    const std::string_view k(key);
    secrets_.push_back(SecretVariable{*out, what + "." + key, Location{file_, at.line, at.column},
                                      k == "username_env" || k == "password_env"});
  }

  // `schemes` without "://" (schema::kMqttSourceSchemes, …).
  bool check_url(const SrcNode& map, const char* key, const std::string& what, std::string* out, bool required,
                 schema::Keys schemes) {
    std::vector<std::string> prefixes;
    for (std::string_view s : schemes) prefixes.push_back(std::string(s) + "://");
    return check_url(map, key, what, out, required, prefixes);
  }

  // True when `key` is there and a URL with one of `schemes`.
  bool check_url(const SrcNode& map, const char* key, const std::string& what, std::string* out, bool required,
                 const std::vector<std::string>& schemes) {
    if (!get_string(map, key, what, out, required)) return false;
    bool ok = false;
    for (const std::string& s : schemes) ok = ok || out->rfind(s, 0) == 0;
    if (!ok || out->find_first_of(" \t\r\n") != std::string::npos) {
      error(*map.get(key),
            what + "." + key + " must be a URL starting with " + join(schemes, " or ") + ", got " + quote(*out));
      return false;
    }
    return true;
  }

  // An expression a connector evaluates per event (the MQTT topic, `order_by`), compiled
  // here so a typo is a load error with line and column; null after an error.
  std::shared_ptr<const EventExpression> event_expression(const SrcNode& e, const std::string& what) {
    if (!e.is_scalar() || (!e.quoted && !resolve_plain_scalar(e.text).is_string())) {
      error(e, what + " must be an expression (a string), got " + e.describe());
      return nullptr;
    }
    Expression x;
    if (!compile(e, what, &x)) return nullptr;
    return std::make_shared<EventExpression>(e.text, std::make_shared<Expression>(std::move(x)));
  }

  // The MQTT sink's topic (docs/adr/0181): text is the topic as written; an expression
  // only when written as one, `topic: {expr: …}`, compiled here so a typo is a load error.
  void mqtt_sink_topic(const SrcNode& n, const std::string& w, MqttSinkSpec* s) {
    const SrcNode* t = n.get("topic");
    if (t == nullptr) {
      error(n, w + " needs `topic`");
      return;
    }
    if (t->is_map()) {
      check_keys(*t, w + ".topic", schema::kMqttSinkTopic);
      const SrcNode* e = t->get("expr");
      if (e == nullptr) {
        if (t->keys.empty())
          error(*t, w + ".topic needs `expr` (an expression over the event), or write the topic as text");
        return;
      }
      s->topic_expr = event_expression(*e, w + ".topic.expr");
      return;
    }
    if (!scalar_text(*t, w + ".topic", &s->topic)) return;
    // Until 0181 a topic was an expression "when it compiles and reads the event", and a
    // quoted constant was unquoted: such text is refused rather than published to as is.
    Expression old_rule;
    CompileError ignored;
    if (Expression::compile(s->topic, CompileScope{}, &old_rule, &ignored) &&
        (old_rule.reads_this() || (old_rule.constant_value() && old_rule.constant_value()->is_string()))) {
      error(*t, w + ".topic " + quote(s->topic) + " is an expression; write `topic: {expr: " + quote(s->topic) +
                    "}` for a topic computed per event, or the topic itself as plain text");
      return;
    }
    if (s->topic.find_first_of("+#") != std::string::npos) {
      error(*t, w + ".topic " + quote(s->topic) +
                    " has + or #, which one cannot publish to (an expression is written `topic: {expr: …}`)");
    }
  }

  // ---- HTTP sink: header expressions and signing ---------------------------------------

  // `headers:` of an HTTP sink (docs/adr/0301): a fixed value as text, or `{expr: …}`
  // compiled here, so a typo is a load error with its line and column.
  void http_sink_headers(const SrcNode& n, const std::string& w, HttpSinkSpec* s) {
    const SrcNode* h = n.get("headers");
    if (h == nullptr) return;
    const std::string what = w + ".headers";
    if (!is_map(*h, what)) return;
    for (size_t i = 0; i < h->keys.size(); ++i) {
      const std::string& name = h->keys[i].text;
      const SrcNode& v = h->items[i];
      const std::string wn = what + "." + name;
      if (!valid_header_name(name)) {
        error(h->keys[i], what + ": " + quote(name) + " is not a header name (letters, digits and !#$%&'*+-.^_`|~)");
        continue;
      }
      for (size_t j = 0; j < i; ++j) {
        if (iequal(h->keys[j].text, name)) {
          error(h->keys[i],
                what + ": " + quote(name) + " repeats " + quote(h->keys[j].text) + " (header names ignore case)");
        }
      }
      if (!v.is_map()) {
        std::string text;
        if (scalar_text(v, wn, &text, true)) s->headers[name] = text;
        continue;
      }
      check_keys(v, wn, schema::kHttpSinkHeaderExpr);
      const SrcNode* e = v.get("expr");
      if (e == nullptr) {
        if (v.keys.empty()) error(v, wn + " needs `expr` (an expression over the event), or write the value as text");
        continue;
      }
      if (!e->is_scalar() || (!e->quoted && !resolve_plain_scalar(e->text).is_string())) {
        error(*e, wn + ".expr must be an expression (a string), got " + e->describe());
        continue;
      }
      Expression x;
      if (compile(*e, wn + ".expr", &x)) {
        s->header_exprs[name] = std::make_shared<EventExpression>(e->text, std::make_shared<Expression>(std::move(x)));
      }
    }
  }

  // `url:` text, or `{base, expr, allow}` (docs/adr/0317-per-event-urls.md): the base and
  // each allowed origin are scheme://host[:port] and nothing more, so what an event
  // computes can change the path and query only, or pick one of the origins listed.
  void http_sink_url(const SrcNode& n, const std::string& w, HttpSinkSpec* s) {
    const SrcNode* u = n.get("url");
    if (u == nullptr || !u->is_map()) {
      check_url(n, "url", w, &s->url, true, {"http://", "https://"});
      return;
    }
    const std::string what = w + ".url";
    check_keys(*u, what, schema::kHttpSinkUrl);
    if (check_url(*u, "base", what, &s->url, true, {"http://", "https://"}))
      origin_only(*u->get("base"), what + ".base", s->url);
    if (const SrcNode* e = u->get("expr")) {
      s->url_expr = event_expression(*e, what + ".expr");
    } else {
      error(*u, what + " needs `expr` (the path, or the URL, of each delivery), or write the url as text");
    }
    const SrcNode* a = u->get("allow");
    if (a == nullptr) return;
    if (!a->is_seq()) {
      error(*a, what + ".allow must be a list of origins (scheme://host[:port]), got " + a->describe());
      return;
    }
    for (size_t i = 0; i < a->items.size(); ++i) {
      const SrcNode& item = a->items[i];
      const std::string wi = what + ".allow[" + std::to_string(i) + "]";
      std::string text;
      if (!scalar_text(item, wi, &text, true)) continue;
      if (text.rfind("http://", 0) != 0 && text.rfind("https://", 0) != 0) {
        error(item, wi + " must be an origin starting with http:// or https://, got " + quote(text));
        continue;
      }
      if (origin_only(item, wi, text)) s->url_allow.push_back(text);
    }
  }

  // True when `url` (already known to start with a scheme) is scheme://host[:port] with at
  // most a trailing '/': no user, path, query or fragment.
  bool origin_only(const SrcNode& at, const std::string& what, const std::string& url) {
    const size_t host = url.find("://") + 3;
    const size_t end = url.find_first_of("/?#", host);
    const std::string authority = url.substr(host, end == std::string::npos ? std::string::npos : end - host);
    const bool bare = end == std::string::npos || url.substr(end) == "/";
    if (bare && !authority.empty() && authority.find('@') == std::string::npos) return true;
    error(at, what +
                  " must be an origin, scheme://host[:port] without a user, path or query (the expression "
                  "gives the path), got " +
                  quote(url));
    return false;
  }

  // `sign: {scheme, secret_env | secrets_env}` (docs/adr/0300). The secrets themselves are
  // read when the sink starts: `weir validate` needs none of them.
  void http_sink_sign(const SrcNode& n, const std::string& w, HttpSinkSpec* s) {
    const SrcNode* g = n.get("sign");
    if (g == nullptr) return;
    const std::string what = w + ".sign";
    if (!is_map(*g, what)) return;
    check_keys(*g, what, schema::kHttpSinkSign);
    std::string scheme = "standard";
    if (get_string(*g, "scheme", what, &scheme)) {
      if (scheme == "standard") {
        s->sign.scheme = HttpSignSpec::Scheme::kStandard;
      } else if (scheme == "github") {
        s->sign.scheme = HttpSignSpec::Scheme::kGithub;
      } else {
        error(*g->get("scheme"), what + ".scheme must be standard or github, got " + quote(scheme));
        return;
      }
    }
    const SrcNode* one = g->get("secret_env");
    const SrcNode* many = g->get("secrets_env");
    if ((one != nullptr) == (many != nullptr)) {
      error(*g, what + " needs one of `secret_env` (an environment variable) or `secrets_env` (a list of them, " +
                    "the new secret first, while the receiver rotates)");
      return;
    }
    std::vector<std::string> envs;
    const SrcNode& list = one != nullptr ? *one : *many;
    const std::string lw = what + (one != nullptr ? ".secret_env" : ".secrets_env");
    if (one != nullptr) {
      std::string env;
      if (!scalar_text(*one, lw, &env)) return;
      envs.push_back(env);
    } else if (!get_string_list(*many, lw, &envs)) {
      return;
    }
    if (envs.empty() || envs.size() > 4) {
      error(list, lw + " must name 1 to 4 environment variables, got " + std::to_string(envs.size()));
      return;
    }
    for (size_t i = 0; i < envs.size(); ++i) {
      if (!valid_identifier(envs[i])) {
        error(list, lw + ": " + quote(envs[i]) + " must name an environment variable (letters, digits, _)");
        return;
      }
      for (size_t j = 0; j < i; ++j) {
        if (envs[j] == envs[i]) {
          error(list, lw + " names " + envs[i] + " twice");
          return;
        }
      }
    }
    if (s->sign.scheme == HttpSignSpec::Scheme::kGithub && envs.size() > 1) {
      error(list, lw + ": scheme github has one signature header (X-Hub-Signature-256), so it signs with one " +
                      "secret; to rotate, let the receiver accept both, then change secret_env " +
                      "(docs/adr/0300-outbound-webhook-signatures.md)");
      return;
    }
    // A header of the same name beside the signature would confuse every receiver.
    const std::vector<std::string_view> signed_names = s->sign.scheme == HttpSignSpec::Scheme::kGithub
                                                           ? std::vector<std::string_view>{"X-Hub-Signature-256"}
                                                           : std::vector<std::string_view>{"webhook-id",
                                                                                           "webhook-timestamp",
                                                                                           "webhook-signature"};
    if (const SrcNode* h = n.get("headers"); h != nullptr && h->is_map()) {
      for (const SrcNode& key : h->keys) {
        for (std::string_view sn : signed_names) {
          if (iequal(key.text, sn)) error(key, w + ".headers." + key.text + " is set by `sign`; remove it here");
        }
      }
    }
    s->sign.secret_envs = std::move(envs);
  }

  // ---- expressions ----------------------------------------------------------------

  bool compile(const SrcNode& n, const std::string& what, Expression* out) {
    if (n.is_null()) {
      *out = Expression::constant(Json(), "null");
      return true;
    }
    if (!n.is_scalar()) {
      error(n, what + " must be an expression (a string), a number, a boolean or null, got " + n.describe());
      return false;
    }
    if (!n.quoted) {
      Json v = resolve_plain_scalar(n.text);
      if (!v.is_string()) {
        *out = Expression::constant(std::move(v), n.text);
        return true;
      }
    }
    CompileScope scope;
    scope.tables = &program_->tables;
    CompileError ce;
    if (!Expression::compile(n.text, scope, out, &ce)) {
      d_.push_back(Diagnostic{expr_location(n, ce.offset), "invalid expression in " + what + ": " + ce.message});
      return false;
    }
    return true;
  }

  bool field_path(const SrcNode& key, const std::string& what, FieldPath* out) {
    std::string t = key.text;
    if (t.rfind("this.", 0) == 0) t = t.substr(5);
    out->text = t;
    out->names.clear();
    if (t.empty() || t == "this") {
      error(key, what + ": target " + quote(key.text) + " is not a field path (write a.b.c)");
      return false;
    }
    size_t start = 0;
    while (true) {
      size_t dot = t.find('.', start);
      std::string seg = t.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      if (seg.empty()) {
        error(key, what + ": target " + quote(key.text) + " has an empty part");
        return false;
      }
      out->names.push_back(std::move(seg));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    return true;
  }

  // set:/map: fields; nested mappings stand for dotted paths (`a: {b: x}` = `a.b: x`).
  void fields(const SrcNode& map, const std::string& what, const std::vector<std::string>& prefix,
              std::vector<Step::Field>* out, int depth) {
    if (depth > kMaxSourceDepth) return;
    for (size_t i = 0; i < map.keys.size(); ++i) {
      const SrcNode& key = map.keys[i];
      const SrcNode& value = map.items[i];
      FieldPath path;
      if (!field_path(key, what, &path)) continue;
      FieldPath full;
      full.names = prefix;
      full.names.insert(full.names.end(), path.names.begin(), path.names.end());
      full.text = join(full.names, ".");
      if (value.is_map() && !value.keys.empty()) {
        fields(value, what, full.names, out, depth + 1);
        continue;
      }
      Step::Field f;
      f.path = full;
      if (value.is_map()) {
        f.value = Expression::constant(Json::object(), "{}");
      } else if (!compile(value, what + "." + full.text, &f.value)) {
        continue;
      }
      out->push_back(std::move(f));
    }
    // Two fields writing the same place (or one inside the other) are a mistake.
    for (size_t a = 0; a < out->size(); ++a) {
      for (size_t b = a + 1; b < out->size(); ++b) {
        const auto& x = (*out)[a].path.names;
        const auto& y = (*out)[b].path.names;
        size_t n = std::min(x.size(), y.size());
        if (depth == 0 && std::equal(x.begin(), x.begin() + static_cast<long>(n), y.begin())) {
          error(map, what + ": " + quote((*out)[b].path.text) + " overlaps " + quote((*out)[a].path.text));
        }
      }
    }
  }

  // ---- parts of the file -------------------------------------------------------------

  // The body of an `oauth2:` mapping (a poll source's, an HTTP sink's), its keys already
  // checked against the section's schema: the poll source spells the scopes `scopes`, the
  // sink `scope` (RFC 6749's name); either is a space-separated string or a list.
  OAuth2Spec oauth2_spec(const SrcNode& o, const std::string& ow) {
    OAuth2Spec oa;
    // The client secret is posted to token_url: plain http only when written deliberately
    // (a token endpoint on this host, say).
    bool insecure_http = false;
    get_bool(o, "insecure_http", ow, &insecure_http);
    check_url(o, "token_url", ow, &oa.token_url, true, {"http://", "https://"});
    if (!insecure_http && oa.token_url.rfind("http://", 0) == 0) {
      error(*o.get("token_url"), ow + ".token_url must be https:// (the client secret is sent to it); add "
                                      "`insecure_http: true` to send it over plain http deliberately");
    }
    if (!o.get("client_id_env")) error(o, ow + " needs `client_id_env`");
    if (!o.get("client_secret_env")) error(o, ow + " needs `client_secret_env`");
    check_env_name(o, "client_id_env", ow, &oa.client_id_env);
    check_env_name(o, "client_secret_env", ow, &oa.client_secret_env);
    for (const char* key : {"scopes", "scope"}) {
      const SrcNode* sc = o.get(key);
      if (sc == nullptr) continue;
      if (sc->is_scalar()) {
        std::istringstream in(sc->text);
        for (std::string w; in >> w;) oa.scopes.push_back(w);
      } else {
        get_string_list(*sc, ow + "." + key, &oa.scopes);
      }
    }
    return oa;
  }

  // An HTTP sink's `tls:` and `oauth2:` (docs/adr/0302-http-sink-tls-and-oauth2.md). The
  // files are only named here: the sink reads and checks them when it starts.
  void http_sink_auth(const SrcNode& n, const std::string& w, HttpSinkSpec* s) {
    if (const SrcNode* t = n.get("tls"); t != nullptr && is_map(*t, w + ".tls")) {
      const std::string tw = w + ".tls";
      check_keys(*t, tw, schema::kHttpSinkTls);
      HttpSinkSpec::Tls tls;
      const size_t before = d_.size();
      for (auto [key, out] : {std::pair{"ca_file", &tls.ca_file}, std::pair{"cert_file", &tls.cert_file},
                              std::pair{"key_file", &tls.key_file}}) {
        // (An empty string is get_string's error.)
        if (!get_string(*t, key, tw, out) || out->empty()) continue;
        if (out->front() != '/' && !dir_.empty()) {
          *out = dir_ + "/" + *out;  // relative to the flow file, as tables' files are
        }
      }
      if (t->keys.empty()) error(*t, tw + " needs `ca_file`, or `cert_file` with `key_file`, or all three");
      if (t->get("cert_file") && !t->get("key_file")) error(*t, tw + ".cert_file needs `key_file` too");
      if (t->get("key_file") && !t->get("cert_file")) error(*t, tw + ".key_file needs `cert_file` too");
      // Only an http:// url, which check_url accepted, gets this error: another scheme has
      // check_url's own, and one error per mistake is enough.
      if (s->url.rfind("http://", 0) == 0) {
        error(*t, tw + ": TLS settings need an https:// url, and " + w + ".url is http://");
      }
      if (d_.size() == before) s->tls = tls;
    }
    if (const SrcNode* o = n.get("oauth2"); o != nullptr && is_map(*o, w + ".oauth2")) {
      const std::string ow = w + ".oauth2";
      check_keys(*o, ow, schema::kHttpSinkOauth2);
      s->oauth2 = oauth2_spec(*o, ow);
      for (const auto& [name, value] : s->headers) {
        std::string lower = name;
        for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (lower == "authorization") {
          error(*n.get("headers"), w + ".headers sets Authorization, which `oauth2` sends: remove one of them");
        }
      }
    }
  }

  bool source(const SrcNode& n, SourceSpec* out);
  void meta_headers(const SrcNode& n, const std::string& what, HttpSourceSpec* s);
  void sinks(const SrcNode& n);
  void tables(const SrcNode& n);
  void steps(const SrcNode& list, const std::string& what, int top_index, const std::string& path_prefix,
             std::vector<Step>* out, int depth);
  void step(const SrcNode& n, const std::string& what, int index, const std::string& path_prefix, Step* out, bool* ok,
            int depth);
  bool check_sink_ref(const SrcNode& n, const std::string& what, std::string* out);
  void arm_route(const SrcNode& n, const std::string& what, Arm* arm);
  void tests(const SrcNode& n);

  std::string_view src_;
  std::string file_, dir_;
  bool allow_table_files_;
  std::vector<Diagnostic>& d_;
  std::vector<size_t> line_starts_;
  std::string flow_name_;
  std::vector<SinkSpec> sinks_;
  std::vector<SecretVariable> secrets_;
  std::unique_ptr<Program> program_;
};

// ---- sources -----------------------------------------------------------------------

// `from.http.meta_headers`: names added to the stored request headers (flows/request_meta.h,
// docs/adr/0312-request-metadata.md). Credentials and signatures are refused.
void Loader::meta_headers(const SrcNode& n, const std::string& what, HttpSourceSpec* s) {
  std::vector<std::string> names;
  if (!get_string_list(n, what, &names)) return;
  if (names.size() > kMaxMetaHeaderNames) {
    error(n, what + " names " + std::to_string(names.size()) + " headers, more than the " +
                 std::to_string(kMaxMetaHeaderNames) + " a flow may add");
    return;
  }
  const auto& defaults = default_meta_headers();
  const std::string hmac_header = s->hmac ? s->hmac->header : "";
  for (size_t i = 0; i < names.size(); ++i) {
    const SrcNode& at = n.items[i];
    const std::string item = what + "[" + std::to_string(i) + "]";
    if (!valid_header_name(names[i])) {
      error(at, item + ": " + quote(names[i]) + " is not a header name (letters, digits and !#$%&'*+-.^_`|~)");
      continue;
    }
    if (std::string why = refused_meta_header(names[i], hmac_header); !why.empty()) {
      error(at, item + ": " + names[i] + " is never stored: " + why +
                    ", and stored events are readable in the stream, in dead letters and through the admin API");
      continue;
    }
    std::string lower = lower_header_name(names[i]);
    if (std::find(s->meta_headers.begin(), s->meta_headers.end(), lower) != s->meta_headers.end()) {
      error(at, item + ": " + names[i] + " is listed twice (header names ignore case)");
      continue;
    }
    // A default name listed again changes nothing: accepted, so a flow that lists it keeps
    // loading whatever the default list becomes.
    if (std::find(defaults.begin(), defaults.end(), lower) == defaults.end()) s->meta_headers.push_back(lower);
  }
}

bool Loader::source(const SrcNode& from, SourceSpec* out) {
  std::string kind;
  const SrcNode* np = single_key(from, "from", &kind);
  if (np == nullptr) return false;
  const SrcNode& n = *np;
  const std::string what = "from." + kind;
  size_t before = d_.size();
  if (kind == "http") {
    if (!is_map(n, what)) return false;
    check_keys(n, what, schema::kHttpSource);
    HttpSourceSpec s;
    if (get_string(n, "path", what, &s.path, true)) {
      if (s.path[0] != '/' || s.path.find_first_of(" ?#\t") != std::string::npos) {
        error(*n.get("path"), what + ".path must start with / and hold no spaces, ? or #, got " + quote(s.path));
      }
      s.path_shown = n.get("path")->written.empty() ? s.path : n.get("path")->written;
    }
    if (const SrcNode* h = n.get("hmac"); h && is_map(*h, what + ".hmac")) {
      check_keys(*h, what + ".hmac", schema::kHttpSourceHmac);
      HmacSpec hs;
      if (!h->get("secret_env")) error(*h, what + ".hmac needs `secret_env`");
      check_env_name(*h, "secret_env", what + ".hmac", &hs.secret_env);
      get_string(*h, "header", what + ".hmac", &hs.header);
      std::string scheme;
      if (get_string(*h, "scheme", what + ".hmac", &scheme)) {
        if (scheme == "github") hs.scheme = HmacSpec::Scheme::kGithub;
        else if (scheme == "standard") hs.scheme = HmacSpec::Scheme::kStandard;
        else if (scheme == "stripe") hs.scheme = HmacSpec::Scheme::kStripe;
        else if (scheme == "slack") hs.scheme = HmacSpec::Scheme::kSlack;
        else if (scheme == "shopify") hs.scheme = HmacSpec::Scheme::kShopify;
        else
          error(*h->get("scheme"),
                what + ".hmac.scheme must be github, standard, stripe, slack or shopify, got " + quote(scheme));
      }
      if (const SrcNode* header = h->get("header"); header && hs.scheme != HmacSpec::Scheme::kGithub) {
        error(*header, what + ".hmac.header is for the github scheme only; " + scheme +
                           " signatures come in the headers its sender uses (docs/connectors.md)");
      }
      s.hmac = hs;
    }
    if (const SrcNode* b = n.get("bearer"); b && is_map(*b, what + ".bearer")) {
      check_keys(*b, what + ".bearer", schema::kHttpSourceBearer);
      std::string env;
      if (!b->get("token_env")) error(*b, what + ".bearer needs `token_env`");
      check_env_name(*b, "token_env", what + ".bearer", &env);
      s.bearer_token_env = env;
    }
    if (const SrcNode* m = n.get("meta_headers")) meta_headers(*m, what + ".meta_headers", &s);
    *out = s;
  } else if (kind == "mqtt") {
    if (!is_map(n, what)) return false;
    check_keys(n, what, schema::kMqttSource);
    MqttSourceSpec s;
    check_url(n, "broker", what, &s.broker, true, schema::kMqttSourceSchemes);
    const SrcNode* t = n.get("topic");
    const SrcNode* ts = n.get("topics");
    if (t && ts) error(*ts, what + " takes `topic` or `topics`, not both");
    if (!t && !ts) error(n, what + " needs `topic` (or `topics`)");
    if (t) {
      std::string topic;
      if (scalar_text(*t, what + ".topic", &topic)) s.topics.push_back(topic);
    }
    if (ts && get_string_list(*ts, what + ".topics", &s.topics) && s.topics.empty()) {
      error(*ts, what + ".topics must not be empty");
    }
    get_int_into(n, "qos", what, 0, 1, &s.qos);
    s.client_id = "weir-" + flow_name_;
    get_string(n, "client_id", what, &s.client_id);
    get_bool(n, "clean_session", what, &s.clean_session);
    check_env_name(n, "username_env", what, &s.username_env);
    check_env_name(n, "password_env", what, &s.password_env);
    get_string(n, "ca_file", what, &s.ca_file);
    get_string(n, "cert_file", what, &s.cert_file);
    get_string(n, "key_file", what, &s.key_file);
    get_bool(n, "insecure_skip_verify", what, &s.insecure_skip_verify);
    *out = s;
  } else if (kind == "nats") {
    if (!is_map(n, what)) return false;
    check_keys(n, what, schema::kNatsSource);
    NatsSourceSpec s;
    if (get_string(n, "subject", what, &s.subject, true)) {
      if (s.subject.find_first_of(" \t\r\n") != std::string::npos) {
        error(*n.get("subject"), what + ".subject must not contain spaces");
      } else if (const char* why = reserved_subject(s.subject, true)) {
        error(*n.get("subject"), what + ".subject " + quote(s.subject) + " " + why);
      }
    }
    s.queue = "weir-" + flow_name_;
    get_string(n, "queue", what, &s.queue);
    *out = s;
  } else if (kind == "timer") {
    if (!is_map(n, what)) return false;
    check_keys(n, what, schema::kTimerSource);
    TimerSourceSpec s;
    Millis every{};
    bool has_every = n.get("every") != nullptr;
    if (get_duration(n, "every", what, &every)) s.every = every;
    bool has_cron = get_string(n, "cron", what, &s.cron);
    if (has_cron) {
      std::string why;  // the timer source's own parser: what validates, runs
      if (!CronSchedule::parse(s.cron, &why)) error(*n.get("cron"), what + ".cron: " + why);
    }
    if (has_every && n.get("cron")) error(n, what + " takes `every` or `cron`, not both");
    if (!has_every && !n.get("cron")) error(n, what + " needs `every` or `cron`");
    if (const SrcNode* p = n.get("payload")) {
      std::string err;
      const SrcNode* where = nullptr;
      if (!to_plain_json(*p, &s.payload, &err, &where)) error(*where, err);
      else if (!s.payload.is_object()) error(*p, what + ".payload must be a mapping");
    }
    *out = s;
  } else if (kind == "poll") {
    if (!is_map(n, what)) return false;
    check_keys(n, what, schema::kPollSource);
    PollSourceSpec s;
    check_url(n, "url", what, &s.url, true, {"http://", "https://"});
    get_duration(n, "every", what, &s.every);
    get_string_map(n, "headers", what, &s.headers);
    get_string(n, "split", what, &s.split);
    get_string(n, "cursor_field", what, &s.cursor_field);
    get_string(n, "cursor_param", what, &s.cursor_param);
    if (!s.cursor_field.empty() && s.cursor_param.empty()) {
      error(*n.get("cursor_field"), what + ".cursor_field needs `cursor_param` too");
    }
    const SrcNode* o = n.get("oauth2") ? n.get("oauth2") : n.get("oauth");
    if (n.get("oauth2") && n.get("oauth")) error(*n.get("oauth"), what + " takes `oauth2` or `oauth`, not both");
    if (o && is_map(*o, what + ".oauth2")) {
      const std::string ow = what + ".oauth2";
      check_keys(*o, ow, schema::kPollSourceOauth2);
      s.oauth2 = oauth2_spec(*o, ow);
    }
    *out = s;
  } else if (kind == "exec") {
    if (!is_map(n, what)) return false;
    check_keys(n, what, schema::kExecSource);
    ExecSourceSpec s;
    if (const SrcNode* e = n.get("env")) {
      size_t at = d_.size();
      get_string_list(*e, what + ".env", &s.env);
      if (d_.size() == at) {
        for (const auto& name : s.env) {
          bool ok = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0]));
          for (char ch : name) ok = ok && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_');
          if (!ok) error(*e, what + ".env: " + quote(name) + " is not an environment variable name");
        }
      }
    }
    if (const SrcNode* c = n.get("command")) {
      if (c->is_scalar()) {
        // A string is split on whitespace; there is no shell and no quoting.
        std::istringstream in(c->text);
        for (std::string w; in >> w;) s.command.push_back(w);
      } else {
        get_string_list(*c, what + ".command", &s.command);
      }
      if (s.command.empty() && d_.size() == before) error(*c, what + ".command must not be empty");
    } else {
      error(n, what + " needs `command`");
    }
    if (get_string(n, "format", what, &s.format) && s.format != "json" && s.format != "text") {
      error(*n.get("format"), what + ".format must be json or text, got " + quote(s.format));
    }
    get_size(n, "max_line", what, &s.max_line);
    *out = s;
  } else if (kind == "flow") {
    FlowSourceSpec s;
    std::string ref;
    if (scalar_text(n, what, &ref)) {
      auto dot = ref.rfind('.');
      if (dot == std::string::npos || !valid_name(ref.substr(0, dot)) || !valid_name(ref.substr(dot + 1))) {
        error(n, what + " must be other_flow.sink, got " + quote(ref));
      } else {
        s.flow = ref.substr(0, dot);
        s.sink = ref.substr(dot + 1);
        if (s.flow == flow_name_) error(n, what + ": a flow cannot read its own sink");
      }
    }
    *out = s;
  } else {
    error(from.keys[0],
          "unknown source kind " + quote(kind) + "; expected one of: http, mqtt, nats, timer, poll, exec, flow");
    return false;
  }
  return d_.size() == before;
}

// ---- sinks -------------------------------------------------------------------------

void Loader::sinks(const SrcNode& to) {
  if (!is_map(to, "to")) return;
  if (to.keys.empty()) {
    error(to, "`to` needs at least one sink");
    return;
  }
  for (size_t i = 0; i < to.keys.size(); ++i) {
    const std::string& name = to.keys[i].text;
    const std::string what = "to." + name;
    if (!valid_name(name)) {
      error(to.keys[i], "sink name " + quote(name) + " must match ^[a-z][a-z0-9_-]{0,62}$");
    }
    std::string kind;
    const SrcNode* np = single_key(to.items[i], what, &kind);
    if (np == nullptr) continue;
    const SrcNode& n = *np;
    const std::string w = what + "." + kind;
    SinkSpec spec;
    spec.name = name;
    spec.where = Location{file_, to.keys[i].line, to.keys[i].column};
    if (kind == "http") {
      if (!is_map(n, w)) continue;
      check_keys(n, w, schema::kHttpSink);
      HttpSinkSpec s;
      http_sink_url(n, w, &s);
      if (get_string(n, "method", w, &s.method)) {
        for (auto& c : s.method) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        if (s.method != "POST" && s.method != "PUT" && s.method != "PATCH") {
          error(*n.get("method"),
                w + ".method must be POST, PUT or PATCH (the event is the body), got " + quote(n.get("method")->text));
        }
      }
      http_sink_headers(n, w, &s);
      get_duration(n, "timeout", w, &s.timeout);
      get_int_into(n, "retries", w, 0, 1000, &s.retries);
      if (const SrcNode* r = n.get("retry")) retry_schedule(*r, w + ".retry", &s.retry);
      get_int_into(n, "max_connections", w, 1, 1024, &s.max_connections);
      get_rate(n, "rate", w, &s.rate_per_s, &s.rate);
      if (const SrcNode* o = n.get("order_by")) s.order_by = event_expression(*o, w + ".order_by");
      http_sink_sign(n, w, &s);
      http_sink_auth(n, w, &s);
      spec.kind = s;
    } else if (kind == "mqtt") {
      if (!is_map(n, w)) continue;
      check_keys(n, w, schema::kMqttSink);
      MqttSinkSpec s;
      check_url(n, "broker", w, &s.broker, true, schema::kMqttSinkSchemes);
      mqtt_sink_topic(n, w, &s);
      get_int_into(n, "qos", w, 0, 1, &s.qos);
      get_bool(n, "retain", w, &s.retain);
      s.client_id = "weir-" + flow_name_ + "-" + name;
      get_string(n, "client_id", w, &s.client_id);
      check_env_name(n, "username_env", w, &s.username_env);
      check_env_name(n, "password_env", w, &s.password_env);
      get_int_into(n, "retries", w, 0, 1000, &s.retries);
      spec.kind = s;
    } else if (kind == "nats") {
      if (!is_map(n, w)) continue;
      check_keys(n, w, schema::kNatsSink);
      NatsSinkSpec s;
      if (get_string(n, "subject", w, &s.subject, true)) {
        if (s.subject.find_first_of(" \t\r\n*>") != std::string::npos) {
          error(*n.get("subject"), w + ".subject must be a plain subject (no spaces or wildcards)");
        } else if (const char* why = reserved_subject(s.subject, false)) {
          error(*n.get("subject"), w + ".subject " + quote(s.subject) + " " + why);
        }
      }
      spec.kind = s;
    } else if (kind == "flow") {
      if (!n.is_null() && !(n.is_map() && n.keys.empty())) {
        error(n, w + " takes no settings: write `flow: {}`");
      }
      spec.kind = FlowSinkSpec{};
    } else {
      error(to.items[i].keys[0], "unknown sink kind " + quote(kind) + "; expected one of: http, mqtt, nats, flow");
      continue;
    }
    sinks_.push_back(std::move(spec));
  }
}

// ---- tables ------------------------------------------------------------------------

void Loader::tables(const SrcNode& n) {
  if (!is_map(n, "tables")) return;
  for (size_t i = 0; i < n.keys.size(); ++i) {
    const std::string& name = n.keys[i].text;
    const std::string what = "tables." + name;
    if (!valid_identifier(name)) {
      error(n.keys[i], "table name " + quote(name) + " must be a name (letters, digits, _)");
      continue;
    }
    const SrcNode& t = n.items[i];
    if (!is_map(t, what)) continue;
    check_keys(t, what, schema::kTable);
    std::string key;
    get_string(t, "key", what, &key);
    const SrcNode* file = t.get("file");
    const SrcNode* rows = t.get("rows");
    const SrcNode* kv = t.get("kv");
    Table& table = program_->tables.add(name);
    if ((file != nullptr) + (rows != nullptr) + (kv != nullptr) != 1) {
      error(t, what + " needs `file`, `rows` or `kv` (one of them)");
      continue;
    }
    if (kv) {
      // A live table in NATS KV (docs/adr/0120): the rows come from the runtime's
      // watcher, so nothing is read here; `key` is the column imports key rows by.
      std::string kv_name;
      if (!scalar_text(*kv, what + ".kv", &kv_name)) continue;
      if (!valid_kv_table_name(kv_name)) {
        error(*kv, what + ".kv: " + quote(kv_name) + " must be a KV table name (letters, digits, _ and -, at most 64)");
        continue;
      }
      auto live = LiveTables::instance().get(kv_name);
      if (!key.empty()) live->set_key_column(key);
      table.set_live(std::move(live));
      continue;
    }
    if (rows) {
      Json data;
      std::string err;
      const SrcNode* where = nullptr;
      if (!to_plain_json(*rows, &data, &err, &where)) {
        error(*where, err);
      } else if (!table_from_json(data, key, &table, &err)) {
        error(*rows, what + ".rows: " + err);
      }
      continue;
    }
    std::string path;
    if (!scalar_text(*file, what + ".file", &path)) continue;
    if (!allow_table_files_) {
      error(*file, what + ".file: table files are not allowed here; give the rows inline with `rows:`");
      continue;
    }
    std::string full = !path.empty() && path[0] == '/' ? path : dir_ + "/" + path;
    bool is_csv = path.size() > 4 && (path.substr(path.size() - 4) == ".csv" || path.substr(path.size() - 4) == ".CSV");
    bool is_json = path.size() > 5 &&
                   (path.substr(path.size() - 5) == ".json" || path.substr(path.size() - 5) == ".JSON");
    if (!is_csv && !is_json) {
      error(*file, what + ".file must end in .csv or .json, got " + quote(path));
      continue;
    }
    if (is_csv && key.empty()) {
      error(t, what + " needs `key` (the column to look rows up by)");
      continue;
    }
    std::string text, err;
    if (!read_file(full, kMaxTableBytes, &text, &err)) {
      error(*file, what + ".file: " + err);
      continue;
    }
    const std::string_view format = is_csv ? "csv" : "json";
    if (auto shared = SharedFileTables::instance().find(format, key, text)) {
      table.use_rows(std::move(shared));  // another flow loaded this very text: one copy
      continue;
    }
    const bool loaded = is_csv ? load_csv_table(text, full, key, &table, &d_)
                               : load_json_table(text, full, key, &table, &d_);
    if (loaded) SharedFileTables::instance().remember(format, key, text, table.shared_rows());
  }
}

// ---- steps -------------------------------------------------------------------------

bool Loader::check_sink_ref(const SrcNode& n, const std::string& what, std::string* out) {
  if (!scalar_text(n, what, out)) return false;
  for (const auto& s : sinks_) {
    if (s.name == *out) return true;
  }
  std::vector<std::string> names;
  for (const auto& s : sinks_) names.push_back(s.name);
  error(n, what + ": unknown sink " + quote(*out) + (names.empty() ? "" : " (sinks: " + join(names) + ")"));
  return false;
}

// An arm's `to:`: one sink, or a list of them (a fan-out, docs/adr/0299-fan-out.md): each
// known, none twice.
void Loader::arm_route(const SrcNode& n, const std::string& what, Arm* arm) {
  if (!n.is_seq()) {
    if (!n.is_scalar()) {
      error(n, what + " must be a sink name or a list of sink names (`to: [a, b]`), got " + n.describe());
      return;
    }
    check_sink_ref(n, what, &arm->to);
    return;
  }
  if (n.items.empty()) {
    error(n, what + " is an empty list; name one sink or several (`to: [a, b]`)");
    return;
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < n.items.size(); ++i) {
    const std::string iw = what + "[" + std::to_string(i) + "]";
    std::string name;
    // An unknown name is reported and still taken as the route: the arm routes, so no
    // second error says it does not.
    if (!check_sink_ref(n.items[i], iw, &name) && name.empty()) continue;
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      error(n.items[i], iw + ": sink " + quote(name) + " is named twice in this list");
      continue;
    }
    names.push_back(std::move(name));
  }
  if (names.empty()) return;
  arm->to = names.front();
  arm->also.assign(names.begin() + 1, names.end());
}

void Loader::steps(const SrcNode& list, const std::string& what, int top_index, const std::string& path_prefix,
                   std::vector<Step>* out, int depth) {
  if (!list.is_seq()) {
    error(list, what + " must be a list of steps, got " + list.describe());
    return;
  }
  if (depth > kMaxStepNesting) {
    error(list, what + ": steps nested deeper than " + std::to_string(kMaxStepNesting) + " levels");
    return;
  }
  for (size_t i = 0; i < list.items.size(); ++i) {
    int index = top_index >= 0 ? top_index : static_cast<int>(i);
    Step s;
    bool ok = true;
    step(list.items[i], what + "[" + std::to_string(i) + "]", index, path_prefix, &s, &ok, depth);
    // Kept even when broken (the flow will not load anyway) so later checks such as
    // routing do not report follow-on errors.
    out->push_back(std::move(s));
  }
}

void Loader::step(const SrcNode& n, const std::string& what, int index, const std::string& path_prefix, Step* out,
                  bool* ok, int depth) {
  std::string kind;
  const SrcNode* body = single_key(n, what, &kind);
  if (body == nullptr) {
    *ok = false;
    return;
  }
  size_t before = d_.size();
  const std::string w = what + "." + kind;
  out->index = index;
  out->path = path_prefix + kind;
  if (kind == "lookup") {
    out->kind = Step::Kind::kLookup;
    if (!is_map(*body, w)) {
      *ok = false;
      return;
    }
    check_keys(*body, w, schema::kLookupStep);
    std::string table;
    if (get_string(*body, "table", w, &table, true)) {
      out->table = program_->tables.find(table);
      if (out->table == nullptr) {
        auto names = program_->tables.names();
        error(*body->get("table"),
              w + ".table: unknown table " + quote(table) +
                  (names.empty() ? " (the flow has no `tables:`)" : " (tables: " + join(names) + ")"));
      }
      out->path += " " + table;
    }
    if (const SrcNode* k = body->get("key")) compile(*k, w + ".key", &out->key);
    else error(*body, w + " needs `key`");
    std::string as = table;
    if (const SrcNode* a = body->get("as")) {
      if (scalar_text(*a, w + ".as", &as)) field_path(*a, w + ".as", &out->as);
    } else if (!table.empty()) {
      out->as.names = {table};
      out->as.text = table;
    }
    if (const SrcNode* def = body->get("default")) {
      std::string err;
      const SrcNode* where = nullptr;
      if (!to_plain_json(*def, &out->default_value, &err, &where)) error(*where, err);
      out->has_default = true;
    }
  } else if (kind == "set" || kind == "map") {
    out->kind = kind == "set" ? Step::Kind::kSet : Step::Kind::kMap;
    if (kind == "map" && body->is_scalar()) {
      out->kind = Step::Kind::kMapExpr;
      compile(*body, w, &out->expr);
    } else if (!body->is_map()) {
      error(*body, w + " must be a mapping of field: expression" + (kind == "map" ? " (or one expression)" : "") +
                       ", got " + body->describe());
    } else if (body->keys.empty()) {
      error(*body, w + " is empty");
    } else {
      fields(*body, w, {}, &out->fields, 0);
      if (kind == "set" && out->fields.size() == 1) out->path += " " + out->fields[0].path.text;
      if (out->kind == Step::Kind::kMap) {
        // A plain path may be moved out of the old event unless another field's path
        // overlaps it (then both need the value).
        for (size_t a = 0; a < out->fields.size(); ++a) {
          const auto* pa = out->fields[a].value.this_path();
          if (pa == nullptr) continue;
          bool alone = true;
          for (size_t b = 0; b < out->fields.size() && alone; ++b) {
            if (a == b) continue;
            const auto* pb = out->fields[b].value.this_path();
            if (pb == nullptr) continue;
            size_t m = std::min(pa->size(), pb->size());
            if (std::equal(pa->begin(), pa->begin() + static_cast<long>(m), pb->begin())) alone = false;
          }
          out->fields[a].movable = alone;
        }
      }
    }
  } else if (kind == "filter") {
    out->kind = Step::Kind::kFilter;
    compile(*body, w, &out->expr);
  } else if (kind == "branch") {
    out->kind = Step::Kind::kBranch;
    if (!body->is_seq() || body->items.empty()) {
      error(*body, w + " must be a non-empty list of arms ({when, steps, to})");
      *ok = false;
      return;
    }
    bool seen_default = false;
    for (size_t i = 0; i < body->items.size(); ++i) {
      const SrcNode& a = body->items[i];
      const std::string aw = w + "[" + std::to_string(i) + "]";
      if (!is_map(a, aw)) continue;
      check_keys(a, aw, schema::kBranchArm);
      if (seen_default) error(a, aw + " can never match: it follows the default arm (the one without `when`)");
      Arm arm;
      if (const SrcNode* when = a.get("when")) compile(*when, aw + ".when", &arm.when);
      else seen_default = true;
      const std::string arm_prefix = path_prefix + "branch arm " + std::to_string(i) + " > ";
      if (const SrcNode* st = a.get("steps")) steps(*st, aw + ".steps", index, arm_prefix, &arm.steps, depth + 1);
      if (const SrcNode* to = a.get("to")) arm_route(*to, aw + ".to", &arm);
      out->arms.push_back(std::move(arm));
    }
  } else {
    error(n.keys[0], "unknown step " + quote(kind) + "; expected one of: lookup, set, map, filter, branch");
  }
  *ok = d_.size() == before;
}

// True when every event that gets through `steps` has a route (a branch with a default
// arm whose arms all route).
bool always_routes(const std::vector<Step>& steps) {
  for (const Step& s : steps) {
    if (s.kind != Step::Kind::kBranch) continue;
    bool has_default = false, all = true;
    for (const Arm& a : s.arms) {
      has_default = has_default || !a.when.valid();
      all = all && (!a.to.empty() || always_routes(a.steps));
    }
    if (has_default && all) return true;
  }
  return false;
}

// ---- tests -------------------------------------------------------------------------

void Loader::tests(const SrcNode& n) {
  std::vector<std::string> names;
  for (const auto& s : sinks_) names.push_back(s.name);
  std::vector<Diagnostic> found = check_test_cases(n, file_, names);
  d_.insert(d_.end(), found.begin(), found.end());
}

std::shared_ptr<const Flow> Loader::load(const SrcNode& root) {
  if (!is_map(root, "a flow file")) return nullptr;
  check_keys(root, "the flow file", schema::kFlowFile);
  program_ = std::make_unique<Program>();
  if (get_string(root, "flow", "the flow file", &flow_name_, true) && !valid_name(flow_name_)) {
    error(*root.get("flow"), "flow name " + quote(flow_name_) + " must match ^[a-z][a-z0-9_-]{0,62}$");
  } else if (flow_name_ == "dlq") {
    // The dead-letter stream and subjects use this name (docs/adr/0112-cluster-namespaces.md).
    error(*root.get("flow"), "flow name \"dlq\" is reserved for the dead-letter stream; choose another name");
  }
  if (const SrcNode* d = root.get("description")) {
    std::string unused;
    scalar_text(*d, "description", &unused, true);
  }
  SourceSpec src;
  if (const SrcNode* from = root.get("from")) source(*from, &src);
  else error(root, "the flow needs `from:` (its source)");
  const SrcNode* to = root.get("to");
  if (to) sinks(*to);
  else error(root, "the flow needs `to:` (at least one sink)");
  if (const SrcNode* t = root.get("tables")) tables(*t);
  const SrcNode* st = root.get("steps");
  if (st && !st->is_null()) steps(*st, "steps", -1, "", &program_->steps, 0);
  OnError on_error = OnError::kDlq;
  std::string oe;
  if (get_string(root, "on_error", "the flow file", &oe)) {
    if (oe == "drop") on_error = OnError::kDrop;
    else if (oe != "dlq") error(*root.get("on_error"), "on_error must be dlq or drop, got " + quote(oe));
  }
  Json tests_json = Json::array();
  if (const SrcNode* t = root.get("tests")) {
    tests(*t);
    std::string err;
    const SrcNode* where = nullptr;
    if (!to_plain_json(*t, &tests_json, &err, &where)) error(*where, err);
  }
  if (sinks_.size() == 1) program_->only_sink = sinks_[0].name;
  if (sinks_.size() > 1 && !always_routes(program_->steps)) {
    std::vector<std::string> names;
    for (const auto& s : sinks_) names.push_back(s.name);
    error(st ? *root.key_node("steps") : *root.key_node("to"),
          "the flow has several sinks (" + join(names) +
              ") but events can leave the steps without a route: end with a branch whose arms all have `to:`, "
              "including a default arm without `when`");
  }
  if (!d_.empty()) {
    std::stable_sort(d_.begin(), d_.end(), [&](const Diagnostic& a, const Diagnostic& b) {
      return std::make_tuple(a.where.file != file_, a.where.line, a.where.column) <
             std::make_tuple(b.where.file != file_, b.where.line, b.where.column);
    });
    return nullptr;
  }
  auto flow = std::make_shared<Flow>();
  FlowBuilder::fill(*flow, flow_name_, std::string(src_), file_, std::move(src), std::move(sinks_), on_error,
                    std::move(tests_json), std::move(program_));
  FlowBuilder::set_secret_variables(*flow, std::move(secrets_));
  return flow;
}

// A scalar of a flow sent over the network outside its kept from:/to: (docs/adr/0274):
// `$$` still means `$` (as when the file is loaded again from disk) and `${NAME}` reads
// the environment only for a name the operator allowed; any other name is an error that
// names the variable, never a value.
void substitute_allowed(SrcNode* n, const EnvLookup& env, const std::function<bool(const std::string&)>& allowed,
                        const std::string& file, std::vector<Diagnostic>* diagnostics) {
  if (n->kind == SrcNode::Kind::kScalar) {
    if (n->text.find('$') == std::string::npos) return;
    std::string refused;
    EnvLookup guarded = [&](const std::string& name) -> std::optional<std::string> {
      if (allowed && allowed(name)) return env(name);
      if (refused.empty()) refused = name;
      return std::nullopt;
    };
    std::string error;
    auto v = substitute_env(n->text, guarded, &error);
    if (!refused.empty()) {
      diagnostics->push_back({{file, n->line, n->column},
                              "${" + refused +
                                  "}: a flow sent over the network reads only the environment variables "
                                  "listed in the config's admin.allow_env (write the value, or put the flow "
                                  "file on the server)"});
      n->bad = true;
    } else if (v) {
      if (*v != n->text && n->text.find("${") != std::string::npos) n->written = n->text;
      n->text = std::move(*v);
    } else {
      diagnostics->push_back({{file, n->line, n->column}, error});
      n->bad = true;
    }
    return;
  }
  for (auto& item : n->items) substitute_allowed(&item, env, allowed, file, diagnostics);
}

LoadResult load_text(const std::string& text, const std::string& file, const std::string& dir,
                     const LoadOptions& options) {
  LoadResult r;
  SourceDoc doc = parse_source(text, file);
  r.diagnostics = std::move(doc.diagnostics);
  if (!doc.has_root) {
    if (r.diagnostics.empty()) r.diagnostics.push_back({{file, 1, 1}, "cannot parse"});
    return r;
  }
  EnvLookup env = options.env ? EnvLookup(options.env) : process_env();
  if (options.substitute_env) {
    substitute_tree(&doc.root, env, file, &r.diagnostics);
  } else if (!options.wiring_kept || !doc.root.is_map()) {
    substitute_allowed(&doc.root, env, options.env_allowed, file, &r.diagnostics);
  } else {
    for (size_t i = 0; i < doc.root.items.size(); ++i) {
      const std::string& key = doc.root.keys[i].text;
      if (key == "from" || key == "to") substitute_tree(&doc.root.items[i], env, file, &r.diagnostics);
      else substitute_allowed(&doc.root.items[i], env, options.env_allowed, file, &r.diagnostics);
    }
  }
  Loader loader(text, file, dir, options.allow_table_files, &r.diagnostics);
  try {
    auto flow = loader.load(doc.root);
    if (r.diagnostics.empty()) r.flow = std::move(flow);
  } catch (const std::exception& e) {
    r.diagnostics.push_back({{file, 1, 1}, std::string("internal error while loading: ") + e.what()});
  }
  return r;
}

}  // namespace

namespace {
std::string canonical(const SrcNode* n) {
  if (n == nullptr || n->is_null()) return "~";
  if (n->is_scalar()) return "s" + std::to_string(n->text.size()) + ":" + n->text;
  if (n->is_seq()) {
    std::string out = "[";
    for (const auto& e : n->items) out += canonical(&e) + ",";
    return out + "]";
  }
  std::map<std::string, std::string> sorted;
  for (size_t i = 0; i < n->items.size(); ++i) sorted[canonical(&n->keys[i])] = canonical(&n->items[i]);
  std::string out = "{";
  for (const auto& [k, v] : sorted) out += k + "=" + v + ",";
  return out + "}";
}
}  // namespace

std::optional<Wiring> read_wiring(const std::string& text, std::string* error) {
  SourceDoc doc = parse_source(text, "flow.yaml");
  if (!doc.has_root || !doc.diagnostics.empty()) {
    *error = doc.diagnostics.empty() ? "cannot parse" : doc.diagnostics.front().str();
    return std::nullopt;
  }
  return Wiring{canonical(doc.root.get("flow")), canonical(doc.root.get("from")), canonical(doc.root.get("to"))};
}

LoadResult load_flow_text(const std::string& text, const std::string& name, const LoadOptions& options) {
  return load_text(text, name, dirname_of(name), options);
}

LoadResult load_flow_text(const std::string& text, const std::string& name) {
  return load_flow_text(text, name, LoadOptions{});
}

LoadResult load_flow_file(const std::string& path, const LoadOptions& options) {
  std::string text, err;
  if (!read_file(path, static_cast<int64_t>(kMaxSourceBytes), &text, &err)) {
    LoadResult r;
    r.diagnostics.push_back({{path, 0, 0}, err});
    return r;
  }
  return load_text(text, path, dirname_of(path), options);
}

LoadResult load_flow_file(const std::string& path) { return load_flow_file(path, LoadOptions{}); }

}  // namespace weir::flows

#include "flows/json_limits.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "flows/value.h"

namespace weir::flows {
namespace {

using Json = nlohmann::json;

std::string too_deep_message(int max_depth) {
  return "JSON nested deeper than " + std::to_string(max_depth) + " levels";
}

// Counts depth around another SAX handler; fails the parse past the limit.
template <typename Inner>
class DepthLimited {
 public:
  DepthLimited(Inner& inner, int max_depth, JsonError* error) : inner_(inner), max_(max_depth), error_(error) {}

  bool null() { return inner_.null(); }
  bool boolean(bool v) { return inner_.boolean(v); }
  bool number_integer(Json::number_integer_t v) { return inner_.number_integer(v); }
  bool number_unsigned(Json::number_unsigned_t v) { return inner_.number_unsigned(v); }
  bool number_float(Json::number_float_t v, const Json::string_t& s) { return inner_.number_float(v, s); }
  bool string(Json::string_t& v) { return inner_.string(v); }
  bool binary(Json::binary_t& v) { return inner_.binary(v); }
  bool start_object(std::size_t n) { return enter() && inner_.start_object(n); }
  bool key(Json::string_t& k) { return inner_.key(k); }
  bool end_object() {
    --depth_;
    return inner_.end_object();
  }
  bool start_array(std::size_t n) { return enter() && inner_.start_array(n); }
  bool end_array() {
    --depth_;
    return inner_.end_array();
  }
  bool parse_error(std::size_t position, const std::string& /*last_token*/, const nlohmann::detail::exception& ex) {
    if (error_) {
      error_->too_deep = false;
      error_->byte = position;
      error_->message = ex.what();
    }
    return false;
  }
  bool failed_deep() const { return deep_; }

 private:
  bool enter() {
    if (++depth_ > max_) {
      deep_ = true;
      if (error_) {
        error_->too_deep = true;
        error_->message = too_deep_message(max_);
      }
      return false;
    }
    return true;
  }

  Inner& inner_;
  int max_;
  JsonError* error_;
  int depth_ = 0;
  bool deep_ = false;
};

// Accepts everything: validation only.
struct NoDom {
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(Json::number_integer_t) { return true; }
  bool number_unsigned(Json::number_unsigned_t) { return true; }
  bool number_float(Json::number_float_t, const Json::string_t&) { return true; }
  bool string(Json::string_t&) { return true; }
  bool binary(Json::binary_t&) { return true; }
  bool start_object(std::size_t) { return true; }
  bool key(Json::string_t&) { return true; }
  bool end_object() { return true; }
  bool start_array(std::size_t) { return true; }
  bool end_array() { return true; }
};

template <typename Sax>
bool run(std::string_view text, Sax& sax, JsonError* error) {
  // nlohmann's lexer takes a NUL byte for the end of the input (a C-string habit), so
  // "123\0junk" would pass as "123". No JSON text holds a raw NUL (inside a string it must
  // be escaped): refuse it (JSONTestSuite n_multidigit_number_then_00).
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) {
    if (error) {
      error->too_deep = false;
      error->byte = nul + 1;
      error->message = "NUL byte in JSON text";
    }
    return false;
  }
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &sax, Json::input_format_t::json, /*strict=*/true);
  } catch (const std::exception& e) {  // the DOM builder may throw on allocation or errors
    if (error) {
      error->message = e.what();
      error->too_deep = false;
    }
    return false;
  }
  return ok;
}

// The quick scan's own depth stack: deeper texts go to nlohmann (the default limit is 128).
constexpr int kQuickMaxDepth = 256;

// A strict RFC 8259 scanner without a token buffer or allocation of its own: a seventh of
// the time of nlohmann's SAX pass over the same text (bench/micro, BM_Json_Check: 0.23
// against 1.70 µs for a bench_orders event). It only ever says "yes" for a text nlohmann's
// strict parse accepts within `max_depth`. Where that would take more than a scan (a
// surrogate escape, a number that may overflow a double, a byte order mark, nesting past
// its own stack) or the text is not JSON, it says "no" and the caller asks nlohmann, which
// also words the error. What it reads goes to `Out` (NoOutput for check_json, DomBuilder for
// parse_json), which may say "no" too. flows/fuzz/fuzz_json_ingress.cc holds check_json and
// parse_json to a plain nlohmann parse; tests/flows/json_limits_test.cc to nlohmann on
// 30,000 mutated bodies.
template <typename Out>
class QuickScan {
 public:
  QuickScan(std::string_view text, Out& out)
      : p_(reinterpret_cast<const unsigned char*>(text.data())), end_(p_ + text.size()), out_(out) {}

  bool accepts(int max_depth) {
    if (p_ != end_ && *p_ == 0xEF) return false;   // a UTF-8 byte order mark: nlohmann's call
    std::array<bool, kQuickMaxDepth> in_object{};  // per open level: object, else array
    int depth = 0;
    enum class Next { kValue, kKey, kAfterValue } next = Next::kValue;
    for (;;) {
      skip_blanks();
      switch (next) {
        case Next::kValue: {
          if (p_ == end_) return false;
          const bool object = *p_ == '{';
          if (!object && *p_ != '[') {
            if (!scalar()) return false;
            next = Next::kAfterValue;
            continue;
          }
          if (depth >= max_depth || depth >= kQuickMaxDepth || !out_.open(object)) return false;
          ++p_;
          in_object[static_cast<size_t>(depth++)] = object;
          skip_blanks();
          if (p_ != end_ && *p_ == closer(object)) {
            ++p_;
            --depth;
            out_.close();
            next = Next::kAfterValue;
          } else {
            next = object ? Next::kKey : Next::kValue;
          }
          continue;
        }
        case Next::kKey:
          if (p_ == end_ || *p_ != '"' || !string(/*key=*/true)) return false;
          skip_blanks();
          if (p_ == end_ || *p_ != ':') return false;
          ++p_;
          next = Next::kValue;
          continue;
        case Next::kAfterValue: {
          if (depth == 0) return p_ == end_;
          if (p_ == end_) return false;
          const bool object = in_object[static_cast<size_t>(depth - 1)];
          if (*p_ == ',') {
            ++p_;
            next = object ? Next::kKey : Next::kValue;
          } else if (*p_ == closer(object)) {
            ++p_;
            --depth;
            out_.close();
          } else {
            return false;
          }
          continue;
        }
      }
    }
  }

 private:
  static unsigned char closer(bool object) { return object ? '}' : ']'; }
  static bool digit(unsigned char c) { return c >= '0' && c <= '9'; }
  static bool hex(unsigned char c) { return digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

  std::string_view since(const unsigned char* from) const {
    return {reinterpret_cast<const char*>(from), static_cast<size_t>(p_ - from)};
  }

  void skip_blanks() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  bool word(std::string_view w) {
    if (static_cast<size_t>(end_ - p_) < w.size() || std::memcmp(p_, w.data(), w.size()) != 0) return false;
    p_ += w.size();
    return true;
  }

  bool scalar() {
    switch (*p_) {
      case '"': return string(/*key=*/false);
      case 't': return word("true") && out_.boolean(true);
      case 'f': return word("false") && out_.boolean(false);
      case 'n': return word("null") && out_.null();
      default: return number();
    }
  }

  size_t digits() {
    const unsigned char* from = p_;
    while (p_ != end_ && digit(*p_)) ++p_;
    return static_cast<size_t>(p_ - from);
  }

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, and small enough that no double overflows:
  // nlohmann refuses a number whose value is not finite (1e999, 400 digits).
  bool number() {
    const unsigned char* from = p_;
    if (p_ != end_ && *p_ == '-') ++p_;
    if (p_ == end_ || !digit(*p_)) return false;
    size_t whole = 1;
    if (*p_ == '0') {
      ++p_;
    } else {
      whole = digits();
    }
    bool integer = true;
    if (p_ != end_ && *p_ == '.') {
      ++p_;
      integer = false;
      if (digits() == 0) return false;
    }
    size_t exponent_digits = 0;
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      integer = false;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      exponent_digits = digits();
      if (exponent_digits == 0) return false;
    }
    // Below 10^300 whatever the fraction: at most 2 exponent digits and 200 whole digits.
    return exponent_digits <= 2 && whole <= 200 && out_.number(since(from), integer);
  }

  // At the opening quote: escapes, no controls, UTF-8 as RFC 3629 (the same set as nlohmann).
  bool string(bool key) {
    const unsigned char* from = ++p_;
    bool escaped = false;
    while (p_ != end_) {
      const unsigned char c = *p_;
      if (c == '"') {
        const std::string_view raw = since(from);
        ++p_;
        return key ? out_.key(raw, escaped) : out_.string(raw, escaped);
      }
      if (c < 0x20) return false;
      if (c == '\\') {
        escaped = true;
        if (!escape()) return false;
      } else if (c < 0x80) {
        ++p_;
      } else if (!utf8()) {
        return false;
      }
    }
    return false;
  }

  bool escape() {
    ++p_;
    if (p_ == end_) return false;
    switch (*p_) {
      case '"':
      case '\\':
      case '/':
      case 'b':
      case 'f':
      case 'n':
      case 'r':
      case 't': ++p_; return true;
      case 'u': {
        if (end_ - p_ < 5) return false;
        for (int i = 1; i <= 4; ++i) {
          if (!hex(p_[i])) return false;
        }
        // A surrogate must pair with the next escape: nlohmann's call.
        if ((p_[1] == 'd' || p_[1] == 'D') && p_[2] >= '8') return false;  // D800-DFFF
        p_ += 5;
        return true;
      }
      default: return false;
    }
  }

  bool utf8() {
    const size_t len = utf8_sequence_length(
        std::string_view(reinterpret_cast<const char*>(p_), static_cast<size_t>(end_ - p_)), 0);
    p_ += len;
    return len != 0;
  }

  const unsigned char* p_;
  const unsigned char* end_;
  Out& out_;
};

// check_json's output: the scan alone.
struct NoOutput {
  static bool open(bool /*object*/) { return true; }
  static void close() {}
  static bool key(std::string_view /*raw*/, bool /*escaped*/) { return true; }
  static bool string(std::string_view /*raw*/, bool /*escaped*/) { return true; }
  static bool number(std::string_view /*text*/, bool /*integer*/) { return true; }
  static bool boolean(bool /*v*/) { return true; }
  static bool null() { return true; }
};

// The text of a string the scan accepted, its escapes decoded (no surrogates: the scan
// leaves those to nlohmann). \u escapes become UTF-8, \u0000 a NUL, as nlohmann does.
std::string unescape(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\') {
      out += raw[i];
      continue;
    }
    const char c = raw[++i];
    switch (c) {
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        unsigned cp = 0;
        std::from_chars(raw.data() + i + 1, raw.data() + i + 5, cp, 16);
        i += 4;
        if (cp < 0x80) {
          out += static_cast<char>(cp);
        } else if (cp < 0x800) {
          out += static_cast<char>(0xC0 | (cp >> 6));
          out += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
          out += static_cast<char>(0xE0 | (cp >> 12));
          out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
          out += static_cast<char>(0x80 | (cp & 0x3F));
        }
        break;
      }
      default: out += c;  // " \ /
    }
  }
  return out;
}

// parse_json's output: the DOM nlohmann's parser would build, the same value types
// (a number without fraction or exponent is unsigned, or signed when negative; one that
// does not fit 64 bits goes to nlohmann, which makes it a double).
class DomBuilder {
 public:
  explicit DomBuilder(Json& root) : root_(root) {}

  bool open(bool object) {
    Json* added = put(object ? Json(Json::value_t::object) : Json(Json::value_t::array));
    open_.push_back(added);
    return true;
  }
  void close() { open_.pop_back(); }
  bool key(std::string_view raw, bool escaped) {
    auto& members = *open_.back()->get_ptr<Json::object_t*>();
    key_ = &members[escaped ? unescape(raw) : std::string(raw)];
    return true;
  }
  bool string(std::string_view raw, bool escaped) {
    put(Json(escaped ? unescape(raw) : std::string(raw)));
    return true;
  }
  bool number(std::string_view text, bool integer) {
    const char* first = text.data();
    const char* last = first + text.size();
    if (!integer) {
      double v = 0;
      if (std::from_chars(first, last, v).ec != std::errc{}) return false;  // underflow: nlohmann's call
      put(Json(v));
    } else if (*first == '-') {
      Json::number_integer_t v = 0;
      if (std::from_chars(first, last, v).ec != std::errc{}) return false;
      put(Json(v));
    } else {
      Json::number_unsigned_t v = 0;
      if (std::from_chars(first, last, v).ec != std::errc{}) return false;
      put(Json(v));
    }
    return true;
  }
  bool boolean(bool v) {
    put(Json(v));
    return true;
  }
  bool null() {
    put(Json(nullptr));
    return true;
  }

 private:
  // Places a value where the text has it: the root, the next array element, or the member
  // whose key came last. Returns where it now lives (stable until its container grows,
  // which only happens after it is closed).
  Json* put(Json&& v) {
    if (open_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Json* container = open_.back();
    if (container->is_array()) {
      auto& items = *container->get_ptr<Json::array_t*>();
      items.push_back(std::move(v));
      return &items.back();
    }
    *key_ = std::move(v);
    return key_;
  }

  Json& root_;
  std::vector<Json*> open_;
  Json* key_ = nullptr;
};

// A string as nlohmann's dump writes it with ensure_ascii off: `"` and `\` escaped, the
// controls below 0x20 as \b \t \n \f \r or \u00xx, everything else as it is. A string
// that is not valid UTF-8 goes to nlohmann, whose error handler replaces the bad bytes.
void dump_string(const std::string& s, std::string& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  const size_t start = out.size();
  out += '"';
  size_t plain = 0;  // start of the run of bytes copied as they are
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t len = utf8_sequence_length(s, i);
      if (len == 0) {
        out.resize(start);
        out += Json(s).dump(-1, ' ', false, Json::error_handler_t::replace);
        return;
      }
      i += len;
      continue;
    }
    if (c >= 0x20 && c != '"' && c != '\\') {
      ++i;
      continue;
    }
    out.append(s, plain, i - plain);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\f': out += "\\f"; break;
      case '\r': out += "\\r"; break;
      default:
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 0xF];
    }
    plain = ++i;
  }
  out.append(s, plain, s.size() - plain);
  out += '"';
}

template <typename Number>
void dump_integer(Number v, std::string& out) {
  std::array<char, 24> buf{};
  const auto r = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  out.append(buf.data(), r.ptr);
}

// What j.dump(-1, ' ', false, replace) writes, without its per-byte UTF-8 state machine
// for every string (docs/adr/0271): the same bytes; tests/flows/json_limits_test.cc and
// the json_ingress fuzz target compare the two.
void dump_value(const Json& j, std::string& out) {
  switch (j.type()) {
    case Json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, value] : *j.get_ptr<const Json::object_t*>()) {
        if (!first) out += ',';
        first = false;
        dump_string(key, out);
        out += ':';
        dump_value(value, out);
      }
      out += '}';
      return;
    }
    case Json::value_t::array: {
      out += '[';
      bool first = true;
      for (const Json& item : *j.get_ptr<const Json::array_t*>()) {
        if (!first) out += ',';
        first = false;
        dump_value(item, out);
      }
      out += ']';
      return;
    }
    case Json::value_t::string: dump_string(*j.get_ptr<const Json::string_t*>(), out); return;
    case Json::value_t::boolean: out += j.get<bool>() ? "true" : "false"; return;
    case Json::value_t::null: out += "null"; return;
    case Json::value_t::number_integer: dump_integer(j.get<Json::number_integer_t>(), out); return;
    case Json::value_t::number_unsigned: dump_integer(j.get<Json::number_unsigned_t>(), out); return;
    case Json::value_t::number_float: {
      const double x = j.get<double>();
      if (!std::isfinite(x)) {
        out += "null";
        return;
      }
      std::array<char, 64> buf{};
      out.append(buf.data(), nlohmann::detail::to_chars(buf.data(), buf.data() + buf.size(), x));
      return;
    }
    default: out += j.dump(-1, ' ', false, Json::error_handler_t::replace);  // binary, discarded
  }
}

}  // namespace

bool detail::quick_check_json(std::string_view text, int max_depth) {
  NoOutput none;
  return QuickScan<NoOutput>(text, none).accepts(max_depth);
}

std::optional<Json> detail::quick_parse_json(std::string_view text, int max_depth) {
  Json result;
  DomBuilder dom(result);
  try {
    if (!QuickScan<DomBuilder>(text, dom).accepts(max_depth)) return std::nullopt;
  } catch (const std::exception&) {  // allocation: nlohmann's parse words it
    return std::nullopt;
  }
  return result;
}

bool detail::nlohmann_check_json(std::string_view text, int max_depth, JsonError* error) {
  NoDom none;
  DepthLimited<NoDom> sax(none, max_depth, error);
  return run(text, sax, error) && !sax.failed_deep();
}

std::optional<Json> parse_json(std::string_view text, int max_depth, JsonError* error) {
  if (auto quick = detail::quick_parse_json(text, max_depth)) return quick;
  return detail::nlohmann_parse_json(text, max_depth, error);
}

std::optional<Json> detail::nlohmann_parse_json(std::string_view text, int max_depth, JsonError* error) {
  Json result;
  {
    nlohmann::detail::json_sax_dom_parser<Json> dom(result, /*allow_exceptions=*/false);
    DepthLimited<decltype(dom)> sax(dom, max_depth, error);
    if (!run(text, sax, error) || dom.is_errored() || sax.failed_deep()) {
      // A partial DOM past the limit is at most max_depth deep: destroying it is safe.
      return std::nullopt;
    }
  }
  return result;
}

std::string write_json(const Json& value) {
  std::string out;
  if (value.is_structured()) out.reserve(256);  // an event: spares the first few regrowths
  dump_value(value, out);
  return out;
}

bool check_json(std::string_view text, int max_depth, JsonError* error) {
  return detail::quick_check_json(text, max_depth) || detail::nlohmann_check_json(text, max_depth, error);
}

std::optional<Json> parse_payload(std::string_view payload, int max_depth, std::string* too_deep) {
  JsonError err;
  auto parsed = parse_json(payload, max_depth - 1, &err);
  if (!parsed && err.too_deep && too_deep) {
    *too_deep = "payload is " + err.message + " inside the event (http.max_depth " + std::to_string(max_depth) + ")";
  }
  return parsed;
}

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes body[begin, end) into *out ('+' is a space, WHATWG URL §5.1). False
// with *error at the first bad escape or where the decoded text stops being UTF-8.
bool form_decode(std::string_view body, size_t begin, size_t end, std::string* out, JsonError* error) {
  out->clear();
  for (size_t i = begin; i < end; ++i) {
    const char c = body[i];
    if (c == '+') {
      *out += ' ';
    } else if (c != '%') {
      *out += c;
    } else if (i + 2 < end && hex_value(body[i + 1]) >= 0 && hex_value(body[i + 2]) >= 0) {
      *out += static_cast<char>(hex_value(body[i + 1]) * 16 + hex_value(body[i + 2]));
      i += 2;
    } else {
      error->byte = i + 1;
      error->message = "a '%' not followed by two hex digits";
      return false;
    }
  }
  if (!valid_utf8(*out)) {
    error->byte = begin + 1;
    error->message = "a field that is not UTF-8 once percent-decoded";
    return false;
  }
  return true;
}

// The fields of a form (parse_form, parse_query): `payload_at` gets the 1-based byte of the
// last `payload` field's value.
std::optional<Json> form_fields(std::string_view body, JsonError* error, size_t* payload_at) {
  Json out = Json::object();
  std::string name, value;
  size_t start = 0;
  while (start <= body.size()) {
    size_t end = body.find('&', start);
    if (end == std::string_view::npos) end = body.size();
    if (end > start) {
      size_t eq = body.find('=', start);
      if (eq == std::string_view::npos || eq > end) eq = end;
      if (!form_decode(body, start, eq, &name, error)) return std::nullopt;
      if (!form_decode(body, std::min(eq + 1, end), end, &value, error)) return std::nullopt;
      if (name == "payload") *payload_at = std::min(eq + 1, end) + 1;
      auto it = out.find(name);
      if (it == out.end()) {
        out[name] = value;
      } else {
        if (!it->is_array()) *it = Json::array({std::move(*it)});
        it->push_back(value);
      }
    }
    start = end + 1;
  }
  return out;
}

}  // namespace

std::optional<Json> parse_query(std::string_view query, JsonError* error) {
  size_t payload_at = 0;
  return form_fields(query, error, &payload_at);
}

std::optional<Json> parse_form(std::string_view body, int max_depth, JsonError* error) {
  size_t payload_at = 0;
  std::optional<Json> fields = form_fields(body, error, &payload_at);
  if (!fields) return std::nullopt;
  Json& out = *fields;
  // GitHub sends its JSON as `payload=<json>` when the hook's content type is the form.
  if (auto p = out.find("payload"); p != out.end() && p->is_string()) {
    std::string too_deep;
    auto parsed = parse_payload(p->get_ref<const std::string&>(), max_depth, &too_deep);
    if (parsed) {
      *p = std::move(*parsed);
    } else if (!too_deep.empty()) {
      error->too_deep = true;
      error->byte = payload_at;
      error->message = too_deep;
      return std::nullopt;
    }
  }
  return fields;
}

int json_depth(const Json& value, int limit) {
  struct Frame {
    const Json* v;
    int depth;
  };
  std::vector<Frame> stack{{&value, 0}};
  int deepest = 0;
  while (!stack.empty()) {
    Frame f = stack.back();
    stack.pop_back();
    if (!f.v->is_structured()) continue;
    int d = f.depth + 1;
    if (d > deepest) deepest = d;
    if (deepest > limit) return limit + 1;
    for (const auto& child : *f.v) stack.push_back({&child, d});
  }
  return deepest;
}

}  // namespace weir::flows

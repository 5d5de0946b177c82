// The built-in functions of the expression language. Each takes already evaluated
// arguments and either answers with a pointer to (part of) an argument or writes its
// result to `out`. Errors are values: nullptr plus a message.
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <random>

#include "flows/expr_impl.h"
#include "flows/tables.h"
#include "flows/text.h"
#include "flows/time_format.h"
#include "flows/value.h"

namespace weir::flows {

namespace {

const Json kNull;

using Args = const Json* const*;

const Json* type_error(std::string& err, const char* fn, const char* wanted, const Json& got) {
  err = std::string(fn) + "() needs " + wanted + ", got " + type_name(got);
  if (!got.is_array() && !got.is_object()) err += " " + brief(got, 40);
  return nullptr;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view trim_view(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// 2^63 as a double: doubles in [-2^63, 2^63) convert to int64 exactly.
constexpr double kTwo63 = 9223372036854775808.0;

bool fits_int64(double d) { return d >= -kTwo63 && d < kTwo63; }

// An integral double becomes an int when it fits, else stays a double.
void integral_result(double d, Json& out) {
  if (fits_int64(d)) out = static_cast<int64_t>(d);
  else out = d;
}

// Text → number: optional surrounding whitespace, optional sign, decimal digits with an
// optional fraction and exponent. Integers that overflow int64 become doubles; a value
// beyond the double range, "NaN", "inf", hex and digit separators are errors.
bool parse_number_text(std::string_view text, Json& out, std::string& err) {
  std::string_view s = trim_view(text);
  auto bad = [&]() {
    err = "cannot convert " + brief(Json(std::string(text)), 40) + " to a number";
    return false;
  };
  if (s.empty()) return bad();
  size_t i = 0;
  if (s[0] == '+' || s[0] == '-') ++i;
  size_t int_start = i;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  size_t int_digits = i - int_start;
  size_t frac_digits = 0;
  bool is_float = false;
  if (i < s.size() && s[i] == '.') {
    is_float = true;
    ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++frac_digits;
  }
  if (int_digits + frac_digits == 0) return bad();
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1;
    if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
    size_t exp_start = j;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    if (j == exp_start) return bad();
    is_float = true;
    i = j;
  }
  if (i != s.size()) return bad();
  // from_chars accepts neither '+' nor a leading or trailing '.': normalise those (rare)
  // forms into a small buffer; the common forms are converted in place.
  std::string norm;
  std::string_view num = s;
  bool odd = s[0] == '+' || s[s[0] == '-' ? 1 : 0] == '.' || s.back() == '.';
  if (odd) {
    size_t k = 0;
    if (s[0] == '+') k = 1;
    else if (s[0] == '-') norm.push_back('-'), k = 1;
    if (s[k] == '.') norm.push_back('0');
    norm.append(s.substr(k));
    if (norm.back() == '.') norm.push_back('0');
    num = norm;
  }
  const char* b = num.data();
  const char* e = b + num.size();
  if (!is_float) {
    int64_t v;
    auto r = std::from_chars(b, e, v);
    if (r.ec == std::errc() && r.ptr == e) {
      out = v;
      return true;
    }
  }
  double d = 0;
  auto r = std::from_chars(b, e, d);
  if (r.ec == std::errc::result_out_of_range || !std::isfinite(d)) {
    // from_chars reports underflow as out of range too; only overflow is an error.
    bool tiny = num.find("e-") != std::string_view::npos || num.find("E-") != std::string_view::npos;
    if (tiny) {
      out = num[0] == '-' ? -0.0 : 0.0;
      return true;
    }
    err = "number " + brief(Json(std::string(s)), 40) + " is out of range";
    return false;
  }
  if (r.ec != std::errc() || r.ptr != e) return bad();
  out = d;
  return true;
}

// number(x)
const Json* fn_number(Args a, int, Json& out, std::string& err) {
  const Json& x = *a[0];
  if (x.is_number()) {
    if (x.is_number_unsigned() && !is_int(x)) {
      out = get_double(x);
      return &out;
    }
    return &x;
  }
  if (x.is_boolean()) {
    out = int64_t{x.get<bool>() ? 1 : 0};
    return &out;
  }
  if (x.is_string()) {
    if (!parse_number_text(x.get_ref<const std::string&>(), out, err)) return nullptr;
    return &out;
  }
  return type_error(err, "number", "a string, number or bool", x);
}

// The shared core of int(), floor() etc: a number or numeric text as a double or int.
bool numeric_arg(const char* fn, const Json& x, Json& tmp, const Json** v, std::string& err) {
  if (x.is_number()) {
    *v = &x;
    return true;
  }
  if (x.is_string()) {
    if (!parse_number_text(x.get_ref<const std::string&>(), tmp, err)) return false;
    *v = &tmp;
    return true;
  }
  if (x.is_boolean()) {
    tmp = int64_t{x.get<bool>() ? 1 : 0};
    *v = &tmp;
    return true;
  }
  type_error(err, fn, "a number or numeric string", x);
  return false;
}

// int(x): truncates toward zero.
const Json* fn_int(Args a, int, Json& out, std::string& err) {
  Json tmp;
  const Json* v;
  if (!numeric_arg("int", *a[0], tmp, &v, err)) return nullptr;
  int64_t i;
  if (get_int(*v, &i)) {
    out = i;
    return &out;
  }
  double d = std::trunc(get_double(*v));
  if (!fits_int64(d)) {
    err = "int() of " + brief(*a[0], 40) + " is out of the int64 range";
    return nullptr;
  }
  out = static_cast<int64_t>(d);
  return &out;
}

std::string number_text(const Json& x) {
  int64_t i;
  if (get_int(x, &i)) return std::to_string(i);
  return x.dump();
}

const Json* fn_string(Args a, int, Json& out, std::string&) {
  const Json& x = *a[0];
  if (x.is_string()) return &x;
  if (x.is_null()) out = "null";
  else if (x.is_boolean()) out = x.get<bool>() ? "true" : "false";
  else if (x.is_number()) out = number_text(x);
  else out = dump_safe(x);
  return &out;
}

const Json* fn_bool(Args a, int, Json& out, std::string& err) {
  const Json& x = *a[0];
  if (x.is_boolean()) return &x;
  if (x.is_null()) out = false;
  else if (x.is_number()) out = get_double(x) != 0;
  else if (x.is_string()) {
    std::string s(trim_view(x.get_ref<const std::string&>()));
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (s == "true" || s == "1") out = true;
    else if (s == "false" || s == "0") out = false;
    else {
      err = "cannot convert " + brief(x, 40) + " to a bool (true, false, 1 or 0)";
      return nullptr;
    }
  } else {
    return type_error(err, "bool", "a bool, number, string or null", x);
  }
  return &out;
}

bool get_digits(const char* fn, Args a, int n, int* digits, std::string& err) {
  *digits = 0;
  if (n < 2) return true;
  int64_t d;
  if (!get_int(*a[1], &d)) {
    type_error(err, fn, "an int number of digits", *a[1]);
    return false;
  }
  if (d < -18 || d > 18) {
    err = std::string(fn) + "() digits must be between -18 and 18";
    return false;
  }
  *digits = static_cast<int>(d);
  return true;
}

// round(x, digits = 0): half away from zero. digits <= 0 gives an int (when it fits).
const Json* fn_round(Args a, int n, Json& out, std::string& err) {
  Json tmp;
  const Json* v;
  if (!numeric_arg("round", *a[0], tmp, &v, err)) return nullptr;
  int digits;
  if (!get_digits("round", a, n, &digits, err)) return nullptr;
  int64_t i;
  if (get_int(*v, &i)) {
    if (digits >= 0) {
      out = i;
      return &out;
    }
    int64_t p = 1;
    for (int k = 0; k < -digits; ++k) p *= 10;
    int64_t q = i / p, r = i % p;
    if (r >= 0 ? r * 2 >= p : -r * 2 >= p) q += i < 0 ? -1 : 1;
    int64_t res;
    if (__builtin_mul_overflow(q, p, &res)) out = static_cast<double>(q) * static_cast<double>(p);
    else out = res;
    return &out;
  }
  double x = get_double(*v);
  if (digits == 0) {
    integral_result(std::round(x), out);
    return &out;
  }
  double f = std::pow(10.0, std::abs(digits));
  if (digits > 0) {
    double scaled = x * f;
    out = std::isfinite(scaled) ? std::round(scaled) / f : x;
  } else {
    integral_result(std::round(x / f) * f, out);
  }
  return &out;
}

const Json* floor_ceil(const char* fn, bool up, Args a, Json& out, std::string& err) {
  Json tmp;
  const Json* v;
  if (!numeric_arg(fn, *a[0], tmp, &v, err)) return nullptr;
  if (is_int(*v)) {
    if (v == &tmp) out = std::move(tmp);
    else out = *v;
    return &out;
  }
  double x = get_double(*v);
  integral_result(up ? std::ceil(x) : std::floor(x), out);
  return &out;
}
const Json* fn_floor(Args a, int, Json& out, std::string& err) { return floor_ceil("floor", false, a, out, err); }
const Json* fn_ceil(Args a, int, Json& out, std::string& err) { return floor_ceil("ceil", true, a, out, err); }

const Json* fn_abs(Args a, int, Json& out, std::string& err) {
  const Json& x = *a[0];
  int64_t i;
  if (get_int(x, &i)) {
    if (i == INT64_MIN) out = -static_cast<double>(i);
    else out = i < 0 ? -i : i;
    return &out;
  }
  if (x.is_number()) {
    out = std::fabs(get_double(x));
    return &out;
  }
  return type_error(err, "abs", "a number", x);
}

// min/max over the arguments, or over one array argument. Numbers or strings.
const Json* extreme(const char* fn, bool want_max, Args a, int n, std::string& err) {
  const Json* const* items = a;
  size_t count = static_cast<size_t>(n);
  std::vector<const Json*> elems;
  if (n == 1) {
    if (!a[0]->is_array()) return type_error(err, fn, "an array or several arguments", *a[0]);
    for (const auto& e : *a[0]) elems.push_back(&e);
    items = elems.data();
    count = elems.size();
  }
  if (count == 0) return &kNull;
  const Json* best = items[0];
  if (!best->is_number() && !best->is_string()) return type_error(err, fn, "numbers or strings", *best);
  for (size_t k = 1; k < count; ++k) {
    int c;
    if (!compare(*items[k], *best, &c, err)) {
      err = std::string(fn) + "(): " + err;
      return nullptr;
    }
    if (want_max ? c > 0 : c < 0) best = items[k];
  }
  return best;
}
const Json* fn_min(Args a, int n, Json&, std::string& err) { return extreme("min", false, a, n, err); }
const Json* fn_max(Args a, int n, Json&, std::string& err) { return extreme("max", true, a, n, err); }

const std::string* str_arg(const char* fn, const Json& x, std::string& err, const char* what = "a string") {
  if (!x.is_string()) {
    type_error(err, fn, what, x);
    return nullptr;
  }
  return &x.get_ref<const std::string&>();
}

const Json* case_map(const char* fn, bool upper, Args a, Json& out, std::string& err) {
  const std::string* s = str_arg(fn, *a[0], err);
  if (!s) return nullptr;
  std::string r = *s;
  for (auto& c : r) {
    if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
    if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  }
  out = std::move(r);
  return &out;
}
const Json* fn_lower(Args a, int, Json& out, std::string& err) { return case_map("lower", false, a, out, err); }
const Json* fn_upper(Args a, int, Json& out, std::string& err) { return case_map("upper", true, a, out, err); }

const Json* fn_trim(Args a, int, Json& out, std::string& err) {
  const std::string* s = str_arg("trim", *a[0], err);
  if (!s) return nullptr;
  std::string_view t = trim_view(*s);
  if (t.size() == s->size()) return a[0];
  out = std::string(t);
  return &out;
}

// RFC 3986 percent-encoding of every byte but the unreserved A-Z a-z 0-9 - . _ ~, so a
// value can sit in a URL's path segment or query (docs/adr/0317-per-event-urls.md).
const Json* fn_url_encode(Args a, int, Json& out, std::string& err) {
  const std::string* s = str_arg("url_encode", *a[0], err);
  if (!s) return nullptr;
  out = url_encode(*s);
  return &out;
}

const Json* fn_split(Args a, int, Json& out, std::string& err) {
  const std::string* s = str_arg("split", *a[0], err);
  if (!s) return nullptr;
  const std::string* sep = str_arg("split", *a[1], err, "a string separator");
  if (!sep) return nullptr;
  Json arr = Json::array();
  if (sep->empty()) {
    // Split into code points, never inside one.
    size_t i = 0;
    while (i < s->size()) {
      size_t j = i + 1;
      while (j < s->size() && (static_cast<unsigned char>((*s)[j]) & 0xC0) == 0x80) ++j;
      arr.push_back(s->substr(i, j - i));
      i = j;
    }
  } else {
    size_t start = 0;
    while (true) {
      size_t at = s->find(*sep, start);
      if (at == std::string::npos) {
        arr.push_back(s->substr(start));
        break;
      }
      arr.push_back(s->substr(start, at - start));
      start = at + sep->size();
    }
  }
  out = std::move(arr);
  return &out;
}

const Json* fn_contains(Args a, int, Json& out, std::string& err) {
  const Json& h = *a[0];
  const Json& x = *a[1];
  if (h.is_string()) {
    if (!x.is_string()) return type_error(err, "contains", "a string to look for in a string", x);
    out = h.get_ref<const std::string&>().find(x.get_ref<const std::string&>()) != std::string::npos;
    return &out;
  }
  if (h.is_array()) {
    bool found = false;
    for (const auto& e : h) {
      if (values_equal(e, x)) {
        found = true;
        break;
      }
    }
    out = found;
    return &out;
  }
  if (h.is_object()) {
    if (!x.is_string()) return type_error(err, "contains", "a string key to look for in an object", x);
    out = h.contains(x.get_ref<const std::string&>());
    return &out;
  }
  return type_error(err, "contains", "a string, array or object", h);
}

const Json* affix(const char* fn, bool prefix, Args a, Json& out, std::string& err) {
  const std::string* s = str_arg(fn, *a[0], err);
  if (!s) return nullptr;
  const std::string* p = str_arg(fn, *a[1], err);
  if (!p) return nullptr;
  bool r = s->size() >= p->size() &&
           (prefix ? s->compare(0, p->size(), *p) == 0 : s->compare(s->size() - p->size(), p->size(), *p) == 0);
  out = r;
  return &out;
}
const Json* fn_starts_with(Args a, int, Json& out, std::string& err) { return affix("starts_with", true, a, out, err); }
const Json* fn_ends_with(Args a, int, Json& out, std::string& err) { return affix("ends_with", false, a, out, err); }

const Json* fn_replace(Args a, int, Json& out, std::string& err) {
  const std::string* s = str_arg("replace", *a[0], err);
  if (!s) return nullptr;
  const std::string* from = str_arg("replace", *a[1], err);
  if (!from) return nullptr;
  const std::string* to = str_arg("replace", *a[2], err);
  if (!to) return nullptr;
  if (from->empty()) return a[0];
  std::string r;
  size_t start = 0;
  while (true) {
    size_t at = s->find(*from, start);
    if (at == std::string::npos) break;
    r.append(*s, start, at - start);
    r += *to;
    start = at + from->size();
    if (r.size() > kMaxStringBytes) {  // checked while growing: the result could be |s|·|to|
      err = "replace() would make a string over the limit of " + std::to_string(kMaxStringBytes) + " bytes";
      return nullptr;
    }
  }
  r.append(*s, start, std::string::npos);
  out = std::move(r);
  return &out;
}

const Json* fn_len(Args a, int, Json& out, std::string& err) {
  const Json& x = *a[0];
  if (x.is_string()) out = static_cast<int64_t>(utf8_length(x.get_ref<const std::string&>()));
  else if (x.is_array() || x.is_object()) out = static_cast<int64_t>(x.size());
  else return type_error(err, "len", "a string, array or object", x);
  return &out;
}

const Json* fn_keys(Args a, int, Json& out, std::string& err) {
  const Json& x = *a[0];
  if (!x.is_object()) return type_error(err, "keys", "an object", x);
  Json arr = Json::array();
  for (auto it = x.begin(); it != x.end(); ++it) arr.push_back(it.key());
  out = std::move(arr);
  return &out;
}

const Json* fn_values(Args a, int, Json& out, std::string& err) {
  const Json& x = *a[0];
  if (!x.is_object()) return type_error(err, "values", "an object", x);
  Json arr = Json::array();
  for (const auto& v : x) arr.push_back(v);
  out = std::move(arr);
  return &out;
}

const Json* fn_now(Args, int, Json& out, std::string&) {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  out = static_cast<int64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(now).count());
  return &out;
}

bool time_arg(const char* fn, const Json& x, int64_t* ms, std::string& err) {
  if (get_int(x, ms)) return true;
  if (x.is_number()) {
    double d = std::trunc(get_double(x));
    if (!fits_int64(d)) {
      err = std::string(fn) + "() time is out of range";
      return false;
    }
    *ms = static_cast<int64_t>(d);
    return true;
  }
  if (x.is_string()) {
    std::string e;
    if (parse_rfc3339(x.get_ref<const std::string&>(), ms, &e)) return true;
    err = std::string(fn) + "(): " + brief(x, 40) + " is " + e;
    return false;
  }
  type_error(err, fn, "an RFC 3339 string or milliseconds since the epoch", x);
  return false;
}

const Json* fn_time(Args a, int, Json& out, std::string& err) {
  int64_t ms;
  if (!time_arg("time", *a[0], &ms, err)) return nullptr;
  out = ms;
  return &out;
}

const Json* fn_format_time(Args a, int n, Json& out, std::string& err) {
  int64_t ms;
  if (!time_arg("format_time", *a[0], &ms, err)) return nullptr;
  std::string_view fmt = kDefaultTimeFormat;
  if (n > 1) {
    const std::string* f = str_arg("format_time", *a[1], err, "a format string");
    if (!f) return nullptr;
    fmt = *f;
  }
  std::string r, e;
  if (!format_time(ms, fmt, &r, &e)) {
    err = "format_time(): " + e;
    return nullptr;
  }
  out = std::move(r);
  return &out;
}

const Json* fn_uuid(Args, int, Json& out, std::string&) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  uint64_t hi = rng(), lo = rng();
  hi = (hi & 0xFFFFFFFFFFFF0FFFULL) | 0x0000000000004000ULL;  // version 4
  lo = (lo & 0x3FFFFFFFFFFFFFFFULL) | 0x8000000000000000ULL;  // variant 10
  char buf[37];
  std::snprintf(buf, sizeof buf, "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(hi >> 32),
                static_cast<unsigned>((hi >> 16) & 0xFFFF), static_cast<unsigned>(hi & 0xFFFF),
                static_cast<unsigned>(lo >> 48), static_cast<unsigned long long>(lo & 0xFFFFFFFFFFFFULL));
  out = std::string(buf);
  return &out;
}

const Json* fn_hash(Args a, int, Json& out, std::string&) {
  const Json& x = *a[0];
  out = x.is_string() ? sha256_hex(x.get_ref<const std::string&>()) : sha256_hex(dump_safe(x));
  return &out;
}

const Json* fn_coalesce(Args a, int n, Json&, std::string&) {
  for (int k = 0; k < n; ++k) {
    if (!a[k]->is_null()) return a[k];
  }
  return &kNull;
}

const Json* fn_sum(Args a, int, Json& out, std::string& err) {
  const Json& x = *a[0];
  if (!x.is_array()) return type_error(err, "sum", "an array", x);
  Json acc = int64_t{0};
  size_t index = 0;
  for (const auto& e : x) {
    if (!e.is_number()) {
      err = "sum() needs numbers, element " + std::to_string(index) + " is " + type_name(e);
      return nullptr;
    }
    Json next;
    if (!arith(Op::kAdd, acc, e, next, err)) {
      err = "sum(): " + err;
      return nullptr;
    }
    acc = std::move(next);
    ++index;
  }
  out = std::move(acc);
  return &out;
}

const Json* fn_join(Args a, int n, Json& out, std::string& err) {
  const Json& x = *a[0];
  if (!x.is_array()) return type_error(err, "join", "an array", x);
  std::string sep;
  if (n > 1) {
    const std::string* s = str_arg("join", *a[1], err, "a string separator");
    if (!s) return nullptr;
    sep = *s;
  }
  std::string r;
  size_t index = 0;
  for (const auto& e : x) {
    if (index > 0) r += sep;
    if (e.is_string()) r += e.get_ref<const std::string&>();
    else if (e.is_number()) r += number_text(e);
    else if (e.is_boolean()) r += e.get<bool>() ? "true" : "false";
    else {
      err = "join() needs strings, numbers or bools, element " + std::to_string(index) + " is " + type_name(e);
      return nullptr;
    }
    ++index;
  }
  out = std::move(r);
  return &out;
}

const Json* fn_first(Args a, int, Json&, std::string& err) {
  const Json& x = *a[0];
  if (!x.is_array()) return type_error(err, "first", "an array", x);
  return x.empty() ? &kNull : &x.front();
}

const Json* fn_last(Args a, int, Json&, std::string& err) {
  const Json& x = *a[0];
  if (!x.is_array()) return type_error(err, "last", "an array", x);
  return x.empty() ? &kNull : &x.back();
}

const Builtin kBuiltins[] = {
    {"number", 1, 1, true, fn_number},
    {"int", 1, 1, true, fn_int},
    {"string", 1, 1, true, fn_string},
    {"bool", 1, 1, true, fn_bool},
    {"round", 1, 2, true, fn_round},
    {"floor", 1, 1, true, fn_floor},
    {"ceil", 1, 1, true, fn_ceil},
    {"abs", 1, 1, true, fn_abs},
    {"min", 1, -1, true, fn_min},
    {"max", 1, -1, true, fn_max},
    {"lower", 1, 1, true, fn_lower},
    {"upper", 1, 1, true, fn_upper},
    {"trim", 1, 1, true, fn_trim},
    {"url_encode", 1, 1, true, fn_url_encode},
    {"split", 2, 2, true, fn_split},
    {"contains", 2, 2, true, fn_contains},
    {"starts_with", 2, 2, true, fn_starts_with},
    {"ends_with", 2, 2, true, fn_ends_with},
    {"replace", 3, 3, true, fn_replace},
    {"len", 1, 1, true, fn_len},
    {"keys", 1, 1, true, fn_keys},
    {"values", 1, 1, true, fn_values},
    {"now", 0, 0, false, fn_now},
    {"time", 1, 1, true, fn_time},
    {"format_time", 1, 2, true, fn_format_time},
    {"uuid", 0, 0, false, fn_uuid},
    {"hash", 1, 1, true, fn_hash},
    {"coalesce", 1, -1, true, fn_coalesce},
    {"sum", 1, 1, true, fn_sum},
    {"join", 1, 2, true, fn_join},
    {"first", 1, 1, true, fn_first},
    {"last", 1, 1, true, fn_last},
};

}  // namespace

int find_builtin(std::string_view name) {
  for (size_t i = 0; i < std::size(kBuiltins); ++i) {
    if (kBuiltins[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

const Builtin& builtin(int index) { return kBuiltins[index]; }

std::vector<std::string> builtin_function_names() {
  std::vector<std::string> out;
  for (const auto& b : kBuiltins) out.emplace_back(b.name);
  out.emplace_back("lookup");
  return out;
}

}  // namespace weir::flows

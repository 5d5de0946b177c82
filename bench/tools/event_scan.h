// scan_event(): checks that a body is one JSON value (RFC 8259 syntax) and picks out its
// top-level `id` and `t`, for weir-sink's hot path.
//
// Why not nlohmann's SAX parser: on a 300-byte event it cost ~12% of the sink's CPU (its
// lexer copies every character for error messages); this scanner only walks the bytes.
// It answers kFallback where being exact would need more code than it is worth — an `id`
// string with escapes, or nesting deeper than kMaxDepth — and the caller then asks
// nlohmann. Not checked: that strings are valid UTF-8 (the sink only counts events).
//
// Pure function, no allocation except the id it returns; thread-safe.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace weir::bench {

struct EventIdT {
  std::optional<std::string> id;  // a string id as is, a number id as its text
  std::optional<int64_t> t;
};

enum class ScanResult { kOk, kInvalid, kFallback };

class EventScanner {
 public:
  static constexpr int kMaxDepth = 64;

  static ScanResult scan(std::string_view body, EventIdT* out) {
    EventScanner s(body, out);
    s.ws();
    if (!s.value(0, Key::kOther)) return s.fallback_ ? ScanResult::kFallback : ScanResult::kInvalid;
    s.ws();
    return s.p_ == s.end_ ? ScanResult::kOk : ScanResult::kInvalid;
  }

 private:
  enum class Key { kOther, kId, kT };

  EventScanner(std::string_view body, EventIdT* out) : p_(body.data()), end_(body.data() + body.size()), out_(out) {}

  void ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool eat(char c) {
    if (p_ < end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }
  bool literal(std::string_view word) {
    if (static_cast<size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word) return false;
    p_ += word.size();
    return true;
  }
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  static bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

  // A string starting at p_ (on the quote). Sets text to its raw content between the quotes
  // and escaped when it holds a backslash.
  bool string(std::string_view* text, bool* escaped) {
    if (!eat('"')) return false;
    const char* start = p_;
    *escaped = false;
    while (p_ < end_) {
      unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        *text = std::string_view(start, static_cast<size_t>(p_ - start));
        ++p_;
        return true;
      }
      if (c < 0x20) return false;
      if (c == '\\') {
        *escaped = true;
        if (++p_ >= end_) return false;
        char e = *p_;
        if (e == 'u') {
          if (end_ - p_ < 5) return false;
          for (int i = 1; i <= 4; ++i)
            if (!is_hex(p_[i])) return false;
          p_ += 4;
        } else if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r' && e != 't') {
          return false;
        }
      }
      ++p_;
    }
    return false;
  }

  bool number(Key key) {
    const char* start = p_;
    bool integral = true;
    eat('-');
    if (p_ >= end_) return false;
    if (*p_ == '0') {
      ++p_;
    } else if (is_digit(*p_)) {
      while (p_ < end_ && is_digit(*p_)) ++p_;
    } else {
      return false;
    }
    if (eat('.')) {
      integral = false;
      if (p_ >= end_ || !is_digit(*p_)) return false;
      while (p_ < end_ && is_digit(*p_)) ++p_;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      integral = false;
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ >= end_ || !is_digit(*p_)) return false;
      while (p_ < end_ && is_digit(*p_)) ++p_;
    }
    if (key == Key::kOther) return true;
    std::string text(start, static_cast<size_t>(p_ - start));
    if (key == Key::kId) out_->id = text;
    if (key == Key::kT) {
      if (integral) {
        out_->t = static_cast<int64_t>(std::strtoll(text.c_str(), nullptr, 10));  // saturates
      } else {
        double d = std::strtod(text.c_str(), nullptr);
        if (d > -9.2e18 && d < 9.2e18) out_->t = static_cast<int64_t>(d);  // else: no usable t
      }
    }
    return true;
  }

  // One value; `key` is the top-level key it belongs to (kOther below the top level).
  bool value(int depth, Key key) {
    if (p_ >= end_) return false;
    switch (*p_) {
      case '{': {
        if (depth >= kMaxDepth) return fail_back();
        ++p_;
        ws();
        if (eat('}')) return true;
        for (;;) {
          std::string_view k;
          bool escaped = false;
          if (!string(&k, &escaped)) return false;
          Key child = Key::kOther;
          if (depth == 0) {
            // An escaped key could spell "id" ("\u0069d"): let the exact parser decide.
            if (escaped) return fail_back();
            child = k == "id" ? Key::kId : k == "t" ? Key::kT : Key::kOther;
          }
          ws();
          if (!eat(':')) return false;
          ws();
          if (!value(depth + 1, child)) return false;
          ws();
          if (eat('}')) return true;
          if (!eat(',')) return false;
          ws();
        }
      }
      case '[': {
        if (depth >= kMaxDepth) return fail_back();
        ++p_;
        ws();
        if (eat(']')) return true;
        for (;;) {
          if (!value(depth + 1, Key::kOther)) return false;
          ws();
          if (eat(']')) return true;
          if (!eat(',')) return false;
          ws();
        }
      }
      case '"': {
        std::string_view s;
        bool escaped = false;
        if (!string(&s, &escaped)) return false;
        if (key == Key::kId) {
          if (escaped) return fail_back();
          out_->id = std::string(s);
        }
        return true;
      }
      case 't': return literal("true");
      case 'f': return literal("false");
      case 'n': return literal("null");
      default: return number(key);
    }
  }

  bool fail_back() {
    fallback_ = true;
    return false;
  }

  const char* p_;
  const char* end_;
  EventIdT* out_;
  bool fallback_ = false;
};

}  // namespace weir::bench

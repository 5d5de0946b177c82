#include "flows/text.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

namespace weir::flows {

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    if (const char* v = std::getenv(name.c_str())) return std::string(v);
    return std::nullopt;
  };
}

std::optional<std::string> substitute_env(std::string_view text, const EnvLookup& env, std::string* error) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c != '$' || i + 1 >= text.size()) {
      out.push_back(c);
      continue;
    }
    if (text[i + 1] == '$') {
      out.push_back('$');
      ++i;
      continue;
    }
    if (text[i + 1] != '{') {
      out.push_back(c);
      continue;
    }
    size_t close = text.find('}', i + 2);
    if (close == std::string_view::npos) {
      if (error) *error = "unterminated ${ in \"" + std::string(text) + "\"";
      return std::nullopt;
    }
    std::string_view inner = text.substr(i + 2, close - i - 2);
    std::optional<std::string_view> fallback;
    if (size_t dash = inner.find(":-"); dash != std::string_view::npos) {
      fallback = inner.substr(dash + 2);
      inner = inner.substr(0, dash);
    }
    std::string name(inner);
    bool valid = !name.empty();
    for (char ch : name) {
      if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_')) valid = false;
    }
    if (!valid) {
      if (error) *error = "invalid variable name \"" + name + "\" in ${...}";
      return std::nullopt;
    }
    if (auto v = env(name)) {
      out += *v;
    } else if (fallback) {
      out += *fallback;
    } else {
      if (error)
        *error = "environment variable " + name + " is not set (write ${" + name + ":-default} to give a default)";
      return std::nullopt;
    }
    i = close;
  }
  return out;
}

namespace {
// Splits "12.5ms" into 12.5 and "ms". Returns false when there is no leading number.
bool split_number(std::string_view text, double* number, std::string_view* unit) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  size_t n = 0;
  while (n < text.size() && (std::isdigit(static_cast<unsigned char>(text[n])) || text[n] == '.')) ++n;
  if (n == 0) return false;
  std::string digits(text.substr(0, n));
  char* end = nullptr;
  *number = std::strtod(digits.c_str(), &end);
  if (end != digits.c_str() + digits.size() || !std::isfinite(*number)) return false;
  *unit = text.substr(n);
  while (!unit->empty() && std::isspace(static_cast<unsigned char>(unit->front()))) unit->remove_prefix(1);
  return true;
}
}  // namespace

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  double n = 0;
  std::string_view unit;
  if (!split_number(text, &n, &unit)) return std::nullopt;
  double ms = 0;
  if (unit == "ms") ms = n;
  else if (unit == "us") ms = n / 1000.0;
  else if (unit == "s") ms = n * 1000.0;
  else if (unit == "m") ms = n * 60'000.0;
  else if (unit == "h") ms = n * 3'600'000.0;
  else return std::nullopt;
  if (ms > 1e15) return std::nullopt;
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(ms)));
}

std::string duration_hint(std::string_view text) {
  double n = 0;
  std::string_view unit;
  if (split_number(text, &n, &unit) && unit.empty()) {
    std::string number(text);
    while (!number.empty() && std::isspace(static_cast<unsigned char>(number.back()))) number.pop_back();
    while (!number.empty() && std::isspace(static_cast<unsigned char>(number.front()))) number.erase(0, 1);
    return "a duration needs a unit: write " + number + "s or " + number + "ms (units: " + std::string(kDurationUnits) +
           ")";
  }
  return "units: " + std::string(kDurationUnits);
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> before(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      // Two neighbours swapped ("hmca") is one edit (optimal string alignment).
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], before[j - 2] + 1);
    }
    before.swap(prev);
    prev.swap(cur);
  }
  return prev[b.size()];
}

std::vector<std::string> closest_names(std::string_view word, const std::vector<std::string>& candidates) {
  // Short words take fewer edits: "ab" is no typo of "xy", nor "nope" of "now".
  const size_t limit = word.size() <= 2 ? 0 : word.size() <= 5 ? 1 : 2;
  std::vector<std::pair<size_t, std::string>> near;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d <= limit) near.emplace_back(d, c);
  }
  std::stable_sort(near.begin(), near.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  out.reserve(near.size());
  for (auto& n : near) out.push_back(std::move(n.second));
  return out;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates, bool quoted) {
  std::vector<std::string> near = closest_names(word, candidates);
  if (near.empty()) return "";
  std::string out = "did you mean ";
  for (size_t i = 0; i < near.size(); ++i) {
    if (i > 0) out += i + 1 == near.size() ? " or " : ", ";
    out += quoted ? "\"" + near[i] + "\"" : near[i];
  }
  return out + "?";
}

std::optional<int64_t> parse_size(std::string_view text) {
  double n = 0;
  std::string_view unit;
  if (!split_number(text, &n, &unit)) return std::nullopt;
  double mult = 1;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "KiB") mult = 1024.0;
  else if (unit == "MiB") mult = 1024.0 * 1024;
  else if (unit == "GiB") mult = 1024.0 * 1024 * 1024;
  else if (unit == "KB" || unit == "kB") mult = 1e3;
  else if (unit == "MB") mult = 1e6;
  else if (unit == "GB") mult = 1e9;
  else return std::nullopt;
  double bytes = n * mult;
  if (bytes > 9e18) return std::nullopt;
  return static_cast<int64_t>(std::llround(bytes));
}

std::string url_encode(std::string_view text) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr) != 1) return {};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 0xF]);
  }
  return out;
}

bool constant_time_equals(std::string_view a, std::string_view b) {
  // Comparing digests makes the compare itself fixed-size, so neither a length
  // mismatch nor the first differing byte shows up in the timing.
  unsigned char da[EVP_MAX_MD_SIZE];
  unsigned char db[EVP_MAX_MD_SIZE];
  unsigned int la = 0;
  unsigned int lb = 0;
  if (EVP_Digest(a.data(), a.size(), da, &la, EVP_sha256(), nullptr) != 1 ||
      EVP_Digest(b.data(), b.size(), db, &lb, EVP_sha256(), nullptr) != 1) {
    return false;
  }
  const bool same_digest = CRYPTO_memcmp(da, db, la) == 0;
  return same_digest & (a.size() == b.size());
}

}  // namespace weir::flows

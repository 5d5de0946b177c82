#include "runtime/base/retry_after.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <ctime>
#include <string>

namespace weir {
namespace {

constexpr int64_t kMaxRetryAfterSeconds = 24 * 60 * 60;

std::string_view trim(std::string_view s) {
  constexpr std::string_view kBlanks = " \t\r\n";
  const size_t begin = s.find_first_not_of(kBlanks);
  if (begin == std::string_view::npos) return {};
  const size_t end = s.find_last_not_of(kBlanks);
  return s.substr(begin, end - begin + 1);
}

}  // namespace

std::optional<std::chrono::milliseconds> parse_retry_after(std::string_view value,
                                                           std::chrono::system_clock::time_point now) {
  value = trim(value);
  if (value.empty() || value.size() > kMaxRetryAfterValue) return std::nullopt;
  int64_t seconds = 0;
  if (std::isdigit(static_cast<unsigned char>(value.front())) != 0) {
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
    if (end != value.data() + value.size()) return std::nullopt;
    if (ec == std::errc::result_out_of_range) {
      seconds = kMaxRetryAfterSeconds;
    } else if (ec != std::errc()) {
      return std::nullopt;
    }
  } else {
    const std::string text(value);
    const time_t at = curl_getdate(text.c_str(), nullptr);
    if (at == -1) return std::nullopt;
    seconds = static_cast<int64_t>(at) - static_cast<int64_t>(std::chrono::system_clock::to_time_t(now));
  }
  seconds = std::clamp<int64_t>(seconds, 0, kMaxRetryAfterSeconds);
  return std::chrono::milliseconds(seconds * 1000);
}

}  // namespace weir

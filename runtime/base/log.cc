#include "runtime/base/log.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

#include <nlohmann/json.hpp>

#include "runtime/base/thread_annotations.h"

namespace weir::log {
namespace {
std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
std::atomic<int> g_format{static_cast<int>(Format::kText)};
Mutex g_mu;  // one line at a time on stderr

const char* level_name(Level l) {
  switch (l) {
    case Level::kDebug: return "debug";
    case Level::kInfo: return "info";
    case Level::kWarn: return "warn";
    case Level::kError: return "error";
  }
  return "info";
}

std::string timestamp() {
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}
}  // namespace

void configure(Level level, Format format) {
  g_level = static_cast<int>(level);
  g_format = static_cast<int>(format);
}

bool parse_level(std::string_view s, Level* out) {
  if (s == "debug") *out = Level::kDebug;
  else if (s == "info") *out = Level::kInfo;
  else if (s == "warn" || s == "warning") *out = Level::kWarn;
  else if (s == "error") *out = Level::kError;
  else return false;
  return true;
}

bool parse_format(std::string_view s, Format* out) {
  if (s == "text") *out = Format::kText;
  else if (s == "json") *out = Format::kJson;
  else return false;
  return true;
}

bool enabled(Level level) { return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed); }

namespace {
const auto kProcessStart = std::chrono::steady_clock::now();
}  // namespace

std::string since_start_ms() {
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - kProcessStart).count();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(us) / 1000.0);
  return buf;
}

void startup(std::string_view step) {
  if (!enabled(Level::kDebug)) return;
  std::string message = "start-up: ";
  message += step;
  write(Level::kDebug, message, {{"ms", since_start_ms()}});
}

void write(Level level, std::string_view message, std::initializer_list<Field> fields) {
  if (!enabled(level)) return;
  std::string line;
  if (static_cast<Format>(g_format.load()) == Format::kJson) {
    nlohmann::json j;
    j["ts"] = timestamp();
    j["level"] = level_name(level);
    j["msg"] = std::string(message);
    for (const auto& [k, v] : fields) j[std::string(k)] = v;
    line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    line = timestamp() + " " + level_name(level) + " " + std::string(message);
    for (const auto& [k, v] : fields) {
      line += ' ';
      line += k;
      line += '=';
      // Quoted (JSON string escapes) when it has a space, quote, '=' or any control
      // character: an event id or topic with a newline cannot forge a log line.
      bool quote = v.empty() || std::any_of(v.begin(), v.end(), [](char c) {
                     auto u = static_cast<unsigned char>(c);
                     return u < 0x20 || u == 0x7f || c == ' ' || c == '"' || c == '=';
                   });
      if (!quote) {
        line += v;
        continue;
      }
      // JSON escapes every C0 control character; DEL (0x7f) it leaves raw.
      for (char c : nlohmann::json(v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)) {
        if (c == '\x7f') line += "\\u007f";
        else line += c;
      }
    }
  }
  line += '\n';
  MutexLock lock(g_mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace weir::log

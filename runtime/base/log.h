// Process-wide logger: text or JSON lines on stderr, with levels. Thread-safe.
// Never pass secrets: callers log names of env variables, never their values.
//
//   log::info("listening", {{"addr", "127.0.0.1:8080"}});
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace weir::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };
enum class Format { kText, kJson };

void configure(Level level, Format format);
bool parse_level(std::string_view s, Level* out);
bool parse_format(std::string_view s, Format* out);
bool enabled(Level level);

using Field = std::pair<std::string_view, std::string>;
void write(Level level, std::string_view message, std::initializer_list<Field> fields = {});

inline void debug(std::string_view m, std::initializer_list<Field> f = {}) {
  if (enabled(Level::kDebug)) write(Level::kDebug, m, f);
}
inline void info(std::string_view m, std::initializer_list<Field> f = {}) { write(Level::kInfo, m, f); }
inline void warn(std::string_view m, std::initializer_list<Field> f = {}) { write(Level::kWarn, m, f); }
inline void error(std::string_view m, std::initializer_list<Field> f = {}) { write(Level::kError, m, f); }

// The start-up timeline: milliseconds since this process' static
// initialisation (after the dynamic loader; LD_DEBUG=statistics shows the loader's share),
// as "12.34", for the debug lines "start-up: ...".
std::string since_start_ms();
void startup(std::string_view step);  // debug line "start-up: <step>" with since_start_ms

}  // namespace weir::log

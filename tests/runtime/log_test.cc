// runtime/log: text lines escape control characters (a value cannot forge a line).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>

#include "runtime/base/log.h"
#include "tests/support/support.h"

namespace {
// What one log::write puts on stderr.
std::string logged(weir::log::Format format, const std::string& value) {
  weir::testing::TempDir dir;
  std::fflush(stderr);
  int saved = ::dup(2);
  FILE* f = std::fopen(dir.file("log").c_str(), "w");
  ::dup2(::fileno(f), 2);
  weir::log::configure(weir::log::Level::kInfo, format);
  weir::log::info("msg", {{"v", value}});
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::fclose(f);
  weir::log::configure(weir::log::Level::kInfo, weir::log::Format::kText);
  return weir::testing::read_file(dir.file("log"));
}
}  // namespace

TEST_CASE("text log lines escape control characters", "[log]") {
  std::string forged = logged(weir::log::Format::kText, "id\n2026-12-01T00:00:00Z ERROR forged");
  INFO(forged);
  CHECK(forged.find('\n') == forged.size() - 1);  // one line
  CHECK(forged.find("v=\"id\\n2026") != std::string::npos);
  for (std::string v : {std::string("a\rb"), std::string("a\x1b[31mb"), std::string("a\tb"), std::string("a\x7f")}) {
    std::string line = logged(weir::log::Format::kText, v);
    INFO(line);
    CHECK(line.find(v) == std::string::npos);
    CHECK(line.find("v=\"a") != std::string::npos);
  }
  CHECK(logged(weir::log::Format::kText, "plain").find(" v=plain\n") != std::string::npos);
  CHECK(logged(weir::log::Format::kJson, "a\nb").find("\"v\":\"a\\nb\"") != std::string::npos);
}

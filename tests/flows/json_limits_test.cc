// flows/json_limits: the bounded JSON parse every ingress uses (spec §1.6).
#include <catch2/catch.hpp>
#include <string>

#include "flows/json_limits.h"

using weir::flows::check_json;
using weir::flows::JsonError;
using weir::flows::parse_json;

TEST_CASE("a NUL byte anywhere is not JSON, never the end of the text", "[json_limits]") {
  using namespace std::string_literals;
  for (const std::string& text : {"123\0"s, "{\"a\":1}\0junk"s, "\0"s, "[\"a\0b\"]"s}) {
    INFO("text of " << text.size() << " bytes");
    JsonError err;
    CHECK_FALSE(check_json(text, 128, &err));
    CHECK(err.message == "NUL byte in JSON text");
    CHECK(err.byte == text.find('\0') + 1);
    CHECK_FALSE(parse_json(text, 128));
  }
  CHECK(check_json("[\"a\\u0000b\"]", 128));  // an escaped NUL is fine
}

TEST_CASE("depth is checked while parsing: at the limit yes, one past it no", "[json_limits]") {
  std::string at(128, '['), past(129, '[');
  at += std::string(128, ']');
  past += std::string(129, ']');
  CHECK(check_json(at, 128));
  JsonError err;
  CHECK_FALSE(check_json(past, 128, &err));
  CHECK(err.too_deep);
  CHECK(parse_json(at, 128));
  CHECK_FALSE(parse_json(past, 128));
}

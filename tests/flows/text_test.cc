// flows/text.h: ${} substitution, durations and sizes.
#include <catch2/catch.hpp>

#include <map>

#include "flows/text.h"

using namespace weir::flows;
using std::chrono::milliseconds;

namespace {
EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& n) -> std::optional<std::string> {
    auto it = vars.find(n);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}
}  // namespace

TEST_CASE("substitute_env", "[text]") {
  auto env = env_of({{"A", "1"}, {"EMPTY", ""}, {"B_2", "two"}});
  std::string err;
  CHECK(substitute_env("x${A}y", env, &err) == "x1y");
  CHECK(substitute_env("${B_2}${A}", env, &err) == "two1");
  CHECK(substitute_env("${NOPE:-dflt}", env, &err) == "dflt");
  CHECK(substitute_env("${NOPE:-}", env, &err) == "");
  CHECK(substitute_env("${A:-dflt}", env, &err) == "1");     // set wins over the default
  CHECK(substitute_env("${EMPTY:-dflt}", env, &err) == "");  // set but empty is still set
  CHECK(substitute_env("${NOPE:-http://h:1/x}", env, &err) == "http://h:1/x");
  CHECK(substitute_env("$$", env, &err) == "$");
  CHECK(substitute_env("$${A}", env, &err) == "${A}");
  CHECK(substitute_env("a$b $", env, &err) == "a$b $");  // a lone $ stays
  CHECK(substitute_env("no vars", env, &err) == "no vars");
  CHECK_FALSE(substitute_env("${NOPE}", env, &err));
  CHECK(err.find("NOPE is not set") != std::string::npos);
  CHECK_FALSE(substitute_env("${A", env, &err));
  CHECK(err.find("unterminated") != std::string::npos);
  CHECK_FALSE(substitute_env("${}", env, &err));
  CHECK(err.find("invalid variable name") != std::string::npos);
  CHECK_FALSE(substitute_env("${A-B}", env, &err));
  CHECK(err.find("invalid variable name") != std::string::npos);
}

TEST_CASE("parse_duration", "[text]") {
  CHECK(parse_duration("250ms") == milliseconds(250));
  CHECK(parse_duration("3s") == milliseconds(3000));
  CHECK(parse_duration("1.5s") == milliseconds(1500));
  CHECK(parse_duration("1m") == milliseconds(60000));
  CHECK(parse_duration("1h") == milliseconds(3600000));
  CHECK(parse_duration("1500us") == milliseconds(2));  // rounded to the nearest ms
  CHECK_FALSE(parse_duration("100"));                  // a number needs its unit (flows/text.h)
  CHECK_FALSE(parse_duration("0"));
  CHECK(parse_duration("0ms") == milliseconds(0));
  CHECK(parse_duration(" 2s ") == milliseconds(2000));
  CHECK(parse_duration("2 s") == milliseconds(2000));
  CHECK_FALSE(parse_duration(""));
  CHECK_FALSE(parse_duration("s"));
  CHECK_FALSE(parse_duration("2x"));
  CHECK_FALSE(parse_duration("-2s"));
  CHECK_FALSE(parse_duration("1..2s"));
  CHECK_FALSE(parse_duration("1e300h"));
}

TEST_CASE("parse_size", "[text]") {
  CHECK(parse_size("512KiB") == 512 * 1024);
  CHECK(parse_size("1MiB") == 1024 * 1024);
  CHECK(parse_size("1GiB") == 1024LL * 1024 * 1024);
  CHECK(parse_size("10KB") == 10000);
  CHECK(parse_size("1MB") == 1000000);
  CHECK(parse_size("123") == 123);
  CHECK(parse_size("123B") == 123);
  CHECK(parse_size("1.5KiB") == 1536);
  CHECK_FALSE(parse_size(""));
  CHECK_FALSE(parse_size("KiB"));
  CHECK_FALSE(parse_size("1TiB"));
  CHECK_FALSE(parse_size("-1"));
  CHECK_FALSE(parse_size("99999999999GB"));
}

TEST_CASE("constant_time_equals compares tokens exactly", "[text]") {
  CHECK(constant_time_equals("s3cret-token", "s3cret-token"));
  CHECK(constant_time_equals("", ""));
  CHECK_FALSE(constant_time_equals("s3cret-token", "s3cret-tokeN"));
  CHECK_FALSE(constant_time_equals("s3cret-token", "s3cret-token "));
  CHECK_FALSE(constant_time_equals("s3cret", "s3cret-token"));
  CHECK_FALSE(constant_time_equals("", "x"));
  CHECK(constant_time_equals(std::string("a\0b", 3), std::string("a\0b", 3)));
  CHECK_FALSE(constant_time_equals(std::string("a\0b", 3), std::string("a\0c", 3)));
}

TEST_CASE("sha256_hex is the lowercase hex SHA-256", "[text]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

// Every built-in function, with its conversions at the edges and its error paths.
#include <catch2/catch.hpp>
#include <regex>

#include "expr_helpers.h"
#include "flows/time_format.h"

using namespace weir::flows;
using namespace weir::flows::testing;

TEST_CASE("number()", "[functions]") {
  CHECK(same(eval_ok("number('12')"), Json(12)));
  CHECK(same(eval_ok("number('-12')"), Json(-12)));
  CHECK(same(eval_ok("number('+12')"), Json(12)));
  CHECK(same(eval_ok("number('12.50')"), Json(12.5)));
  CHECK(same(eval_ok("number(' 7 ')"), Json(7)));  // surrounding whitespace is fine
  CHECK(same(eval_ok("number('.5')"), Json(0.5)));
  CHECK(same(eval_ok("number('5.')"), Json(5.0)));
  CHECK(same(eval_ok("number('1e3')"), Json(1000.0)));
  CHECK(same(eval_ok("number('-0')"), Json(0)));
  CHECK(same(eval_ok("number('9223372036854775807')"), Json(INT64_MAX)));
  CHECK(same(eval_ok("number('-9223372036854775808')"), Json(INT64_MIN)));
  CHECK(same(eval_ok("number('9223372036854775808')"), Json(9223372036854775808.0)));  // beyond int64: double
  CHECK(same(eval_ok("number('1e-400')"), Json(0.0)));
  CHECK(same(eval_ok("number(3)"), Json(3)));
  CHECK(same(eval_ok("number(2.5)"), Json(2.5)));
  CHECK(same(eval_ok("number(true)"), Json(1)));
  CHECK(same(eval_ok("number(false)"), Json(0)));
  for (const char* bad : {"'abc'", "''", "' '", "'NaN'", "'nan'", "'inf'", "'-Infinity'", "'0x10'", "'1_000'", "'1,5'",
                          "'1e'", "'--1'", "'1.2.3'", "'12abc'", "'.'", "'+'"}) {
    INFO(bad);
    CHECK(eval_err(std::string("number(") + bad + ")").find("to a number") != std::string::npos);
  }
  CHECK(eval_err("number('1e400')").find("out of range") != std::string::npos);
  CHECK(eval_err("number('-1e309')").find("out of range") != std::string::npos);
  CHECK(eval_err("number(null)").find("number() needs a string, number or bool, got null") != std::string::npos);
  CHECK(eval_err("number([1])").find("got array") != std::string::npos);
  CHECK(eval_err("number({})").find("got object") != std::string::npos);
  // The message names the failing sub-expression and value.
  CHECK(eval_err("number(this.x)", Json::parse(R"({"x": "abc"})")) ==
        "number(this.x): cannot convert \"abc\" to a number");
}

TEST_CASE("int()", "[functions]") {
  CHECK(same(eval_ok("int('2')"), Json(2)));
  CHECK(same(eval_ok("int('2.9')"), Json(2)));  // truncates toward zero
  CHECK(same(eval_ok("int('-2.9')"), Json(-2)));
  CHECK(same(eval_ok("int(2.9)"), Json(2)));
  CHECK(same(eval_ok("int(-0.5)"), Json(0)));
  CHECK(same(eval_ok("int(7)"), Json(7)));
  CHECK(same(eval_ok("int(true)"), Json(1)));
  CHECK(same(eval_ok("int('9223372036854775807')"), Json(INT64_MAX)));
  CHECK(same(eval_ok("int(-9223372036854775808.0)"), Json(INT64_MIN)));
  CHECK(eval_err("int(9223372036854775808.0)").find("out of the int64 range") != std::string::npos);
  CHECK(eval_err("int('1e30')").find("out of the int64 range") != std::string::npos);
  CHECK(eval_err("int('x')").find("to a number") != std::string::npos);
  CHECK(eval_err("int(null)").find("int() needs a number or numeric string, got null") != std::string::npos);
}

TEST_CASE("string()", "[functions]") {
  CHECK(same(eval_ok("string('s')"), Json("s")));
  CHECK(same(eval_ok("string(42)"), Json("42")));
  CHECK(same(eval_ok("string(-9223372036854775808)"), Json("-9223372036854775808")));
  CHECK(same(eval_ok("string(2.5)"), Json("2.5")));
  CHECK(same(eval_ok("string(0.1 + 0.2)"), Json("0.30000000000000004")));  // shortest round-trip form
  CHECK(same(eval_ok("string(2.0)"), Json("2.0")));
  CHECK(same(eval_ok("string(true)"), Json("true")));
  CHECK(same(eval_ok("string(null)"), Json("null")));
  CHECK(same(eval_ok("string([1, 'a'])"), Json("[1,\"a\"]")));
  CHECK(same(eval_ok("string({b: 1, a: 2})"), Json("{\"a\":2,\"b\":1}")));
  CHECK(same(eval_ok("string('\\u00e9')"), Json("\xC3\xA9")));
}

TEST_CASE("bool()", "[functions]") {
  CHECK(same(eval_ok("bool(true)"), Json(true)));
  CHECK(same(eval_ok("bool(null)"), Json(false)));
  CHECK(same(eval_ok("bool(0)"), Json(false)));
  CHECK(same(eval_ok("bool(0.0)"), Json(false)));
  CHECK(same(eval_ok("bool(-3)"), Json(true)));
  CHECK(same(eval_ok("bool('true')"), Json(true)));
  CHECK(same(eval_ok("bool('FALSE')"), Json(false)));
  CHECK(same(eval_ok("bool('1')"), Json(true)));
  CHECK(same(eval_ok("bool(' 0 ')"), Json(false)));
  CHECK(eval_err("bool('yes')").find("cannot convert \"yes\" to a bool") != std::string::npos);
  CHECK(eval_err("bool([])").find("bool() needs") != std::string::npos);
}

TEST_CASE("round, floor, ceil, abs", "[functions]") {
  CHECK(same(eval_ok("round(2.5)"), Json(3)));
  CHECK(same(eval_ok("round(-2.5)"), Json(-3)));  // half away from zero
  CHECK(same(eval_ok("round(2.4)"), Json(2)));
  CHECK(same(eval_ok("round(2.567, 2)"), Json(2.57)));
  CHECK(same(eval_ok("round(-2.567, 1)"), Json(-2.6)));
  CHECK(same(eval_ok("round(1234.5, -2)"), Json(1200)));
  CHECK(same(eval_ok("round(1250, -2)"), Json(1300)));
  CHECK(same(eval_ok("round(-1250, -2)"), Json(-1300)));
  CHECK(same(eval_ok("round(1249, -2)"), Json(1200)));
  CHECK(same(eval_ok("round(7, 2)"), Json(7)));
  CHECK(same(eval_ok("round('3.14159', 3)"), Json(3.142)));
  CHECK(same(eval_ok("round(1e300)"), Json(1e300)));     // too big for int64: stays double
  CHECK(same(eval_ok("round(1e307, 2)"), Json(1e307)));  // scaling would overflow: unchanged
  CHECK(same(eval_ok("round(9223372036854775807, -1)"), Json(9223372036854775810.0)));
  CHECK(eval_err("round(1, 19)").find("between -18 and 18") != std::string::npos);
  CHECK(eval_err("round(1, 1.5)").find("int number of digits") != std::string::npos);
  CHECK(eval_err("round(null)").find("round() needs") != std::string::npos);
  CHECK(same(eval_ok("floor(2.7)"), Json(2)));
  CHECK(same(eval_ok("floor(-2.1)"), Json(-3)));
  CHECK(same(eval_ok("floor(5)"), Json(5)));
  CHECK(same(eval_ok("floor('2.5')"), Json(2)));
  CHECK(same(eval_ok("ceil(2.1)"), Json(3)));
  CHECK(same(eval_ok("ceil(-2.7)"), Json(-2)));
  CHECK(same(eval_ok("ceil(1e20)"), Json(1e20)));
  CHECK(eval_err("ceil('x')").find("to a number") != std::string::npos);
  CHECK(same(eval_ok("abs(-3)"), Json(3)));
  CHECK(same(eval_ok("abs(-3.5)"), Json(3.5)));
  CHECK(same(eval_ok("abs(-9223372036854775808)"), Json(9223372036854775808.0)));
  CHECK(eval_err("abs('1')").find("abs() needs a number, got string") != std::string::npos);
}

TEST_CASE("min and max", "[functions]") {
  CHECK(same(eval_ok("min(3, 1, 2)"), Json(1)));
  CHECK(same(eval_ok("max(3, 1.5, 2)"), Json(3)));
  CHECK(same(eval_ok("min([4, 2.5])"), Json(2.5)));
  CHECK(same(eval_ok("max(['b', 'a', 'c'])"), Json("c")));
  CHECK(eval_ok("min([])").is_null());
  CHECK(same(eval_ok("max(1 + 1, 0)"), Json(2)));  // computed arguments survive the call
  CHECK(eval_err("min(1, 'a')").find("cannot compare") != std::string::npos);
  CHECK(eval_err("max(5)").find("max() needs an array") != std::string::npos);
  CHECK(eval_err("min([null, 1])").find("numbers or strings") != std::string::npos);
}

TEST_CASE("string functions", "[functions]") {
  CHECK(same(eval_ok("lower('AbC \\u00c9')"), Json("abc \xC3\x89")));  // ASCII only
  CHECK(same(eval_ok("upper('abc')"), Json("ABC")));
  CHECK(same(eval_ok("trim('  a b \\n\\t')"), Json("a b")));
  CHECK(same(eval_ok("trim('x')"), Json("x")));
  CHECK(same(eval_ok("split('a,b,,c', ',')"), Json::parse(R"(["a", "b", "", "c"])")));
  CHECK(same(eval_ok("split('abc', ', ')"), Json::parse(R"(["abc"])")));
  CHECK(same(eval_ok("split('', ',')"), Json::parse(R"([""])")));
  CHECK(same(eval_ok("split('h\\u00e9!', '')"), Json::parse(R"(["h", "\u00e9", "!"])")));  // code points
  CHECK(same(eval_ok("contains('hello', 'ell')"), Json(true)));
  CHECK(same(eval_ok("contains('hello', 'x')"), Json(false)));
  CHECK(same(eval_ok("contains([1, 2.0, 'a'], 2)"), Json(true)));
  CHECK(same(eval_ok("contains([1, 2], 3)"), Json(false)));
  CHECK(same(eval_ok("contains({a: 1}, 'a')"), Json(true)));
  CHECK(same(eval_ok("starts_with('hello', 'he')"), Json(true)));
  CHECK(same(eval_ok("starts_with('he', 'hello')"), Json(false)));
  CHECK(same(eval_ok("ends_with('hello', 'llo')"), Json(true)));
  CHECK(same(eval_ok("ends_with('hello', '')"), Json(true)));
  CHECK(same(eval_ok("replace('a-b-c', '-', '+')"), Json("a+b+c")));
  CHECK(same(eval_ok("replace('aaa', 'aa', 'b')"), Json("ba")));
  CHECK(same(eval_ok("replace('abc', '', 'x')"), Json("abc")));
  CHECK(same(eval_ok("len('h\\u00e9llo')"), Json(5)));  // code points, not bytes
  CHECK(same(eval_ok("len([1, 2])"), Json(2)));
  CHECK(same(eval_ok("len({a: 1})"), Json(1)));
  CHECK(eval_err("len(5)").find("len() needs a string, array or object, got number") != std::string::npos);
  CHECK(eval_err("len(null)").find("got null") != std::string::npos);
  CHECK(eval_err("lower(1)").find("lower() needs a string") != std::string::npos);
  CHECK(eval_err("upper(null)").find("upper() needs a string") != std::string::npos);
  CHECK(eval_err("trim([])").find("trim() needs a string") != std::string::npos);
  CHECK(eval_err("split('a', 1)").find("split() needs a string separator") != std::string::npos);
  CHECK(eval_err("contains(1, 1)").find("contains() needs a string, array or object") != std::string::npos);
  CHECK(eval_err("contains('a', 1)").find("a string to look for") != std::string::npos);
  CHECK(eval_err("starts_with(1, 'a')").find("starts_with() needs a string") != std::string::npos);
  CHECK(eval_err("replace('a', 'a', 1)").find("replace() needs a string") != std::string::npos);
}

TEST_CASE("keys, values, coalesce, hash, uuid", "[functions]") {
  CHECK(same(eval_ok("keys({b: 1, a: 2})"), Json::parse(R"(["a", "b"])")));
  CHECK(same(eval_ok("values({b: 1, a: 2})"), Json::parse("[2, 1]")));
  CHECK(eval_err("keys([1])").find("keys() needs an object, got array") != std::string::npos);
  CHECK(eval_err("values('x')").find("values() needs an object") != std::string::npos);
  CHECK(same(eval_ok("coalesce(null, this.missing, 3, 4)"), Json(3)));
  CHECK(eval_ok("coalesce(null)").is_null());
  CHECK(same(eval_ok("coalesce(null, 1 + 1)"), Json(2)));
  // sha-256, hex.
  CHECK(same(eval_ok("hash('abc')"), Json("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")));
  CHECK(eval_ok("hash({a: 1})") == eval_ok("hash('{\"a\":1}')"));
  CHECK(eval_ok("hash(1)") != eval_ok("hash('2')"));
  std::regex v4("^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$");
  std::string u1 = eval_ok("uuid()").get<std::string>();
  std::string u2 = eval_ok("uuid()").get<std::string>();
  CHECK(std::regex_match(u1, v4));
  CHECK(u1 != u2);
}

TEST_CASE("array functions", "[functions]") {
  CHECK(same(eval_ok("sum([1, 2, 3])"), Json(6)));
  CHECK(same(eval_ok("sum([1, 2.5])"), Json(3.5)));
  CHECK(same(eval_ok("sum([])"), Json(0)));
  CHECK(same(eval_ok("sum([9223372036854775807, 1])"), Json(9223372036854775808.0)));
  CHECK(eval_err("sum([1, '2'])").find("sum() needs numbers, element 1 is string") != std::string::npos);
  CHECK(eval_err("sum([1e308, 1e308])").find("not a finite number") != std::string::npos);
  CHECK(eval_err("sum('x')").find("sum() needs an array") != std::string::npos);
  CHECK(same(eval_ok("join(['a', 1, true, 2.5], '/')"), Json("a/1/true/2.5")));
  CHECK(same(eval_ok("join(['a', 'b'])"), Json("ab")));
  CHECK(same(eval_ok("join([], ',')"), Json("")));
  CHECK(eval_err("join([null], ',')").find("element 0 is null") != std::string::npos);
  CHECK(eval_err("join([1], 2)").find("separator") != std::string::npos);
  CHECK(same(eval_ok("first([5, 6])"), Json(5)));
  CHECK(same(eval_ok("last([5, 6])"), Json(6)));
  CHECK(eval_ok("first([])").is_null());
  CHECK(eval_ok("last([])").is_null());
  CHECK(eval_err("first('ab')").find("first() needs an array") != std::string::npos);
  CHECK(eval_err("last({})").find("last() needs an array") != std::string::npos);
}

TEST_CASE("time, format_time, now", "[functions][time]") {
  CHECK(same(eval_ok("time('1970-01-01T00:00:00Z')"), Json(0)));
  CHECK(same(eval_ok("time('2026-01-01T00:00:00Z')"), Json(int64_t{1767225600000})));
  CHECK(same(eval_ok("time('2026-01-01T00:00:00.250Z')"), Json(int64_t{1767225600250})));
  CHECK(same(eval_ok("time('2026-01-01T00:00:00.1239Z')"), Json(int64_t{1767225600123})));
  CHECK(same(eval_ok("time('2026-01-01T01:30:00+01:30')"), Json(int64_t{1767225600000})));
  CHECK(same(eval_ok("time('2025-12-31T19:00:00-05:00')"), Json(int64_t{1767225600000})));
  CHECK(same(eval_ok("time('2026-01-01 00:00:00z')"), Json(int64_t{1767225600000})));
  CHECK(same(eval_ok("time('2026-01-01')"), Json(int64_t{1767225600000})));
  CHECK(same(eval_ok("time('1969-12-31T23:59:59Z')"), Json(-1000)));
  CHECK(same(eval_ok("time('2024-02-29T00:00:00Z')"), Json(int64_t{1709164800000})));  // leap day
  CHECK(same(eval_ok("time(1234)"), Json(1234)));
  CHECK(same(eval_ok("time(1234.9)"), Json(1234)));
  for (const char* bad : {"'2026-02-29T00:00:00Z'", "'2026-13-01T00:00:00Z'", "'2026-01-01T24:00:00Z'",
                          "'2026-01-01T00:00:00'", "'2026-01-01T00:00Z'", "'yesterday'", "''",
                          "'2026-01-01T00:00:00+0100'", "'2026-01-01T00:00:00Zjunk'", "'2026-01-01T00:00:00.Z'"}) {
    INFO(bad);
    CHECK(eval_err(std::string("time(") + bad + ")").find("RFC 3339") != std::string::npos);
  }
  CHECK(eval_err("time(null)").find("time() needs an RFC 3339 string") != std::string::npos);
  CHECK(same(eval_ok("format_time(0)"), Json("1970-01-01T00:00:00.000Z")));
  CHECK(same(eval_ok("format_time(1767225600250)"), Json("2026-01-01T00:00:00.250Z")));
  CHECK(same(eval_ok("format_time(-1)"), Json("1969-12-31T23:59:59.999Z")));
  CHECK(same(eval_ok("format_time(1767225600000, '%Y/%m/%d %H:%M:%S %a %b %j %Z %z %s %%')"),
             Json("2026/01/01 00:00:00 Thu Jan 001 UTC +0000 1767225600 %")));
  CHECK(same(eval_ok("format_time(1767268800000, '%A %B %e %I %p %F %T %y %L %f')"),
             Json("Thursday January  1 12 PM 2026-01-01 12:00:00 26 000 000000")));
  CHECK(same(eval_ok("format_time('2026-03-04T05:06:07Z', '%d.%m.%Y')"), Json("04.03.2026")));
  CHECK(eval_err("format_time(0, '%Q')").find("unknown conversion %Q") != std::string::npos);
  CHECK(eval_err("format_time(0, '%')").find("lone %") != std::string::npos);
  CHECK(eval_err("format_time(253402300800000)").find("years 0 to 9999") != std::string::npos);
  CHECK(eval_err("format_time(0, 5)").find("format string") != std::string::npos);
  // now() is milliseconds since the epoch, after 2025.
  CHECK(eval_ok("now()").get<int64_t>() > 1735689600000);
  CHECK(same(eval_ok("now() - now() <= 0"), Json(true)));
  // Round trip over a range of days, also before 1970.
  for (int64_t day = -719000; day <= 2900000; day += 9973) {
    int64_t ms = day * 86400000 + 45296789;
    std::string text, err;
    REQUIRE(format_time(ms, kDefaultTimeFormat, &text, &err));
    int64_t back = 0;
    REQUIRE(parse_rfc3339(text, &back, &err));
    CHECK(back == ms);
  }
}

TEST_CASE("lookup()", "[functions]") {
  TableSet tables;
  Table& t = tables.add("tiers");
  t.insert("c1", Json::parse(R"({"customer_id": "c1", "tier": "gold"})"));
  t.insert("7", Json::parse(R"({"customer_id": 7, "tier": "silver"})"));
  CHECK(eval_ok("lookup(tiers, 'c1').tier", Json::object(), &tables) == "gold");
  CHECK(eval_ok("lookup('tiers', 'c1').tier", Json::object(), &tables) == "gold");
  CHECK(eval_ok("lookup(tiers, 7).tier", Json::object(), &tables) == "silver");  // numbers match by text
  CHECK(eval_ok("lookup(tiers, '7').tier", Json::object(), &tables) == "silver");
  CHECK(eval_ok("lookup(tiers, 7.0).tier", Json::object(), &tables) == "silver");
  CHECK(eval_ok("lookup(tiers, 'nope')", Json::object(), &tables).is_null());
  CHECK(eval_ok("lookup(tiers, this.missing)", Json::object(), &tables).is_null());
  CHECK(eval_ok("lookup(tiers, 'nope').tier ?? 'bronze'", Json::object(), &tables) == "bronze");
  CHECK(eval_ok("lookup(this.t, 'c1').tier", Json::parse(R"({"t": "tiers"})"), &tables) == "gold");
  // A table that is not there: a compile error when the name is written, else a flow error.
  CHECK(compile_err("lookup(tierz, 'c1')", &tables).message.find("unknown table 'tierz' (tables: tiers)") !=
        std::string::npos);
  CHECK(eval_err("lookup(this.t, 'c1')", Json::parse(R"({"t": "nope"})"), &tables) ==
        "lookup(this.t, 'c1'): no table named \"nope\"");
  CHECK(eval_err("lookup(this.t, 'c1')", Json::parse(R"({"t": 5})"), &tables).find("table name (a string)") !=
        std::string::npos);
  CHECK(eval_err("lookup(tiers, [1])", Json::object(), &tables).find("key must be a string or a number") !=
        std::string::npos);
  CHECK(eval_err("lookup(tiers, 'c1')", Json::object(), nullptr).find("no table named") != std::string::npos);
  CHECK(compile_err("lookup(tiers)", &tables).message.find("','") != std::string::npos);
  // The row is returned by reference: no copy of the table's data.
  Expression e;
  CompileError ce;
  CompileScope scope;
  scope.tables = &tables;
  REQUIRE(Expression::compile("lookup(tiers, 'c1')", scope, &e, &ce));
  EvalContext ctx;
  Json self;
  ctx.self = &self;
  ctx.tables = &tables;
  Json scratch;
  CHECK(e.eval(ctx, scratch) == t.find_text("c1"));
}

TEST_CASE("every listed function is built in", "[functions]") {
  auto names = builtin_function_names();
  for (const char* f : {"number",    "int",     "string", "bool",     "round",  "floor", "ceil",     "abs",
                        "min",       "max",     "lower",  "upper",    "trim",   "split", "contains", "starts_with",
                        "ends_with", "replace", "len",    "keys",     "values", "now",   "time",     "format_time",
                        "lookup",    "uuid",    "hash",   "coalesce", "sum",    "join",  "first",    "last"}) {
    INFO(f);
    CHECK(std::find(names.begin(), names.end(), f) != names.end());
  }
}

// The expression language: literals, paths, operators, lambdas, compile errors and
// the edges of the number and string types.
#include <catch2/catch.hpp>

#include "expr_helpers.h"

using namespace weir::flows;
using namespace weir::flows::testing;

namespace {
const Json kEvent = Json::parse(R"({
  "id": "o1", "n": 7, "f": 2.5, "s": "hello", "t": true, "no": false, "nil": null,
  "a": {"b": {"c": 42}}, "arr": [1, 2, 3], "odd key": "odd", "items": [
    {"sku": "a", "qty": "2", "price": "10.50"}, {"sku": "b", "qty": "1", "price": "3"}],
  "big": 9223372036854775807, "huge": 18446744073709551615, "neg": -9223372036854775808
})");
}  // namespace

TEST_CASE("literals", "[expr]") {
  CHECK(eval_ok("null").is_null());
  CHECK(same(eval_ok("true"), Json(true)));
  CHECK(same(eval_ok("false"), Json(false)));
  CHECK(same(eval_ok("42"), Json(42)));
  CHECK(same(eval_ok("4.2"), Json(4.2)));
  CHECK(same(eval_ok("1e3"), Json(1000.0)));
  CHECK(same(eval_ok("2.5E-1"), Json(0.25)));
  CHECK(same(eval_ok("\"s\""), Json("s")));
  CHECK(same(eval_ok("'s'"), Json("s")));
  CHECK(same(eval_ok("[1, 'a', null, [true]]"), Json::parse(R"([1, "a", null, [true]])")));
  CHECK(same(eval_ok("[]"), Json::array()));
  CHECK(same(eval_ok("[1, 2,]"), Json::parse("[1, 2]")));
  CHECK(eval_ok("{k: 1, 'odd key': 'v', \"q\": [1], null: 2, this: 3}") ==
        Json::parse(R"({"k": 1, "odd key": "v", "q": [1], "null": 2, "this": 3})"));
  CHECK(same(eval_ok("{}"), Json::object()));
}

TEST_CASE("paths: this, members, indexes - a missing path is null", "[expr]") {
  CHECK(eval_ok("this", kEvent) == kEvent);
  CHECK(same(eval_ok("this.id", kEvent), Json("o1")));
  CHECK(same(eval_ok("this.a.b.c", kEvent), Json(42)));
  CHECK(same(eval_ok("this.arr[0]", kEvent), Json(1)));
  CHECK(same(eval_ok("this.arr[2]", kEvent), Json(3)));
  CHECK(same(eval_ok("this.arr[-1]", kEvent), Json(3)));
  CHECK(same(eval_ok("this['odd key']", kEvent), Json("odd")));
  CHECK(same(eval_ok("this[\"a\"]['b'].c", kEvent), Json(42)));
  CHECK(same(eval_ok("this.items[1].sku", kEvent), Json("b")));
  CHECK(same(eval_ok("this.arr[this.n - 6]", kEvent), Json(2)));
  CHECK(same(eval_ok("this[this.s == 'hello' ? 'id' : 'n']", kEvent), Json("o1")));
  // Missing things are null, never an error.
  CHECK(eval_ok("this.missing", kEvent).is_null());
  CHECK(eval_ok("this.missing.deeper.still", kEvent).is_null());
  CHECK(eval_ok("this.arr[3]", kEvent).is_null());
  CHECK(eval_ok("this.arr[-4]", kEvent).is_null());
  CHECK(eval_ok("this.id.x", kEvent).is_null());   // member of a string
  CHECK(eval_ok("this.a[0]", kEvent).is_null());   // index into an object
  CHECK(eval_ok("this.arr.x", kEvent).is_null());  // member of an array
  CHECK(eval_ok("this.nil.x", kEvent).is_null());
  CHECK(eval_ok("this.arr[this.missing]", kEvent).is_null());
  CHECK(eval_ok("this.x", Json(5)).is_null());  // the event need not be an object
  // Paths on computed values.
  CHECK(same(eval_ok("{a: {b: 3}}.a.b"), Json(3)));
  CHECK(same(eval_ok("[[1, 2], [3]][0][1]"), Json(2)));
  CHECK(same(eval_ok("(this.a).b.c", kEvent), Json(42)));
  CHECK(compile_err("this.arr[1.5]").message == "an index must be an int or a string, not number");
  CHECK(eval_err("this.arr[this.f]", kEvent).find("index must be an int or a string, not number") != std::string::npos);
  CHECK(eval_err("this.arr[this.t]", kEvent).find("index must be an int or a string, not bool") != std::string::npos);
}

TEST_CASE("arithmetic: int64 and double", "[expr]") {
  CHECK(same(eval_ok("1 + 2"), Json(3)));
  CHECK(same(eval_ok("1 + 2.5"), Json(3.5)));
  CHECK(same(eval_ok("10 - 12"), Json(-2)));
  CHECK(same(eval_ok("6 * 7"), Json(42)));
  CHECK(same(eval_ok("0.1 + 0.2"), Json(0.1 + 0.2)));
  CHECK(same(eval_ok("10 / 2"), Json(5)));   // exact: stays an int
  CHECK(same(eval_ok("7 / 2"), Json(3.5)));  // inexact: a double
  CHECK(same(eval_ok("-7 / 2"), Json(-3.5)));
  CHECK(same(eval_ok("7.0 / 2"), Json(3.5)));
  CHECK(same(eval_ok("7 % 3"), Json(1)));
  CHECK(same(eval_ok("-7 % 3"), Json(-1)));  // sign of the dividend
  CHECK(same(eval_ok("7.5 % 2"), Json(1.5)));
  CHECK(same(eval_ok("-this.n", kEvent), Json(-7)));
  CHECK(same(eval_ok("-this.f", kEvent), Json(-2.5)));
  CHECK(same(eval_ok("--3"), Json(3)));
  CHECK(same(eval_ok("2 + 3 * 4"), Json(14)));
  CHECK(same(eval_ok("(2 + 3) * 4"), Json(20)));
  CHECK(same(eval_ok("10 - 4 - 3"), Json(3)));  // left associative
  CHECK(same(eval_ok("2 * 3 % 4"), Json(2)));
  CHECK(same(eval_ok("this.n * this.f", kEvent), Json(17.5)));
}

TEST_CASE("int64 edges: overflow becomes double, never UB", "[expr][edges]") {
  CHECK(same(eval_ok("9223372036854775807"), Json(INT64_MAX)));
  CHECK(same(eval_ok("-9223372036854775808"), Json(INT64_MIN)));
  // A literal beyond int64 is a double.
  CHECK(same(eval_ok("9223372036854775808"), Json(9223372036854775808.0)));
  CHECK(same(eval_ok("this.big + 1", kEvent), Json(9223372036854775808.0)));
  CHECK(same(eval_ok("this.neg - 1", kEvent), Json(-9223372036854775809.0)));
  CHECK(same(eval_ok("this.big * 2", kEvent), Json(18446744073709551614.0)));
  CHECK(same(eval_ok("this.neg * -1", kEvent), Json(9223372036854775808.0)));
  CHECK(same(eval_ok("-this.neg", kEvent), Json(9223372036854775808.0)));
  CHECK(same(eval_ok("this.neg / -1", kEvent), Json(9223372036854775808.0)));
  CHECK(same(eval_ok("this.neg % -1", kEvent), Json(0)));
  CHECK(same(eval_ok("this.big - this.big", kEvent), Json(0)));
  CHECK(same(eval_ok("this.big + this.neg", kEvent), Json(-1)));
  // A JSON unsigned above INT64_MAX counts as a double.
  CHECK(same(eval_ok("this.huge + 0", kEvent), Json(18446744073709551615.0)));
  CHECK(same(eval_ok("this.huge > this.big", kEvent), Json(true)));
  // Comparisons across int and double are exact near 2^63.
  CHECK(same(eval_ok("this.big < 9223372036854775808.0", kEvent), Json(true)));
  CHECK(same(eval_ok("9007199254740993 == 9007199254740992.0"), Json(false)));
  CHECK(same(eval_ok("9007199254740992 == 9007199254740992.0"), Json(true)));
}

TEST_CASE("doubles: huge results and NaN are errors, not JSON nulls", "[expr][edges]") {
  CHECK(eval_err("1e308 * 10").find("not a finite number") != std::string::npos);
  CHECK(eval_err("-1e308 - 1e308").find("not a finite number") != std::string::npos);
  CHECK(eval_err("this.f / 0", kEvent).find("division by zero") != std::string::npos);
  CHECK(eval_err("1 / 0").find("division by zero") != std::string::npos);
  CHECK(eval_err("1.5 / 0.0").find("division by zero") != std::string::npos);
  CHECK(eval_err("5 % 0").find("modulo by zero") != std::string::npos);
  CHECK(eval_err("5.5 % 0.0").find("modulo by zero") != std::string::npos);
  CHECK(compile_err("1e400").message.find("out of range") != std::string::npos);
  CHECK(same(eval_ok("1e-400"), Json(0.0)));  // underflow is zero, not an error
}

TEST_CASE("strings: concatenation, escapes, UTF-8", "[expr][edges]") {
  CHECK(same(eval_ok("'a' + \"b\""), Json("ab")));
  CHECK(same(eval_ok("this.s + ', ' + this.id", kEvent), Json("hello, o1")));
  CHECK(same(eval_ok(R"("q\"uote\\ \n\t\r\b\f\/ \u00e9")"), Json("q\"uote\\ \n\t\r\b\f/ \xC3\xA9")));
  CHECK(same(eval_ok(R"('it\'s')"), Json("it's")));
  CHECK(same(eval_ok(R"("\ud83d\ude00")"), Json("\xF0\x9F\x98\x80")));  // surrogate pair
  CHECK(same(eval_ok(R"("\u0000")"), Json(std::string("\0", 1))));
  CHECK(same(eval_ok("'\xC3\xA9t\xC3\xA9'"), Json("\xC3\xA9t\xC3\xA9")));  // raw UTF-8 inside quotes
  CHECK(compile_err(R"("\q")").message.find("unknown escape") != std::string::npos);
  CHECK(compile_err(R"("\u12")").message.find("four hex digits") != std::string::npos);
  CHECK(compile_err(R"("\ud83d")").message.find("surrogate") != std::string::npos);
  CHECK(compile_err(R"("\ude00")").message.find("surrogate") != std::string::npos);
  CHECK(compile_err(R"("\ud83d\u0041")").message.find("surrogate") != std::string::npos);
  CHECK(compile_err("'unterminated").message.find("unterminated string") != std::string::npos);
  CHECK(compile_err("'bad \xFF byte'").message.find("invalid UTF-8") != std::string::npos);
  CHECK(compile_err("'overlong \xC0\xAF'").message.find("invalid UTF-8") != std::string::npos);
  CHECK(compile_err("'surrogate \xED\xA0\x80'").message.find("invalid UTF-8") != std::string::npos);
  CHECK(compile_err("this.\xC3\xA9").message.find("non-ASCII") != std::string::npos);
  // Arrays and objects join too.
  CHECK(same(eval_ok("[1] + [2, 3]"), Json::parse("[1, 2, 3]")));
  CHECK(eval_ok("{a: 1, b: 1} + {b: 2}") == Json::parse(R"({"a": 1, "b": 2})"));
  std::string e = eval_err("'a' + 1");
  CHECK(e.find("cannot add string and number") != std::string::npos);
  CHECK(e.find("string(x)") != std::string::npos);
  CHECK(eval_err("null + 1").find("cannot add null and number") != std::string::npos);
  CHECK(eval_err("'a' - 'b'").find("cannot subtract string and string") != std::string::npos);
  CHECK(eval_err("[1] * 2").find("cannot multiply array and number") != std::string::npos);
  CHECK(eval_err("-'a'").find("cannot negate string") != std::string::npos);
}

TEST_CASE("comparison", "[expr]") {
  CHECK(same(eval_ok("1 == 1.0"), Json(true)));
  CHECK(same(eval_ok("1 != 2"), Json(true)));
  CHECK(same(eval_ok("'a' == 'a'"), Json(true)));
  CHECK(same(eval_ok("'1' == 1"), Json(false)));  // no coercion
  CHECK(same(eval_ok("null == null"), Json(true)));
  CHECK(same(eval_ok("this.missing == null", kEvent), Json(true)));
  CHECK(same(eval_ok("[1, {a: 2}] == [1.0, {a: 2}]"), Json(true)));
  CHECK(same(eval_ok("{a: 1} != {a: 1, b: 2}"), Json(true)));
  CHECK(same(eval_ok("1 < 2"), Json(true)));
  CHECK(same(eval_ok("2 <= 2"), Json(true)));
  CHECK(same(eval_ok("2.5 > 2"), Json(true)));
  CHECK(same(eval_ok("2 >= 2.5"), Json(false)));
  CHECK(same(eval_ok("'abc' < 'abd'"), Json(true)));
  CHECK(same(eval_ok("'b' > 'abc'"), Json(true)));
  CHECK(same(eval_ok("'' < 'a'"), Json(true)));
  CHECK(eval_err("1 < 'a'").find("cannot compare number with string") != std::string::npos);
  CHECK(eval_err("this.missing > 0", kEvent).find("cannot compare null with number") != std::string::npos);
  CHECK(eval_err("[1] < [2]").find("cannot compare array with array") != std::string::npos);
}

TEST_CASE("logic, ?? and ?:", "[expr]") {
  CHECK(same(eval_ok("true && false"), Json(false)));
  CHECK(same(eval_ok("true || false"), Json(true)));
  CHECK(same(eval_ok("!true"), Json(false)));
  CHECK(same(eval_ok("!null"), Json(true)));  // null counts as false
  CHECK(same(eval_ok("null || true"), Json(true)));
  CHECK(same(eval_ok("this.missing && true", kEvent), Json(false)));
  // Short circuit: the right side is not evaluated.
  CHECK(same(eval_ok("false && (1 / 0 == 1)"), Json(false)));
  CHECK(same(eval_ok("true || (1 / 0 == 1)"), Json(true)));
  CHECK(same(eval_ok("true || false && false"), Json(true)));  // && binds tighter
  CHECK(eval_err("1 && true").find("&& needs bools, got number") != std::string::npos);
  CHECK(eval_err("true && 'x'").find("&& needs bools, got string") != std::string::npos);
  CHECK(eval_err("'x' || true").find("|| needs bools") != std::string::npos);
  CHECK(eval_err("!0").find("! needs a bool, got number") != std::string::npos);
  CHECK(same(eval_ok("this.missing ?? 'd'", kEvent), Json("d")));
  CHECK(same(eval_ok("this.id ?? 'd'", kEvent), Json("o1")));
  CHECK(same(eval_ok("this.no ?? true", kEvent), Json(false)));  // only null falls through
  CHECK(same(eval_ok("null ?? null ?? 3"), Json(3)));
  CHECK(same(eval_ok("this.x ?? 1 + 1", kEvent), Json(2)));
  CHECK(same(eval_ok("1 ?? 1 / 0"), Json(1)));
  CHECK(same(eval_ok("this.t ? 'y' : 'n'", kEvent), Json("y")));
  CHECK(same(eval_ok("this.missing ? 'y' : 'n'", kEvent), Json("n")));
  CHECK(same(eval_ok("false ? 1 : true ? 2 : 3"), Json(2)));  // right associative
  CHECK(same(eval_ok("true ? false ? 1 : 2 : 3"), Json(2)));
  CHECK(same(eval_ok("1 < 2 ? 1 / 1 : 1 / 0"), Json(1)));  // only the taken arm runs
  CHECK(eval_err("'x' ? 1 : 2").find("?: needs a bool condition, got string") != std::string::npos);
}

TEST_CASE("array methods with lambdas", "[expr]") {
  CHECK(same(eval_ok("this.arr.map(x => x * 2)", kEvent), Json::parse("[2, 4, 6]")));
  CHECK(same(eval_ok("this.arr.filter(x => x > 1)", kEvent), Json::parse("[2, 3]")));
  CHECK(same(eval_ok("this.arr.map((x) => x + 1).filter(x => x % 2 == 0)", kEvent), Json::parse("[2, 4]")));
  CHECK(eval_ok("this.items.map(i => {sku: i.sku, qty: int(i.qty), total: int(i.qty) * number(i.price)})", kEvent) ==
        Json::parse(R"([{"sku": "a", "qty": 2, "total": 21.0}, {"sku": "b", "qty": 1, "total": 3}])"));
  CHECK(same(eval_ok("this.items.map(i => int(i.qty) * number(i.price)).sum()", kEvent), Json(24.0)));
  // Nested lambdas see outer parameters and this.
  CHECK(
      same(eval_ok("[1, 2].map(a => [10, 20].map(b => a + b + this.n))", kEvent), Json::parse("[[18, 28], [19, 29]]")));
  // The inner parameter shadows an outer one with the same name.
  CHECK(same(eval_ok("[1].map(x => [5].map(x => x))"), Json::parse("[[5]]")));
  CHECK(same(eval_ok("[].map(x => x)"), Json::array()));
  CHECK(same(eval_ok("this.items.filter(i => i.sku == 'b').map(i => i.sku)", kEvent), Json::parse(R"(["b"])")));
  CHECK(same(eval_ok("[{a: 1}, {a: 2}].filter(x => x.a > 1)"), Json::parse(R"([{"a": 2}])")));
  CHECK(same(eval_ok("[null, true, false].filter(x => x)"), Json::parse("[true]")));
  CHECK(eval_err("this.missing.map(x => x)", kEvent).find("map() needs an array, got null") != std::string::npos);
  CHECK(eval_err("'abc'.filter(x => x)").find("filter() needs an array, got string") != std::string::npos);
  CHECK(eval_err("[1].filter(x => x)").find("filter() needs a bool from its lambda, got number") != std::string::npos);
  CHECK(eval_err("[1, 0].map(x => 1 / x)").find("division by zero") != std::string::npos);
  // Methods are functions with the receiver as first argument.
  CHECK(same(eval_ok("this.arr.len()", kEvent), Json(3)));
  CHECK(same(eval_ok("this.s.upper()", kEvent), Json("HELLO")));
  CHECK(same(eval_ok("this.arr.join('-')", kEvent), Json("1-2-3")));
  CHECK(same(eval_ok("this.arr.first()", kEvent), Json(1)));
  CHECK(same(eval_ok("this.arr.last()", kEvent), Json(3)));
  CHECK(same(eval_ok("this.arr.min()", kEvent), Json(1)));
  CHECK(same(eval_ok("this.arr.max()", kEvent), Json(3)));
  CHECK(same(eval_ok("this.arr.sum()", kEvent), Json(6)));
  CHECK(same(eval_ok("this.arr.map(x => x * 2).last()", kEvent), Json(6)));  // result of a computed receiver
}

TEST_CASE("compile errors carry an offset", "[expr][errors]") {
  auto e = compile_err("this.a +");
  CHECK(e.message.find("expected a value") != std::string::npos);
  CHECK(e.offset == 8);
  e = compile_err("numbr(this.a)");
  CHECK(e.message == "unknown function 'numbr' (did you mean number?)");
  CHECK(e.offset == 0);
  e = compile_err("this.a == foo");
  CHECK(e.message.find("unknown name 'foo'") != std::string::npos);
  CHECK(e.offset == 10);
  CHECK(compile_err("").message == "empty expression");
  CHECK(compile_err("   ").message == "empty expression");
  CHECK(compile_err("this.a = 1").message.find("==") != std::string::npos);
  CHECK(compile_err("a & b").message.find("&&") != std::string::npos);
  CHECK(compile_err("a | b").message.find("||") != std::string::npos);
  CHECK(compile_err("(1 + 2").message.find("expected ')'") != std::string::npos);
  CHECK(compile_err("[1, 2").message.find("expected ',' or ']'") != std::string::npos);
  CHECK(compile_err("{a 1}").message.find("expected ':'") != std::string::npos);
  CHECK(compile_err("{a: 1, a: 2}").message.find("duplicate key") != std::string::npos);
  CHECK(compile_err("{1: 2}").message.find("expected a key") != std::string::npos);
  CHECK(compile_err("1 2").message.find("expected end of expression") != std::string::npos);
  CHECK(compile_err("this.").message.find("expected a name after '.'") != std::string::npos);
  CHECK(compile_err("this.a.nope()").message.find("unknown method 'nope'") != std::string::npos);
  CHECK(compile_err("len()").message.find("len() takes 1 argument, got 0") != std::string::npos);
  CHECK(compile_err("round(1, 2, 3)").message.find("round() takes 1 to 2 arguments, got 3") != std::string::npos);
  CHECK(compile_err("replace('a')").message.find("takes 3 arguments") != std::string::npos);
  CHECK(compile_err("min()").message.find("at least 1") != std::string::npos);
  CHECK(compile_err("now(1)").message.find("now() takes 0 arguments") != std::string::npos);
  CHECK(compile_err("x => x").message.find("lambda") != std::string::npos);
  CHECK(compile_err("this.a.map(1)").message.find("expected a lambda") != std::string::npos);
  CHECK(compile_err("this.a.map(this => 1)").message.find("cannot be a lambda parameter") != std::string::npos);
  CHECK(compile_err("map(this.a, x => x)").message.find("is a method") != std::string::npos);
  CHECK(compile_err("[1].map(x => y)").message.find("unknown name 'y'") != std::string::npos);
  CHECK(compile_err("'a'.lookup(1)").message.find("lookup is a function") != std::string::npos);
  CHECK(compile_err("1.5.3").message.find("expected") != std::string::npos);
  CHECK(compile_err("12abc").message.find("malformed number") != std::string::npos);
  CHECK(compile_err("1e").message.find("exponent") != std::string::npos);
  CHECK(compile_err("this.a[0.5]").message.find("index must be an int or a string") != std::string::npos);
  CHECK(compile_err("#").message.find("unexpected character '#'") != std::string::npos);
  CHECK(compile_err("\x01").message.find("control character") != std::string::npos);
}

TEST_CASE("limits: deep nesting and long input fail cleanly", "[expr][errors]") {
  std::string deep(5000, '(');
  deep += "1";
  deep += std::string(5000, ')');
  CHECK(compile_err(deep).message.find("nested too deeply") != std::string::npos);
  std::string nots(5000, '!');
  CHECK(compile_err(nots + "true").message.find("nested too deeply") != std::string::npos);
  std::string chain = "this.a";  // not constant, so not folded away
  for (int i = 0; i < 3000; ++i) chain += " + 1";
  CHECK(compile_err(chain).message.find("nested too deeply") != std::string::npos);
  std::string lambdas = "[1]";
  for (int i = 0; i < 20; ++i) lambdas = "[1].map(x" + std::to_string(i) + " => " + lambdas + ")";
  CHECK(compile_err(lambdas).message.find("nested too deeply") != std::string::npos);
  CHECK(compile_err(std::string(70000, ' ') + "1").message.find("longer than 64 KiB") != std::string::npos);
  // Within the limits all is well.
  std::string ok = "this.a";
  for (int i = 0; i < 150; ++i) ok += " + 1";
  CHECK(same(eval_ok(ok, Json::parse(R"({"a": 1})")), Json(151)));
  // A long constant chain folds as it is parsed, so it is never deep.
  std::string folded = "1";
  for (int i = 0; i < 3000; ++i) folded += " + 1";
  CHECK(same(eval_ok(folded), Json(3001)));
}

TEST_CASE("constant sub-expressions are folded at compile time", "[expr]") {
  Expression e;
  CompileError ce;
  REQUIRE(Expression::compile("1 + 2 * 3", {}, &e, &ce));
  REQUIRE(e.constant_value() != nullptr);
  CHECK(*e.constant_value() == 7);
  REQUIRE(Expression::compile("upper('a') + string(round(2.567, 2))", {}, &e, &ce));
  REQUIRE(e.constant_value() != nullptr);
  CHECK(*e.constant_value() == "A2.57");
  // Failing constants stay for run time (a flow error per event, as written).
  REQUIRE(Expression::compile("number('abc')", {}, &e, &ce));
  CHECK(e.constant_value() == nullptr);
  // Not folded: non-deterministic functions, this.
  REQUIRE(Expression::compile("uuid()", {}, &e, &ce));
  CHECK(e.constant_value() == nullptr);
  REQUIRE(Expression::compile("this.a + 1", {}, &e, &ce));
  CHECK(e.constant_value() == nullptr);
  CHECK(e.reads_this());
}

TEST_CASE("this_path marks plain paths", "[expr]") {
  Expression e;
  CompileError ce;
  REQUIRE(Expression::compile("this.a.b", {}, &e, &ce));
  REQUIRE(e.this_path() != nullptr);
  CHECK(*e.this_path() == std::vector<std::string>{"a", "b"});
  REQUIRE(Expression::compile("this", {}, &e, &ce));
  REQUIRE(e.this_path() != nullptr);
  CHECK(e.this_path()->empty());
  REQUIRE(Expression::compile("this.a[0]", {}, &e, &ce));
  CHECK(e.this_path() == nullptr);
  REQUIRE(Expression::compile("this.a + 1", {}, &e, &ce));
  CHECK(e.this_path() == nullptr);
}

TEST_CASE("evaluation returns references, not copies, for paths", "[expr]") {
  Expression e;
  CompileError ce;
  REQUIRE(Expression::compile("this.items[1]", {}, &e, &ce));
  EvalContext ctx;
  ctx.self = &kEvent;
  Json scratch;
  const Json* r = e.eval(ctx, scratch);
  REQUIRE(r != nullptr);
  CHECK(r == &kEvent["items"][1]);
  CHECK(scratch.is_null());
}

TEST_CASE("events built in code may hold NaN, infinity or invalid UTF-8: errors, never crashes", "[expr][edges]") {
  Json ev = {{"nan", std::nan("")}, {"inf", HUGE_VAL}, {"bad", std::string("a\xFF\xC3(z")}, {"ok", 1}};
  CHECK(eval_err("this.nan + 1", ev).find("not a finite number") != std::string::npos);
  CHECK(eval_err("this.inf * 2", ev).find("not a finite number") != std::string::npos);
  CHECK(same(eval_ok("this.nan == this.nan", ev), Json(false)));
  CHECK(same(eval_ok("this.inf > 1e308", ev), Json(true)));
  CHECK(eval_err("int(this.nan)", ev).find("out of the int64 range") != std::string::npos);
  CHECK(eval_err("int(this.inf)", ev).find("out of the int64 range") != std::string::npos);
  CHECK(eval_err("round(this.inf, 2) + 1", ev).find("not a finite number") != std::string::npos);
  // Invalid UTF-8 passes through string functions byte by byte and serialises safely.
  CHECK(same(eval_ok("len(this.bad)", ev), Json(5)));  // each invalid byte counts as one
  CHECK(eval_ok("split(this.bad, '')", ev).size() == 5);
  CHECK(eval_ok("upper(this.bad)", ev).get<std::string>() == "A\xFF\xC3(Z");
  CHECK(eval_ok("this.bad + '!'", ev).get<std::string>().size() == 6);
  CHECK(eval_ok("string(this)", ev).get<std::string>().find("\xEF\xBF\xBD") != std::string::npos);  // U+FFFD
  CHECK(eval_ok("hash(this)", ev).get<std::string>().size() == 64);
  CHECK(eval_err("number(this.bad)", ev).find("to a number") != std::string::npos);
}

TEST_CASE("an expression cannot allocate or loop without bound on one event (evaluation budget)", "[expr][budget]") {
  // 2,000 elements copied 2,000 times is 4M values: within the budget; 4,000 x 4,000 is not.
  Json small = {{"xs", Json::array()}};
  for (int i = 0; i < 2000; ++i) small["xs"].push_back(i);
  CHECK(eval_ok("this.xs.map(i => this.xs).len()", small) == 2000);
  Json big = {{"xs", Json::array()}};
  for (int i = 0; i < 4000; ++i) big["xs"].push_back(i);
  CHECK(eval_err("this.xs.map(i => this.xs).len()", big).find("evaluation budget exceeded") != std::string::npos);
  // A string that would grow past 16 MiB is refused while it grows.
  Json text = {{"s", std::string(1 << 20, 'a')}};
  CHECK(eval_err("replace(this.s, 'a', '" + std::string(64, 'b') + "')", text).find("over the limit") !=
        std::string::npos);
  Json parts = {{"xs", big["xs"]}, {"s", std::string(8192, 'x')}};
  CHECK(eval_err("this.xs.map(i => this.s).join('')", parts).find("over the limit") != std::string::npos);
}

TEST_CASE("a copy costs the budget its whole size, at every depth (no amplification through nesting)",
          "[expr][budget]") {
  Json xs = Json::array();
  for (int i = 0; i < 5000; ++i) xs.push_back(i);
  const Json ev = {{"xs", xs}};
  // Each element copies all 5,000 elements one level down: 25M values. Before copies were
  // charged, only the wrapper's one member counted, and n = 20,000 took 3 GB.
  for (const char* e : {"this.xs.map(i => {a: this.xs}).len()", "this.xs.map(i => [this.xs]).len()",
                        "this.xs.map(i => {a: {b: this.xs}}).len()"}) {
    INFO(e);
    CHECK(eval_err(e, ev).find("evaluation budget exceeded") != std::string::npos);
  }
  // A value deep inside a small one: {"o": {"a": {"b": [5,000]}}} copied per element.
  const Json nested = {{"xs", xs}, {"o", {{"a", {{"b", xs}}}}}};
  for (const char* e : {"this.xs.map(i => this.o).len()", "this.xs.map(i => values(this.o)).len()",
                        "this.xs.map(i => first(values(this.o))).len()"}) {
    INFO(e);
    CHECK(eval_err(e, nested).find("evaluation budget exceeded") != std::string::npos);
  }
  // filter() copies the elements it keeps: 10 arrays of 200 per element of xs (10M values).
  Json ys = Json::array();
  for (int i = 0; i < 10; ++i) ys.push_back(Json(std::vector<int>(200, i)));
  const Json kept = {{"xs", xs}, {"ys", ys}};
  CHECK(eval_err("this.xs.map(i => this.ys.filter(y => true)).len()", kept).find("evaluation budget exceeded") !=
        std::string::npos);

  // Ordinary expressions, and copies that fit, still evaluate.
  CHECK(eval_ok("{a: this.xs}.a.len()", ev) == 5000);
  CHECK(eval_ok("this.xs.map(i => {v: i, w: [i, i]}).len()", ev) == 5000);
  CHECK(eval_ok("this.xs.filter(i => i % 2 == 0).len()", ev) == 2500);
  CHECK(eval_ok("this.ys.filter(y => true).len()", kept) == 10);
  CHECK(eval_ok("this.xs.map(i => this.o).len()", Json{{"xs", {1, 2, 3}}, {"o", {{"a", {{"b", xs}}}}}}) == 3);
  CHECK(eval_ok("{id: this.id, total: this.n * 2, tags: [this.t, 'x']}", Json{{"id", "a"}, {"n", 2}, {"t", "y"}}) ==
        Json{{"id", "a"}, {"total", 4}, {"tags", {"y", "x"}}});
}

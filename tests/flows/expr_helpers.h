// Helpers for expression tests: compile + evaluate in one call.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "flows/expr.h"
#include "flows/tables.h"
#include "flows/value.h"

namespace weir::flows::testing {

inline Json eval_ok(const std::string& text, const Json& self = Json::object(), const TableSet* tables = nullptr) {
  Expression e;
  CompileError ce;
  CompileScope scope;
  scope.tables = tables;
  INFO("expression: " << text);
  bool compiled = Expression::compile(text, scope, &e, &ce);
  INFO("compile error: " << ce.message << " at " << ce.offset);
  REQUIRE(compiled);
  Json out;
  std::string err;
  bool ok = e.evaluate(self, tables, &out, &err);
  INFO("eval error: " << err);
  REQUIRE(ok);
  return out;
}

// Compiles fine but fails to evaluate; returns the message.
inline std::string eval_err(const std::string& text, const Json& self = Json::object(),
                            const TableSet* tables = nullptr) {
  Expression e;
  CompileError ce;
  CompileScope scope;
  scope.tables = tables;
  INFO("expression: " << text);
  bool compiled = Expression::compile(text, scope, &e, &ce);
  INFO("compile error: " << ce.message);
  REQUIRE(compiled);
  Json out;
  std::string err;
  bool ok = e.evaluate(self, tables, &out, &err);
  INFO("unexpected result: " << out.dump());
  REQUIRE_FALSE(ok);
  REQUIRE_FALSE(err.empty());
  return err;
}

inline CompileError compile_err(const std::string& text, const TableSet* tables = nullptr) {
  Expression e;
  CompileError ce;
  CompileScope scope;
  scope.tables = tables;
  INFO("expression: " << text);
  REQUIRE_FALSE(Expression::compile(text, scope, &e, &ce));
  REQUIRE_FALSE(ce.message.empty());
  return ce;
}

// Same type and value: 1 and 1.0 differ here (unlike ==); a JSON unsigned and an
// int64 of the same value are both ints.
inline bool same(const Json& a, const Json& b) {
  int64_t x, y;
  if (get_int(a, &x) && get_int(b, &y)) return x == y;
  if (a.is_number_float() != b.is_number_float()) return false;
  if (a.is_number_float())
    return a.get<double>() == b.get<double>() && std::signbit(a.get<double>()) == std::signbit(b.get<double>());
  return a.type() == b.type() && a == b;
}

}  // namespace weir::flows::testing

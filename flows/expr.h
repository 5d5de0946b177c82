// The expression language of flow files (docs/flow-language.md).
//
// An expression is compiled once, at flow load, into a flat AST (docs/adr/0010):
// names and functions are resolved, lambdas get variable slots, constant
// sub-expressions are folded. Evaluation walks that AST over nlohmann::json values
// and hands back a pointer to its result instead of a copy: a path such as
// `this.items` evaluates to a pointer into the event, a constant to a pointer into the
// AST, and only computed values are written to the caller's scratch value.
//
// A compiled Expression is immutable and may be evaluated from any number of threads
// at once; each evaluation uses its own EvalContext. Evaluation never throws for data
// reasons: it returns nullptr and leaves the message in EvalContext::error.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace weir::flows {

using Json = nlohmann::json;

class TableSet;
class LiveTable;
struct TableSnapshot;

inline constexpr int kMaxLambdaDepth = 16;       // nested lambdas in one expression
inline constexpr int kMaxExpressionDepth = 200;  // AST depth (guards the C++ stack)
inline constexpr size_t kMaxExpressionBytes = 64 * 1024;

struct CompileError {
  size_t offset = 0;  // byte offset in the expression text
  std::string message;
};

// What an expression may refer to besides `this`.
struct CompileScope {
  // The flow's tables. A bare name as lookup()'s first argument must be one of them.
  // When null, bare table names are accepted and resolved at run time.
  const TableSet* tables = nullptr;
};

// The evaluation budget of one event (no event can make the process loop or run out of memory):
// every node evaluated costs one unit, and a computed value costs its size (array and
// object members, string bytes / 16); a value copied into another (by an array or object
// literal, a lambda's answer, a function's result) costs that at every depth, so
// `xs.map(i => this.xs)`, `xs.map(i => {a: this.xs})`, `split(s, '')` or a `replace`
// that multiplies a string end in a clear error instead of eating memory.
inline constexpr int64_t kEvalBudget = 8'000'000;
// The largest string an expression may build (a `+` or a function result).
inline constexpr size_t kMaxStringBytes = 16u << 20;

struct EvalContext {
  const Json* self = nullptr;  // `this`
  // `meta`: the request metadata stored beside the event (docs/adr/0312-request-metadata.md),
  // as the compact JSON text of the Weir-Meta header. Parsed at the first read of `meta`
  // into meta_value, so an event whose flow never reads it pays nothing. Empty, or not an
  // object: `meta` is {"headers": {}, "query": {}}.
  std::string_view meta_text;
  const Json* meta = nullptr;  // set by the first read (or by the caller)
  Json meta_value;
  int64_t budget = kEvalBudget;                     // units left for this event (see kEvalBudget)
  const TableSet* tables = nullptr;                 // for lookup(); null: no tables
  std::array<const Json*, kMaxLambdaDepth> vars{};  // lambda parameters, by slot
  // Live tables' snapshots this event has read (flows/tables.h): one per table, taken at
  // its first lookup and held until the event is done, so that the rows looked up stay
  // valid and every lookup of the event sees the same version of the table.
  std::vector<std::pair<const LiveTable*, std::shared_ptr<const TableSnapshot>>> pinned;
  std::string error;  // set when eval returns nullptr
};

class Expression {
 public:
  Expression();
  ~Expression();
  Expression(Expression&&) noexcept;
  Expression& operator=(Expression&&) noexcept;
  Expression(const Expression&) = delete;
  Expression& operator=(const Expression&) = delete;

  // Compiles `text`. On failure returns false and fills `error`.
  static bool compile(std::string_view text, const CompileScope& scope, Expression* out, CompileError* error);
  // An expression that is a constant (a number, boolean or null written in YAML).
  static Expression constant(Json value, std::string text);

  bool valid() const { return impl_ != nullptr; }
  const std::string& text() const;
  // The value when the expression is constant after folding, else nullptr.
  const Json* constant_value() const;
  // When the expression is a plain path from `this` with member names only
  // (`this.a.b`), its names (`this` alone: empty); else nullptr.
  const std::vector<std::string>* this_path() const;
  // True when the expression (or a sub-expression) reads `this`.
  bool reads_this() const;
  // True when the expression (or a sub-expression) reads `meta`.
  bool reads_meta() const;

  // Evaluates with `ctx.self` as `this`. The result points into *ctx.self, into a
  // table, into this expression's constants or into `scratch`; it stays valid while
  // those do. nullptr on an error (message in ctx.error).
  const Json* eval(EvalContext& ctx, Json& scratch) const;

  // Convenience for tests and tools: evaluates and copies the result.
  // `meta`: the request metadata as JSON text (EvalContext::meta_text).
  bool evaluate(const Json& self, const TableSet* tables, Json* out, std::string* error,
                std::string_view meta = {}) const;

  struct Impl;

 private:
  std::unique_ptr<const Impl> impl_;
};

// Names of every built-in function (for docs and tests).
std::vector<std::string> builtin_function_names();

}  // namespace weir::flows

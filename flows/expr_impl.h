// Private to flows/: the compiled form of an expression (a flat AST) and the table of
// built-in functions. See expr.h for the contract and docs/adr/0010 for the design.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flows/expr.h"

namespace weir::flows {

class Table;

enum class Op : uint8_t {
  kConst,  // aux: index into consts
  kThis,
  kMeta,   // the request metadata (EvalContext::meta_text)
  kVar,    // slot: lambda slot
  kPath,   // kid 0: base; aux: index into paths (static member names / indexes)
  kIndex,  // kid 0: base, kid 1: index (computed)
  kNeg,
  kNot,
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMod,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kAnd,
  kOr,
  kCoalesce,
  kCond,    // kids: condition, then, else
  kArray,   // kids: elements
  kObject,  // kids: values; aux: index of the first key in keys
  kCall,    // fn: builtin index; kids: arguments
  kMap,     // kid 0: receiver, kid 1: body; slot: the lambda's variable
  kFilter,  // same
  kLookup,  // kids: [name expr,] key expr; aux: index into tables or kDynamicTable
};

inline constexpr uint32_t kDynamicTable = 0xFFFFFFFF;

struct Node {
  Op op = Op::kConst;
  uint8_t slot = 0;
  uint16_t fn = 0;
  uint32_t first = 0;  // first child in Impl::kids
  uint32_t count = 0;  // number of children
  uint32_t aux = 0;
  uint32_t pos = 0, end = 0;  // source span, for error messages
};

struct PathSeg {
  std::string key;    // member name when !is_index
  int64_t index = 0;  // array index when is_index (negative counts from the end)
  bool is_index = false;
};

struct Expression::Impl {
  std::string text;
  std::vector<Node> nodes;
  std::vector<uint32_t> kids;
  std::vector<Json> consts;
  std::vector<std::vector<PathSeg>> paths;
  std::vector<std::string> keys;
  std::vector<const Table*> tables;
  std::vector<std::string> table_names;  // parallel to tables (for messages)
  uint32_t root = 0;
  bool has_this_path = false;
  std::vector<std::string> this_path;
  bool reads_this = false;
  bool reads_meta = false;

  uint32_t kid(const Node& n, uint32_t i) const { return kids[n.first + i]; }
  const Json* eval(uint32_t index, EvalContext& ctx, Json& tmp) const;
  const Json* fail(const Node& n, EvalContext& ctx, std::string message) const;
  const Json* charge(const Node& n, EvalContext& ctx, const Json* v) const;
  const Json* over_budget(const Node& n, EvalContext& ctx) const;
};

// Built-in functions. Arguments are never null pointers; a function writes a computed
// result to `out` and returns &out, or returns a pointer to one of its arguments (or
// into one), or returns nullptr with `err` set.
using BuiltinFn = const Json* (*)(const Json* const* args, int argc, Json& out, std::string& err);

struct Builtin {
  std::string_view name;
  int min_args;
  int max_args;  // -1: any number
  bool pure;     // false for now() and uuid(): never folded at compile time
  BuiltinFn fn;
};

// Index of a builtin by name, or -1.
int find_builtin(std::string_view name);
const Builtin& builtin(int index);

// Arithmetic and comparison shared by operators and functions (sum, min, max).
// Each returns false with `err` set on a type error or a non-finite result.
bool arith(Op op, const Json& a, const Json& b, Json& out, std::string& err);
// <0, 0, >0 for numbers or for strings; false with `err` on other types.
bool compare(const Json& a, const Json& b, int* result, std::string& err);

}  // namespace weir::flows

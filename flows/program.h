// Private to flows/: the compiled steps of a flow and how they run.
//
// A Program is built once by the loader and then only read: `run` is const and keeps
// its per-event state on the stack, so any number of threads may run one Program.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "flows/expr.h"
#include "flows/flow.h"
#include "flows/tables.h"

namespace weir::flows {

// A dotted target path of `set:`, `map:` or `lookup.as` ("customer.tier").
struct FieldPath {
  std::vector<std::string> names;
  std::string text;
};

struct Step;

struct Arm {
  Expression when;  // !valid(): the default arm
  std::vector<Step> steps;
  std::string to;                 // "" : continue after the branch
  std::vector<std::string> also;  // `to: [a, b, c]`: to = a, also = b, c (a fan-out)
};

struct Step {
  enum class Kind { kLookup, kSet, kMap, kMapExpr, kFilter, kBranch };
  Kind kind = Kind::kSet;
  int index = 0;     // top-level step index (nested steps: their top-level step)
  std::string path;  // "branch arm 0 > set" : where in the file, for errors
  // lookup
  const Table* table = nullptr;
  Expression key;
  FieldPath as;
  Json default_value;
  bool has_default = false;
  // set, map
  struct Field {
    FieldPath path;
    Expression value;
    // map only: a plain `this.a.b` whose value may be moved out of the old event
    // because no other field reads it.
    bool movable = false;
  };
  std::vector<Field> fields;
  // filter, map given as one expression
  Expression expr;
  // branch
  std::vector<Arm> arms;
};

class Program {
 public:
  TableSet tables;
  std::vector<Step> steps;
  std::string only_sink;  // the sink for events that leave without a route

  // Runs the steps. Fills `out`; never throws for data reasons. `meta`: the event's request
  // metadata as JSON text (EvalContext::meta_text).
  void run(Json event, Outcome* out, std::string_view meta = {}) const;
};

// Writes `value` at `path` in `root`, creating objects on the way. False with `err`
// when something on the way is not an object (or null).
bool assign_path(Json& root, const std::vector<std::string>& path, Json value, std::string& err);

// Gives the loader access to Flow's private members.
struct FlowBuilder {
  // `text`: the file's bytes, hashed on the first Flow::content_hash().
  static void fill(Flow& f, std::string name, std::string text, std::string file, SourceSpec source,
                   std::vector<SinkSpec> sinks, OnError on_error, Json tests, std::unique_ptr<Program> program);
  static void set_secret_variables(Flow& f, std::vector<SecretVariable> secrets) {
    f.secret_variables_ = std::move(secrets);
  }
};

}  // namespace weir::flows

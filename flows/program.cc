#include "flows/program.h"

#include "flows/value.h"

namespace weir::flows {

namespace {

enum class Next { kContinue, kRouted, kDropped, kError };

struct RunState {
  EvalContext ctx;
  const Arm* route = nullptr;  // Next::kRouted: the arm whose `to` the event takes
  const Step* failed = nullptr;
  std::string expression;
  std::string message;
};

Next fail(RunState& st, const Step& step, const Expression& e, std::string message) {
  st.failed = &step;
  st.expression = e.text();
  st.message = std::move(message);
  return Next::kError;
}

// Evaluates `e` against `event` and returns an owned value: moved out of `scratch` when
// the result was computed, copied when it points into the event, a table or constants.
bool eval_owned(const Expression& e, const Json& event, RunState& st, Json* out) {
  st.ctx.self = &event;
  Json scratch;
  const Json* v = e.eval(st.ctx, scratch);
  if (v == nullptr) return false;
  if (v == &scratch) *out = std::move(scratch);
  else *out = *v;
  return true;
}

// Condition of filter/when: bool, or null as false.
bool eval_condition(const Expression& e, const Json& event, RunState& st, bool* out, std::string* err) {
  st.ctx.self = &event;
  Json scratch;
  const Json* v = e.eval(st.ctx, scratch);
  if (v == nullptr) {
    *err = st.ctx.error;
    return false;
  }
  if (v->is_boolean()) {
    *out = v->get<bool>();
    return true;
  }
  if (v->is_null()) {
    *out = false;
    return true;
  }
  *err = std::string("condition must be a bool (or null), got ") + type_name(*v) + " " + brief(*v, 40);
  return false;
}

Json* find_path(Json& root, const std::vector<std::string>& path) {
  Json* cur = &root;
  for (const auto& name : path) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(name);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

Next run_steps(const std::vector<Step>& steps, Json& event, RunState& st) {
  for (const Step& step : steps) {
    switch (step.kind) {
      case Step::Kind::kLookup: {
        st.ctx.self = &event;
        Json scratch;
        const Json* key = step.key.eval(st.ctx, scratch);
        if (key == nullptr) return fail(st, step, step.key, st.ctx.error);
        const Json* row = nullptr;
        if (key->is_string() || key->is_number()) {
          row = step.table->find(*key, st.ctx);
        } else if (!key->is_null()) {
          return fail(st, step, step.key,
                      std::string("lookup key must be a string or a number, got ") + type_name(*key));
        }
        Json value = row ? *row : step.has_default ? step.default_value : Json();
        std::string err;
        if (!assign_path(event, step.as.names, std::move(value), err)) return fail(st, step, step.key, err);
        break;
      }
      case Step::Kind::kSet: {
        for (const auto& f : step.fields) {
          Json v;
          if (!eval_owned(f.value, event, st, &v)) return fail(st, step, f.value, st.ctx.error);
          std::string err;
          if (!assign_path(event, f.path.names, std::move(v), err)) {
            return fail(st, step, f.value, "cannot set " + f.path.text + ": " + err);
          }
        }
        break;
      }
      case Step::Kind::kMap: {
        Json out = Json::object();
        // Computed fields first, while the old event is intact ...
        for (const auto& f : step.fields) {
          if (f.movable) continue;
          Json v;
          if (!eval_owned(f.value, event, st, &v)) return fail(st, step, f.value, st.ctx.error);
          std::string err;
          if (!assign_path(out, f.path.names, std::move(v), err)) {
            return fail(st, step, f.value, "cannot set " + f.path.text + ": " + err);
          }
        }
        // ... then plain paths, moved out of the old event instead of copied.
        for (const auto& f : step.fields) {
          if (!f.movable) continue;
          Json* src = find_path(event, *f.value.this_path());
          Json v = src ? std::move(*src) : Json();
          std::string err;
          if (!assign_path(out, f.path.names, std::move(v), err)) {
            return fail(st, step, f.value, "cannot set " + f.path.text + ": " + err);
          }
        }
        event = std::move(out);
        break;
      }
      case Step::Kind::kMapExpr: {
        Json v;
        if (!eval_owned(step.expr, event, st, &v)) return fail(st, step, step.expr, st.ctx.error);
        event = std::move(v);
        break;
      }
      case Step::Kind::kFilter: {
        bool keep;
        std::string err;
        if (!eval_condition(step.expr, event, st, &keep, &err)) return fail(st, step, step.expr, err);
        if (!keep) return Next::kDropped;
        break;
      }
      case Step::Kind::kBranch: {
        for (const Arm& arm : step.arms) {
          if (arm.when.valid()) {
            bool match;
            std::string err;
            if (!eval_condition(arm.when, event, st, &match, &err)) return fail(st, step, arm.when, err);
            if (!match) continue;
          }
          Next r = run_steps(arm.steps, event, st);
          if (r != Next::kContinue) return r;
          if (!arm.to.empty()) {
            st.route = &arm;
            return Next::kRouted;
          }
          break;  // first matching arm wins
        }
        break;
      }
    }
  }
  return Next::kContinue;
}

}  // namespace

bool assign_path(Json& root, const std::vector<std::string>& path, Json value, std::string& err) {
  if (path.empty()) {
    root = std::move(value);
    return true;
  }
  Json* cur = &root;
  for (size_t i = 0; i < path.size(); ++i) {
    if (cur->is_null()) *cur = Json::object();
    if (!cur->is_object()) {
      std::string where = "the event";
      if (i > 0) {
        where.clear();
        for (size_t k = 0; k < i; ++k) where += (k ? "." : "") + path[k];
      }
      err = where + " is " + (cur->is_array() ? "an array" : std::string("a ") + type_name(*cur)) + ", not an object";
      return false;
    }
    auto& obj = cur->get_ref<Json::object_t&>();
    if (i + 1 == path.size()) {
      obj[path[i]] = std::move(value);
      return true;
    }
    cur = &obj[path[i]];
  }
  return true;
}

void Program::run(Json event, Outcome* out, std::string_view meta) const {
  RunState st;
  st.ctx.tables = &tables;
  st.ctx.meta_text = meta;
  Next r = run_steps(steps, event, st);
  switch (r) {
    case Next::kContinue:
      out->kind = Outcome::Kind::kEmit;
      out->sink = only_sink;
      out->event = std::move(event);
      return;
    case Next::kRouted:
      out->kind = Outcome::Kind::kEmit;
      out->sink = st.route->to;
      out->also = st.route->also;
      out->event = std::move(event);
      return;
    case Next::kDropped: out->kind = Outcome::Kind::kDropped; return;
    case Next::kError:
      out->kind = Outcome::Kind::kError;
      out->error.step = st.failed->index;
      out->error.step_path = st.failed->path;
      out->error.expression = st.expression;
      out->error.message = std::move(st.message);
      out->event = std::move(event);
      return;
  }
}

}  // namespace weir::flows

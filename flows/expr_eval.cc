// The interpreter: walks the flat AST over JSON values, returning pointers to results
// so that paths, constants and table rows are never copied.
#include <cmath>

#include "flows/expr_impl.h"
#include "flows/json_limits.h"
#include "flows/tables.h"
#include "flows/value.h"

namespace weir::flows {

namespace {

const Json kNull;

// `meta` of an event (EvalContext::meta_text), parsed once per event at its first read.
// The runtime wrote the text (the Weir-Meta header, docs/adr/0312-request-metadata.md); one
// that does not parse as an object (none, or an older or foreign writer) reads as empty.
const Json* event_meta(EvalContext& ctx) {
  if (ctx.meta != nullptr) return ctx.meta;
  // Depth-bounded (json_limits.h): the header may come from a foreign publisher.
  constexpr int kMetaDepth = 4;  // meta, query, a repeated name's array, its values
  std::optional<Json> parsed;
  if (!ctx.meta_text.empty()) parsed = parse_json(ctx.meta_text, kMetaDepth, nullptr);
  if (parsed && parsed->is_object()) {
    ctx.meta_value = std::move(*parsed);
  } else {
    ctx.meta_value = Json::object();
  }
  for (const char* k : {"headers", "query"}) {
    if (!ctx.meta_value[k].is_object()) ctx.meta_value[k] = Json::object();
  }
  ctx.meta = &ctx.meta_value;
  return ctx.meta;
}
const Json kTrue(true);
const Json kFalse(false);

// Conditions accept booleans and null (null is false); anything else is a type error.
bool truth(const Json& v, bool* out) {
  if (v.is_boolean()) {
    *out = v.get<bool>();
    return true;
  }
  if (v.is_null()) {
    *out = false;
    return true;
  }
  return false;
}

// Moves a result into a container slot when it was computed into `local`, copies it
// otherwise (it then lives in the event, a table or the constants).
// (Not a ?: — its common type would be `const Json`, a copy in both arms.)
Json take(const Json* v, Json& local) {
  if (v == &local) return std::move(local);
  return *v;
}

const Json* member(const Json* base, const std::string& key) {
  if (!base->is_object()) return &kNull;
  auto it = base->find(key);
  return it == base->end() ? &kNull : &*it;
}

const Json* element(const Json* base, int64_t i) {
  if (!base->is_array()) return &kNull;
  auto n = static_cast<int64_t>(base->size());
  if (i < 0) i += n;
  if (i < 0 || i >= n) return &kNull;
  return &(*base)[static_cast<size_t>(i)];
}

bool checked_finite(double d, Json& out, std::string& err) {
  if (!std::isfinite(d)) {
    err = "result is not a finite number";
    return false;
  }
  out = d;
  return true;
}

}  // namespace

bool arith(Op op, const Json& a, const Json& b, Json& out, std::string& err) {
  int64_t x, y;
  if (get_int(a, &x) && get_int(b, &y)) {
    int64_t r;
    switch (op) {
      case Op::kAdd:
        if (!__builtin_add_overflow(x, y, &r)) return out = r, true;
        return checked_finite(static_cast<double>(x) + static_cast<double>(y), out, err);
      case Op::kSub:
        if (!__builtin_sub_overflow(x, y, &r)) return out = r, true;
        return checked_finite(static_cast<double>(x) - static_cast<double>(y), out, err);
      case Op::kMul:
        if (!__builtin_mul_overflow(x, y, &r)) return out = r, true;
        return checked_finite(static_cast<double>(x) * static_cast<double>(y), out, err);
      case Op::kDiv:
        if (y == 0) {
          err = "division by zero";
          return false;
        }
        if (x == INT64_MIN && y == -1) return checked_finite(-static_cast<double>(x), out, err);
        if (x % y == 0) return out = x / y, true;
        return checked_finite(static_cast<double>(x) / static_cast<double>(y), out, err);
      case Op::kMod:
        if (y == 0) {
          err = "modulo by zero";
          return false;
        }
        if (y == -1) return out = int64_t{0}, true;  // INT64_MIN % -1 is UB in C++
        return out = x % y, true;
      default: break;
    }
  } else if (a.is_number() && b.is_number()) {
    double p = get_double(a), q = get_double(b);
    switch (op) {
      case Op::kAdd: return checked_finite(p + q, out, err);
      case Op::kSub: return checked_finite(p - q, out, err);
      case Op::kMul: return checked_finite(p * q, out, err);
      case Op::kDiv:
        if (q == 0) {
          err = "division by zero";
          return false;
        }
        return checked_finite(p / q, out, err);
      case Op::kMod:
        if (q == 0) {
          err = "modulo by zero";
          return false;
        }
        return checked_finite(std::fmod(p, q), out, err);
      default: break;
    }
  } else if (op == Op::kAdd && a.is_string() && b.is_string()) {
    const auto& s = a.get_ref<const std::string&>();
    const auto& t = b.get_ref<const std::string&>();
    std::string r;
    r.reserve(s.size() + t.size());
    r += s;
    r += t;
    out = std::move(r);
    return true;
  } else if (op == Op::kAdd && a.is_array() && b.is_array()) {
    Json r = a;
    for (const auto& v : b) r.push_back(v);
    out = std::move(r);
    return true;
  } else if (op == Op::kAdd && a.is_object() && b.is_object()) {
    Json r = a;
    for (auto it = b.begin(); it != b.end(); ++it) r[it.key()] = it.value();
    out = std::move(r);
    return true;
  }
  const char* verb = op == Op::kAdd   ? "add"
                     : op == Op::kSub ? "subtract"
                     : op == Op::kMul ? "multiply"
                     : op == Op::kDiv ? "divide"
                                      : "take the remainder of";
  err = std::string("cannot ") + verb + " " + type_name(a) + " and " + type_name(b);
  if (op == Op::kAdd && (a.is_string() || b.is_string())) err += " (convert with string(x) or number(x))";
  return false;
}

bool compare(const Json& a, const Json& b, int* result, std::string& err) {
  int64_t x, y;
  if (get_int(a, &x) && get_int(b, &y)) {
    *result = x < y ? -1 : x > y ? 1 : 0;
    return true;
  }
  if (a.is_number() && b.is_number()) {
    // long double represents every int64 exactly, so int/double mixes compare right.
    auto ld = [](const Json& j) -> long double {
      int64_t i;
      if (get_int(j, &i)) return static_cast<long double>(i);
      if (j.is_number_unsigned()) return static_cast<long double>(j.get<uint64_t>());
      return static_cast<long double>(j.get<double>());
    };
    long double p = ld(a), q = ld(b);
    *result = p < q ? -1 : p > q ? 1 : 0;
    return true;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.get_ref<const std::string&>().compare(b.get_ref<const std::string&>());
    *result = c < 0 ? -1 : c > 0 ? 1 : 0;
    return true;
  }
  err = std::string("cannot compare ") + type_name(a) + " with " + type_name(b);
  return false;
}

const Json* Expression::Impl::fail(const Node& n, EvalContext& ctx, std::string message) const {
  std::string_view part(text);
  part = part.substr(n.pos, n.end > n.pos ? n.end - n.pos : 0);
  if (part.size() > 60) {
    size_t cut = 57;
    while (cut > 0 && (static_cast<unsigned char>(part[cut]) & 0xC0) == 0x80) --cut;
    ctx.error = std::string(part.substr(0, cut)) + "...: " + message;
  } else if (part.empty()) {
    ctx.error = std::move(message);
  } else {
    ctx.error = std::string(part) + ": " + message;
  }
  return nullptr;
}

namespace {
// What keeping `v` itself costs against the budget (see kEvalBudget): its members, not
// theirs. For a value built here, whose members were charged as they were made.
int64_t cost_of(const Json& v) {
  if (v.is_structured()) return static_cast<int64_t>(v.size());
  if (v.is_string()) return static_cast<int64_t>(v.get_ref<const std::string&>().size() / 16);
  return 0;
}

// What a copy of `v` costs: the cost_of every value in it, at any depth (so copying
// `this.xs` into each of n elements costs n times its size, however deep it is). Stops
// counting once past `limit` (the budget left): the copy is refused then anyway. A copy
// walks the whole value, so this walk adds at most as much again, and nothing for scalars.
int64_t deep_cost(const Json& v, int64_t limit) {
  if (!v.is_structured()) return cost_of(v);
  int64_t total = 0;
  std::vector<const Json*> pending{&v};
  while (!pending.empty()) {
    const Json* j = pending.back();
    pending.pop_back();
    total += static_cast<int64_t>(j->size());
    for (const Json& e : *j) {
      if (e.is_structured()) pending.push_back(&e);
      else if (e.is_string()) total += cost_of(e);
    }
    if (total > limit) return total;
  }
  return total;
}

// Charges a copy of `v` to the event's budget; false past it.
bool charge_copy(EvalContext& ctx, const Json& v) {
  if (!v.is_structured() && !v.is_string()) return true;
  ctx.budget -= deep_cost(v, ctx.budget);
  return ctx.budget >= 0;
}
}  // namespace

// Charges `v` (a computed result) to the event's budget; nullptr with the error past it.
const Json* Expression::Impl::charge(const Node& n, EvalContext& ctx, const Json* v) const {
  if (v == nullptr) return nullptr;
  if (v->is_string() && v->get_ref<const std::string&>().size() > kMaxStringBytes) {
    return fail(n, ctx,
                "the result is a string of " + std::to_string(v->get_ref<const std::string&>().size()) +
                    " bytes, over the limit of " + std::to_string(kMaxStringBytes));
  }
  // A function's result may hold copies of its arguments (merge, concat): all of it counts.
  if (!charge_copy(ctx, *v)) return over_budget(n, ctx);
  return v;
}

const Json* Expression::Impl::over_budget(const Node& n, EvalContext& ctx) const {
  return fail(
      n, ctx,
      "evaluation budget exceeded (more than " + std::to_string(kEvalBudget) + " steps and values for one event)");
}

const Json* Expression::Impl::eval(uint32_t index, EvalContext& ctx, Json& tmp) const {
  const Node& n = nodes[index];
  if (--ctx.budget < 0) return over_budget(n, ctx);
  switch (n.op) {
    case Op::kConst: return &consts[n.aux];
    case Op::kThis: return ctx.self;
    case Op::kMeta: return event_meta(ctx);
    case Op::kVar: return ctx.vars[n.slot];
    case Op::kPath: {
      const Json* p = eval(kid(n, 0), ctx, tmp);
      if (p == nullptr) return nullptr;
      for (const PathSeg& s : paths[n.aux]) {
        p = s.is_index ? element(p, s.index) : member(p, s.key);
      }
      return p;
    }
    case Op::kIndex: {
      const Json* base = eval(kid(n, 0), ctx, tmp);
      if (base == nullptr) return nullptr;
      Json local;
      const Json* idx = eval(kid(n, 1), ctx, local);
      if (idx == nullptr) return nullptr;
      if (idx->is_string()) return member(base, idx->get_ref<const std::string&>());
      int64_t i;
      if (get_int(*idx, &i)) return element(base, i);
      if (idx->is_null()) return &kNull;
      return fail(n, ctx, std::string("an index must be an int or a string, not ") + type_name(*idx));
    }
    case Op::kNeg: {
      Json local;
      const Json* v = eval(kid(n, 0), ctx, local);
      if (v == nullptr) return nullptr;
      int64_t i;
      if (get_int(*v, &i)) {
        if (i == INT64_MIN) tmp = -static_cast<double>(i);
        else tmp = -i;
        return &tmp;
      }
      if (v->is_number()) {
        tmp = -get_double(*v);
        return &tmp;
      }
      return fail(n, ctx, std::string("cannot negate ") + type_name(*v));
    }
    case Op::kNot: {
      Json local;
      const Json* v = eval(kid(n, 0), ctx, local);
      if (v == nullptr) return nullptr;
      bool b;
      if (!truth(*v, &b)) return fail(n, ctx, std::string("! needs a bool, got ") + type_name(*v));
      return b ? &kFalse : &kTrue;
    }
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
    case Op::kMod: {
      Json la, lb;
      const Json* a = eval(kid(n, 0), ctx, la);
      if (a == nullptr) return nullptr;
      const Json* b = eval(kid(n, 1), ctx, lb);
      if (b == nullptr) return nullptr;
      std::string err;
      // String concatenation can reuse the left operand's buffer when it is ours.
      if (n.op == Op::kAdd && a == &la && la.is_string() && b->is_string()) {
        if (la.get_ref<const std::string&>().size() + b->get_ref<const std::string&>().size() > kMaxStringBytes) {
          return fail(n, ctx,
                      "the joined string would be over the limit of " + std::to_string(kMaxStringBytes) + " bytes");
        }
        la.get_ref<std::string&>() += b->get_ref<const std::string&>();
        tmp = std::move(la);
        return charge(n, ctx, &tmp);
      }
      if (!arith(n.op, *a, *b, tmp, err)) return fail(n, ctx, std::move(err));
      return charge(n, ctx, &tmp);
    }
    case Op::kEq:
    case Op::kNe: {
      Json la, lb;
      const Json* a = eval(kid(n, 0), ctx, la);
      if (a == nullptr) return nullptr;
      const Json* b = eval(kid(n, 1), ctx, lb);
      if (b == nullptr) return nullptr;
      bool eq = values_equal(*a, *b);
      return (eq == (n.op == Op::kEq)) ? &kTrue : &kFalse;
    }
    case Op::kLt:
    case Op::kLe:
    case Op::kGt:
    case Op::kGe: {
      Json la, lb;
      const Json* a = eval(kid(n, 0), ctx, la);
      if (a == nullptr) return nullptr;
      const Json* b = eval(kid(n, 1), ctx, lb);
      if (b == nullptr) return nullptr;
      int c;
      std::string err;
      if (!compare(*a, *b, &c, err)) return fail(n, ctx, std::move(err));
      bool r = n.op == Op::kLt ? c < 0 : n.op == Op::kLe ? c <= 0 : n.op == Op::kGt ? c > 0 : c >= 0;
      return r ? &kTrue : &kFalse;
    }
    case Op::kAnd:
    case Op::kOr: {
      Json local;
      const Json* a = eval(kid(n, 0), ctx, local);
      if (a == nullptr) return nullptr;
      bool x;
      const char* name = n.op == Op::kAnd ? "&&" : "||";
      if (!truth(*a, &x)) return fail(n, ctx, std::string(name) + " needs bools, got " + type_name(*a));
      if (n.op == Op::kAnd && !x) return &kFalse;
      if (n.op == Op::kOr && x) return &kTrue;
      Json local2;
      const Json* b = eval(kid(n, 1), ctx, local2);
      if (b == nullptr) return nullptr;
      bool y;
      if (!truth(*b, &y)) return fail(n, ctx, std::string(name) + " needs bools, got " + type_name(*b));
      return y ? &kTrue : &kFalse;
    }
    case Op::kCoalesce: {
      const Json* a = eval(kid(n, 0), ctx, tmp);
      if (a == nullptr || !a->is_null()) return a;
      return eval(kid(n, 1), ctx, tmp);
    }
    case Op::kCond: {
      Json local;
      const Json* c = eval(kid(n, 0), ctx, local);
      if (c == nullptr) return nullptr;
      bool b;
      if (!truth(*c, &b)) return fail(n, ctx, std::string("?: needs a bool condition, got ") + type_name(*c));
      return eval(kid(n, b ? 1 : 2), ctx, tmp);
    }
    case Op::kArray: {
      Json arr = Json::array();
      arr.get_ref<Json::array_t&>().reserve(n.count);
      for (uint32_t k = 0; k < n.count; ++k) {
        Json local;
        const Json* v = eval(kid(n, k), ctx, local);
        if (v == nullptr) return nullptr;
        if (v != &local && !charge_copy(ctx, *v)) return over_budget(n, ctx);
        arr.get_ref<Json::array_t&>().push_back(take(v, local));
      }
      tmp = std::move(arr);
      return &tmp;
    }
    case Op::kObject: {
      Json obj = Json::object();
      auto& o = obj.get_ref<Json::object_t&>();
      for (uint32_t k = 0; k < n.count; ++k) {
        Json local;
        const Json* v = eval(kid(n, k), ctx, local);
        if (v == nullptr) return nullptr;
        if (v != &local && !charge_copy(ctx, *v)) return over_budget(n, ctx);
        o.emplace(keys[n.aux + k], take(v, local));
      }
      tmp = std::move(obj);
      return &tmp;
    }
    case Op::kCall: {
      constexpr uint32_t kInline = 4;
      Json locals[kInline];
      const Json* argv_inline[kInline];
      std::vector<Json> more_locals;
      std::vector<const Json*> more_argv;
      Json* loc = locals;
      const Json** argv = argv_inline;
      if (n.count > kInline) {
        more_locals.resize(n.count);
        more_argv.resize(n.count);
        loc = more_locals.data();
        argv = more_argv.data();
      }
      bool computed = false;
      for (uint32_t k = 0; k < n.count; ++k) {
        argv[k] = eval(kid(n, k), ctx, loc[k]);
        if (argv[k] == nullptr) return nullptr;
        computed = computed || argv[k] == &loc[k];
      }
      std::string err;
      const Json* r = builtin(n.fn).fn(argv, static_cast<int>(n.count), tmp, err);
      if (r == nullptr) return fail(n, ctx, std::move(err));
      if (r == &tmp && charge(n, ctx, r) == nullptr) return nullptr;
      // A function may answer with (a part of) an argument; if that argument was
      // computed here it dies with this frame, so keep a copy.
      if (computed && r != &tmp) {
        if (!charge_copy(ctx, *r)) return over_budget(n, ctx);
        Json copy = *r;
        tmp = std::move(copy);
        return &tmp;
      }
      return r;
    }
    case Op::kMap:
    case Op::kFilter: {
      Json local;
      const Json* recv = eval(kid(n, 0), ctx, local);
      if (recv == nullptr) return nullptr;
      const char* name = n.op == Op::kMap ? "map" : "filter";
      if (!recv->is_array()) {
        return fail(n, ctx, std::string(name) + "() needs an array, got " + type_name(*recv));
      }
      const Json* saved = ctx.vars[n.slot];
      Json out = Json::array();
      auto& arr = out.get_ref<Json::array_t&>();
      arr.reserve(recv->size());
      bool owned = recv == &local;
      uint32_t body = kid(n, 1);
      for (const Json& e : recv->get_ref<const Json::array_t&>()) {
        ctx.vars[n.slot] = &e;
        Json r;
        const Json* v = eval(body, ctx, r);
        if (v == nullptr) {
          ctx.vars[n.slot] = saved;
          return nullptr;
        }
        if (n.op == Op::kMap) {
          // What the lambda built here was charged as it was made (its members) and costs
          // its own size; what it answered from elsewhere (`this.xs`) is copied whole.
          if (v == &r) ctx.budget -= cost_of(*v);
          else if (!charge_copy(ctx, *v)) ctx.budget = -1;
          if (ctx.budget < 0) {
            ctx.vars[n.slot] = saved;
            return over_budget(n, ctx);
          }
          arr.push_back(take(v, r));
          continue;
        }
        bool keep;
        if (!truth(*v, &keep)) {
          ctx.vars[n.slot] = saved;
          return fail(n, ctx, std::string("filter() needs a bool from its lambda, got ") + type_name(*v));
        }
        // Elements of an array we computed ourselves can be moved out.
        if (keep && owned) {
          arr.push_back(std::move(const_cast<Json&>(e)));
        } else if (keep) {
          if (!charge_copy(ctx, e)) {
            ctx.vars[n.slot] = saved;
            return over_budget(n, ctx);
          }
          arr.push_back(e);
        }
      }
      ctx.vars[n.slot] = saved;
      tmp = std::move(out);
      return &tmp;
    }
    case Op::kLookup: {
      const Table* table = nullptr;
      uint32_t key_kid = 0;
      if (n.aux == kDynamicTable) {
        Json local;
        const Json* name = eval(kid(n, 0), ctx, local);
        if (name == nullptr) return nullptr;
        if (!name->is_string()) {
          return fail(n, ctx, std::string("lookup() needs a table name (a string), got ") + type_name(*name));
        }
        table = ctx.tables ? ctx.tables->find(name->get_ref<const std::string&>()) : nullptr;
        if (table == nullptr) return fail(n, ctx, "no table named \"" + name->get<std::string>() + "\"");
        key_kid = 1;
      } else {
        table = tables[n.aux];
      }
      Json local;
      const Json* key = eval(kid(n, key_kid), ctx, local);
      if (key == nullptr) return nullptr;
      if (key->is_null()) return &kNull;
      if (!key->is_string() && !key->is_number()) {
        return fail(n, ctx, std::string("lookup() key must be a string or a number, got ") + type_name(*key));
      }
      const Json* row = table->find(*key, ctx);
      return row ? row : &kNull;
    }
  }
  return fail(n, ctx, "internal error: unknown node");
}

}  // namespace weir::flows

#include "flows/flow.h"

#include <algorithm>

#include <mutex>

#include "flows/program.h"
#include "flows/text.h"

namespace weir::flows {

std::string Diagnostic::str() const {
  std::string s = where.file.empty() ? std::string("<input>") : where.file;
  if (where.line > 0) {
    s += ":" + std::to_string(where.line);
    if (where.column > 0) s += ":" + std::to_string(where.column);
  }
  return s + ": " + message;
}

bool Outcome::goes_to(std::string_view name) const {
  if (kind != Kind::kEmit) return false;
  if (sink == name) return true;
  return std::find(also.begin(), also.end(), name) != also.end();
}

std::string FlowError::str() const {
  std::string s = "flow " + flow + " v" + std::to_string(version) + " step " + std::to_string(step);
  if (!step_path.empty()) s += " (" + step_path + ")";
  if (!expression.empty()) {
    std::string e = expression;
    for (auto& c : e) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    s += " expression \"" + e + "\"";
  }
  s += ": " + message;
  for (auto& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

// The file's bytes until the first content_hash() call, then its digest.
struct Flow::ContentHash {
  std::once_flag once;
  std::string text;
  std::string hex;
};

const std::string& Flow::content_hash() const {
  static const std::string kNone;
  if (!hash_) return kNone;
  std::call_once(hash_->once, [h = hash_.get()] {
    h->hex = sha256_hex(h->text);
    std::string().swap(h->text);
  });
  return hash_->hex;
}

Flow::Flow() = default;
Flow::~Flow() = default;
Flow::Flow(Flow&&) noexcept = default;
Flow& Flow::operator=(Flow&&) noexcept = default;

const std::string& Flow::pass_through_sink() const {
  static const std::string kNone;
  return program_ && program_->steps.empty() ? program_->only_sink : kNone;
}

Outcome Flow::run(Json event, std::string_view meta) const {
  Outcome out;
  try {
    if (!program_) {
      out.kind = Outcome::Kind::kError;
      out.error.message = "flow has no program (not loaded)";
    } else {
      program_->run(std::move(event), &out, meta);
    }
  } catch (const std::exception& e) {
    // Nothing in the interpreter should throw; if something does (allocation failure,
    // a bug) the event is dead-lettered rather than the process brought down.
    out = Outcome{};
    out.kind = Outcome::Kind::kError;
    out.error.message = std::string("internal error: ") + e.what();
  } catch (...) {
    out = Outcome{};
    out.kind = Outcome::Kind::kError;
    out.error.message = "internal error";
  }
  if (out.kind == Outcome::Kind::kError) {
    out.error.flow = name_;
    out.error.version = version_;
  }
  return out;
}

void FlowBuilder::fill(Flow& f, std::string name, std::string text, std::string file, SourceSpec source,
                       std::vector<SinkSpec> sinks, OnError on_error, Json tests, std::unique_ptr<Program> program) {
  f.name_ = std::move(name);
  f.hash_ = std::make_unique<Flow::ContentHash>();
  f.hash_->text = std::move(text);
  f.file_ = std::move(file);
  f.source_ = std::move(source);
  f.sinks_ = std::move(sinks);
  f.on_error_ = on_error;
  f.tests_ = std::move(tests);
  f.program_ = std::move(program);
}

std::vector<Diagnostic> unset_secret_variables(
    const Flow& flow, const std::function<std::optional<std::string>(const std::string&)>& env) {
  std::vector<Diagnostic> out;
  for (const SecretVariable& s : flow.secret_variables()) {
    std::optional<std::string> v = env(s.variable);
    if (v && (s.empty_allowed || !v->empty())) continue;
    out.push_back(Diagnostic{
        s.where, "environment variable " + s.variable + " (" + s.setting + ") is " + (v ? "empty" : "not set")});
  }
  return out;
}

EventExpression::EventExpression(std::string text, std::shared_ptr<const Expression> compiled)
    : text_(std::move(text)), compiled_(std::move(compiled)) {}

// eval_string and eval_key each read the value inside the scope of their EvalContext: the
// value may point into the request metadata the context parsed (`meta`), so a shared helper
// returning the pointer would hand out a dangling one.
bool EventExpression::eval_string(const Json& event, std::string* out, std::string* error,
                                  std::string_view meta) const {
  EvalContext ctx;
  ctx.self = &event;
  ctx.meta_text = meta;
  Json scratch;
  const Json* v = compiled_->eval(ctx, scratch);
  if (v == nullptr) {
    *error = "failed: " + ctx.error;
    return false;
  }
  if (!v->is_string()) {
    *error = "gave " + std::string(v->type_name()) + ", not a string";
    return false;
  }
  *out = v->get<std::string>();
  return true;
}

bool EventExpression::eval_key(const Json& event, std::string* out, std::string* error, std::string_view meta) const {
  EvalContext ctx;
  ctx.self = &event;
  ctx.meta_text = meta;
  Json scratch;
  const Json* v = compiled_->eval(ctx, scratch);
  if (v == nullptr) {
    *error = "failed: " + ctx.error;
    return false;
  }
  *out = v->is_string() ? v->get<std::string>() : v->dump();
  return true;
}

}  // namespace weir::flows

#include "runtime/control/flow_set.h"

#include <map>
#include <variant>

namespace weir {
namespace {

// The second flow of a name or an http path: why it cannot run, or "".
std::string duplicate(const flows::Flow& f, std::map<std::string, std::string>& names,
                      std::map<std::string, std::string>& paths) {
  if (auto [it, fresh] = names.emplace(f.name(), f.file()); !fresh) {
    return f.file() + ": flow: the name " + f.name() + " is used by " + it->second + " too\n";
  }
  if (const auto* h = std::get_if<flows::HttpSourceSpec>(&f.source())) {
    if (auto [it, fresh] = paths.emplace(h->path, f.file()); !fresh) {
      return f.file() + ": from.http.path: " + h->path_shown + " is used by " + it->second + " too\n";
    }
  }
  return {};
}

// A chained flow `f` against the flow `g` it reads from.
std::string chain_errors(const flows::Flow& f, const flows::FlowSourceSpec& c, const flows::Flow& g) {
  const std::string ref = c.flow + "." + c.sink;
  std::string errors;
  bool found = false;
  for (const auto& s : g.sinks()) {
    if (s.name != c.sink) continue;
    found = true;
    if (!std::holds_alternative<flows::FlowSinkSpec>(s.kind)) {
      errors += f.file() + ": from.flow: " + ref + " is not a flow sink (write `" + c.sink + ": { flow: {} }` in " +
                g.file() + ")\n";
    }
  }
  if (!found) errors += f.file() + ": from.flow: flow " + c.flow + " has no sink " + c.sink + "\n";
  return errors;
}

}  // namespace

Status check_flow_set(const FlowList& flows, FlowList* kept) {
  std::string errors;
  std::map<std::string, std::string> names, paths;
  FlowList out;
  for (const auto& f : flows) {
    std::string why = duplicate(*f, names, paths);
    errors += why;
    if (why.empty()) out.push_back(f);
  }
  // Chains: the referenced flow (when loaded here) must have that sink as a `flow` sink,
  // and only one flow may read it (its queue is a work queue).
  std::map<std::string, std::string> readers;
  for (const auto& f : out) {
    const auto* c = std::get_if<flows::FlowSourceSpec>(&f->source());
    if (!c) continue;
    const std::string ref = c->flow + "." + c->sink;
    if (auto [it, fresh] = readers.emplace(ref, f->file()); !fresh) {
      errors += f->file() + ": from.flow: " + ref + " is read by " + it->second + " already\n";
    }
    for (const auto& g : out) {
      if (g->name() == c->flow) errors += chain_errors(*f, *c, *g);
    }
  }
  if (kept) *kept = std::move(out);
  if (errors.empty()) return Status::ok();
  errors.pop_back();
  return Status::invalid(errors);
}

Status check_new_flow(const flows::Flow& flow, const FlowList& running) {
  const auto* mine = std::get_if<flows::HttpSourceSpec>(&flow.source());
  for (const auto& f : running) {
    const auto* theirs = std::get_if<flows::HttpSourceSpec>(&f->source());
    if (mine && theirs && mine->path == theirs->path) {
      return Status::conflict("from.http.path: " + mine->path + " is used by flow " + f->name());
    }
  }
  const auto* c = std::get_if<flows::FlowSourceSpec>(&flow.source());
  if (!c) return Status::ok();
  const flows::Flow* from = nullptr;
  for (const auto& f : running) {
    if (f->name() == c->flow) from = f.get();
    const auto* other = std::get_if<flows::FlowSourceSpec>(&f->source());
    if (other && other->flow == c->flow && other->sink == c->sink) {
      return Status::conflict("from.flow: " + c->flow + "." + c->sink + " is read by flow " + f->name() +
                              " already (a flow sink feeds one flow)");
    }
  }
  bool has_sink = false;
  if (from) {
    for (const auto& spec : from->sinks()) {
      has_sink = has_sink || (spec.name == c->sink && std::holds_alternative<flows::FlowSinkSpec>(spec.kind));
    }
  }
  if (!has_sink) {
    return Status::invalid("from.flow: " + c->flow + "." + c->sink + " is not a running flow's `flow: {}` sink");
  }
  return Status::ok();
}

}  // namespace weir

#include "flows/testing.h"

#include "flows/request_meta.h"
#include "flows/value.h"

namespace weir::flows {

namespace {

Diagnostic at(const std::string& file, const SrcNode& n, std::string message) {
  return Diagnostic{Location{file, n.line, n.column}, std::move(message)};
}

}  // namespace

namespace {

// A case's `meta:` (the request metadata the flow reads as `meta`, ADR 0312): method and
// path as text, query and headers as mappings.
void check_case_meta(const SrcNode& meta, const std::string& file, const std::string& what,
                     std::vector<Diagnostic>* d) {
  if (!meta.is_map()) {
    d->push_back(
        at(file, meta, what + " must be a mapping of method, path, query and headers, got " + meta.describe()));
    return;
  }
  for (size_t i = 0; i < meta.keys.size(); ++i) {
    const std::string& k = meta.keys[i].text;
    const SrcNode& v = meta.items[i];
    if (k == "method" || k == "path") {
      if (!v.is_scalar()) d->push_back(at(file, v, what + "." + k + " must be text, got " + v.describe()));
    } else if (k == "query" || k == "headers") {
      if (!v.is_map()) d->push_back(at(file, v, what + "." + k + " must be a mapping, got " + v.describe()));
    } else {
      d->push_back(at(file, meta.keys[i],
                      "unknown key \"" + k + "\" in " + what + "; expected one of: method, path, query, headers"));
    }
  }
}

}  // namespace

std::vector<Diagnostic> check_test_cases(const SrcNode& list, const std::string& file,
                                         const std::vector<std::string>& sinks, bool cases_file) {
  std::vector<Diagnostic> d;
  if (!list.is_seq()) {
    d.push_back(at(file, list, "tests must be a list of cases, got " + list.describe()));
    return d;
  }
  for (size_t i = 0; i < list.items.size(); ++i) {
    const SrcNode& c = list.items[i];
    const std::string what = "tests[" + std::to_string(i) + "]";
    if (!c.is_map()) {
      d.push_back(at(file, c, what + " must be a mapping with name, input and expect"));
      continue;
    }
    for (const auto& k : c.keys) {
      bool known = k.text == "name" || k.text == "input" || k.text == "expect" || k.text == "meta" ||
                   (cases_file && k.text == "flow");
      if (!known) {
        d.push_back(at(file, k,
                       "unknown key \"" + k.text + "\" in " + what + "; expected one of: name, input, meta, expect" +
                           (cases_file ? ", flow" : "")));
      }
    }
    if (const SrcNode* meta = c.get("meta")) check_case_meta(*meta, file, what + ".meta", &d);
    if (const SrcNode* name = c.get("name"); name && !name->is_scalar()) {
      d.push_back(at(file, *name, what + ".name must be a string"));
    }
    if (const SrcNode* flow = c.get("flow"); flow && !flow->is_scalar()) {
      d.push_back(at(file, *flow, what + ".flow must be a flow name"));
    }
    if (!c.get("input")) d.push_back(at(file, c, what + " needs `input`"));
    const SrcNode* expect = c.get("expect");
    if (!expect) {
      d.push_back(at(file, c, what + " needs `expect` (dropped, error, or sink: [events])"));
      continue;
    }
    if (expect->is_scalar()) {
      if (expect->text != "dropped" && expect->text != "error") {
        d.push_back(
            at(file, *expect,
               what + ".expect must be dropped, error or a mapping of sink: [events], got \"" + expect->text + "\""));
      }
      continue;
    }
    if (!expect->is_map()) {
      d.push_back(at(file, *expect, what + ".expect must be dropped, error or a mapping of sink: [events]"));
      continue;
    }
    for (size_t k = 0; k < expect->keys.size(); ++k) {
      const SrcNode& key = expect->keys[k];
      const SrcNode& events = expect->items[k];
      if (!sinks.empty()) {
        bool found = false;
        for (const auto& s : sinks) found = found || s == key.text;
        if (!found) {
          std::string names;
          for (const auto& s : sinks) names += (names.empty() ? "" : ", ") + s;
          d.push_back(at(file, key, what + ".expect: unknown sink \"" + key.text + "\" (sinks: " + names + ")"));
        }
      }
      if (events.is_seq()) {
        if (events.items.size() > 1) {
          d.push_back(at(file, events,
                         what + ".expect." + key.text +
                             ": a flow sends at most one event per input to a sink, this lists " +
                             std::to_string(events.items.size())));
        }
      } else if (!events.is_map()) {
        d.push_back(at(file, events, what + ".expect." + key.text + " must be a list of expected events"));
      }
    }
  }
  return d;
}

bool subset_match(const Json& expected, const Json& actual, std::string* where) {
  if (expected.is_object()) {
    if (!actual.is_object()) {
      *where = "expected an object, got " + brief(actual);
      return false;
    }
    for (auto it = expected.begin(); it != expected.end(); ++it) {
      auto found = actual.find(it.key());
      if (found == actual.end()) {
        *where = "." + it.key() + ": missing (expected " + brief(it.value()) + ")";
        return false;
      }
      std::string inner;
      if (!subset_match(it.value(), *found, &inner)) {
        *where = "." + it.key() + (inner.rfind('.', 0) == 0 || inner.rfind('[', 0) == 0 ? "" : ": ") + inner;
        return false;
      }
    }
    return true;
  }
  if (expected.is_array()) {
    if (!actual.is_array() || actual.size() != expected.size()) {
      *where = "expected " + brief(expected) + ", got " + brief(actual);
      return false;
    }
    for (size_t i = 0; i < expected.size(); ++i) {
      std::string inner;
      if (!subset_match(expected[i], actual[i], &inner)) {
        *where = "[" + std::to_string(i) + "]" + (inner.rfind('.', 0) == 0 || inner.rfind('[', 0) == 0 ? "" : ": ") +
                 inner;
        return false;
      }
    }
    return true;
  }
  if (!values_equal(expected, actual)) {
    *where = "expected " + brief(expected) + ", got " + brief(actual);
    return false;
  }
  return true;
}

namespace {

// A case's `meta:` as the Weir-Meta text http-in would store: header names lower case, as
// flows read them (ADR 0312). "" when the case has none.
std::string case_meta(const Json& test_case) {
  auto m = test_case.find("meta");
  if (m == test_case.end() || !m->is_object()) return "";
  Json meta = *m;
  if (auto h = meta.find("headers"); h != meta.end() && h->is_object()) {
    Json lower = Json::object();
    for (auto it = h->begin(); it != h->end(); ++it) lower[lower_header_name(it.key())] = it.value();
    *h = std::move(lower);
  }
  return meta.dump();
}

}  // namespace

CaseResult run_test_case(const Flow& flow, const Json& test_case, size_t index) {
  CaseResult r;
  r.name = "case " + std::to_string(index + 1);
  if (test_case.is_object()) {
    auto n = test_case.find("name");
    if (n != test_case.end() && n->is_string()) r.name = n->get<std::string>();
    else if (n != test_case.end() && !n->is_null()) r.name = dump_safe(*n);
  }
  if (!test_case.is_object() || !test_case.contains("input") || !test_case.contains("expect")) {
    r.detail = "a case needs input and expect";
    return r;
  }
  const Json& expect = test_case["expect"];
  Outcome out = flow.run(test_case["input"], case_meta(test_case));
  auto describe = [&]() -> std::string {
    switch (out.kind) {
      case Outcome::Kind::kEmit: {
        std::string to = out.sink;
        for (const auto& s : out.also) to += ", " + s;
        return "emitted to " + to + ": " + brief(out.event, 200);
      }
      case Outcome::Kind::kDropped: return "dropped";
      case Outcome::Kind::kError: return "error: " + out.error.str();
    }
    return "?";
  };
  if (expect.is_string()) {
    const auto& e = expect.get_ref<const std::string&>();
    bool ok = (e == "dropped" && out.kind == Outcome::Kind::kDropped) ||
              (e == "error" && out.kind == Outcome::Kind::kError);
    r.passed = ok;
    if (!ok) r.detail = "expected " + e + ", got " + describe();
    return r;
  }
  if (!expect.is_object()) {
    r.detail = "expect must be dropped, error or a mapping of sink: [events]";
    return r;
  }
  // Each sink the case names: an empty list means nothing may arrive there; an event (or a
  // list of one) must arrive there and match. A fan-out's output is the same event at each
  // of its sinks; sinks the case does not name are not checked.
  for (auto it = expect.begin(); it != expect.end(); ++it) {
    const Json& v = it.value();
    const Json* want_event = v.is_object() ? &v : (v.is_array() && !v.empty()) ? &v[0] : nullptr;
    if (want_event == nullptr) {
      if (v.is_array() && out.goes_to(it.key())) {
        r.detail = "expected nothing at " + it.key() + ", got " + describe();
        return r;
      }
      continue;
    }
    if (!out.goes_to(it.key())) {
      r.detail = "expected an event at " + it.key() + ", got " + describe();
      return r;
    }
    std::string where;
    if (!subset_match(*want_event, out.event, &where)) {
      r.detail = "event at " + it.key() + " differs at " + where + "; got " + brief(out.event, 200);
      return r;
    }
  }
  r.passed = true;
  return r;
}

}  // namespace weir::flows

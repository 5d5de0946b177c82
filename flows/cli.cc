#include "flows/cli.h"

#include <fstream>
#include <sstream>

#include "flows/flow.h"
#include "flows/source_tree.h"
#include "flows/testing.h"
#include "flows/text.h"

namespace weir::flows {

int validate_command(const std::vector<std::string>& files, std::ostream& out, std::ostream& err) {
  if (files.empty()) {
    err << "usage: weir validate FILE...\n";
    return 2;
  }
  bool all_ok = true;
  for (const auto& file : files) {
    LoadResult r = load_flow_file(file);
    if (r.flow) {
      out << "ok " << file << " (flow " << r.flow->name() << ")\n";
      continue;
    }
    all_ok = false;
    for (const auto& d : r.diagnostics) err << d.str() << "\n";
  }
  return all_ok ? 0 : 2;
}

namespace {

// Reads a --cases file into a JSON list of cases. False after printing its problems.
bool load_cases(const std::string& path, Json* cases, std::ostream& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    out << path << ": cannot read the cases file\n";
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  SourceDoc doc = parse_source(text, path);
  std::vector<Diagnostic> diags = doc.diagnostics;
  if (doc.has_root) {
    substitute_tree(&doc.root, process_env(), path, &diags);
    const SrcNode* list = &doc.root;
    if (doc.root.is_map()) {
      list = doc.root.get("tests");
      if (list == nullptr || doc.root.keys.size() != 1) {
        diags.push_back({{path, doc.root.line, doc.root.column},
                         "a cases file is a list of cases or a mapping with only `tests:`"});
        list = nullptr;
      }
    }
    if (list) {
      auto found = check_test_cases(*list, path, {}, true);
      diags.insert(diags.end(), found.begin(), found.end());
      std::string err;
      const SrcNode* where = nullptr;
      if (diags.empty() && !to_plain_json(*list, cases, &err, &where)) {
        diags.push_back({{path, where->line, where->column}, err});
      }
    }
  }
  for (const auto& d : diags) out << d.str() << "\n";
  return diags.empty();
}

}  // namespace

int test_command(const std::vector<std::string>& files, const std::string& cases_file, std::ostream& out) {
  if (files.empty()) {
    out << "usage: weir test FILE... [--cases FILE]\n";
    return 2;
  }
  Json shared_cases;
  bool load_failed = false;
  if (!cases_file.empty() && !load_cases(cases_file, &shared_cases, out)) return 2;
  int passed = 0, failed = 0;
  for (const auto& file : files) {
    LoadResult r = load_flow_file(file);
    if (!r.flow) {
      load_failed = true;
      for (const auto& d : r.diagnostics) out << d.str() << "\n";
      continue;
    }
    const Flow& flow = *r.flow;
    out << flow.name() << " (" << file << ")\n";
    Json cases = Json::array();
    if (cases_file.empty()) {
      cases = flow.tests();
    } else {
      for (const auto& c : shared_cases) {
        auto f = c.find("flow");
        if (f == c.end() || (f->is_string() && f->get<std::string>() == flow.name())) cases.push_back(c);
      }
    }
    if (cases.empty()) out << "  (no test cases)\n";
    size_t index = 0;
    for (const auto& c : cases) {
      CaseResult cr = run_test_case(flow, c, index++);
      if (cr.passed) {
        ++passed;
        out << "  PASS " << cr.name << "\n";
      } else {
        ++failed;
        out << "  FAIL " << cr.name << ": " << cr.detail << "\n";
      }
    }
  }
  out << passed << " passed, " << failed << " failed\n";
  if (load_failed) return 2;
  return failed > 0 ? 1 : 0;
}

}  // namespace weir::flows

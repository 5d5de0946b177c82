#include "flows/cli.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "flows/flow.h"
#include "flows/source_tree.h"
#include "flows/testing.h"
#include "flows/text.h"

namespace weir::flows {

namespace {

// The flow files `weir validate` / `weir test` read: a file as given; a directory's
// *.yaml, *.yml and *.json in name order (the files `weir run --flows DIR` loads).
// false after printing why a path cannot be read.
bool expand_paths(const std::vector<std::string>& paths, std::vector<std::string>* files, std::ostream& err) {
  namespace fs = std::filesystem;
  bool ok = true;
  for (const auto& p : paths) {
    std::error_code ec;
    if (!fs::is_directory(p, ec)) {
      files->push_back(p);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(p, ec)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file(ec) && (ext == ".yaml" || ext == ".yml" || ext == ".json")) {
        found.push_back(e.path().string());
      }
    }
    if (ec) {
      err << p << ": cannot read the directory: " << ec.message() << "\n";
      ok = false;
      continue;
    }
    if (found.empty()) err << p << ": warning: no flow files (*.yaml, *.yml, *.json) in this directory\n";
    std::sort(found.begin(), found.end());
    files->insert(files->end(), found.begin(), found.end());
  }
  return ok;
}

}  // namespace

int validate_command(const std::vector<std::string>& paths, std::ostream& out, std::ostream& err) {
  if (paths.empty()) {
    err << "usage: weir validate FILE|DIR...\n";
    return 2;
  }
  std::vector<std::string> files;
  bool all_ok = expand_paths(paths, &files, err);
  for (const auto& file : files) {
    LoadResult r = load_flow_file(file);
    if (r.flow) {
      out << "ok " << file << " (flow " << r.flow->name() << ")\n";
      // Valid, yet `weir run` would refuse to start it here: say so now.
      for (const auto& d : unset_secret_variables(*r.flow, process_env())) {
        err << d.where.file << ":" << d.where.line << ":" << d.where.column << ": warning: " << d.message
            << " (weir run refuses to start until it is)\n";
      }
      continue;
    }
    all_ok = false;
    for (const auto& d : r.diagnostics) err << d.str() << "\n";
  }
  return all_ok ? 0 : 2;
}

namespace {

// Reads a --cases file into a JSON list of cases, and `*nodes` the same list as written
// (for checks against each flow's sinks). False after printing its problems.
bool load_cases(const std::string& path, Json* cases, SrcNode* nodes, std::ostream& out) {
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
      *nodes = *list;
    }
  }
  for (const auto& d : diags) out << d.str() << "\n";
  return diags.empty();
}

// The cases of a --cases file meant for `flow` (no `flow:`, or its name), checked against
// the flow's sinks: an expectation at a sink the flow does not have is an error, never a
// case that passes because nothing arrives there. False after printing the problems.
bool check_cases_for(const Flow& flow, const SrcNode& list, const std::string& path, std::ostream& out) {
  SrcNode mine = list;
  mine.items.clear();
  for (const auto& c : list.items) {
    const SrcNode* f = c.get("flow");
    if (f == nullptr || (f->is_scalar() && f->text == flow.name())) mine.items.push_back(c);
  }
  std::vector<std::string> sinks;
  for (const auto& s : flow.sinks()) sinks.push_back(s.name);
  auto found = check_test_cases(mine, path, sinks, true);
  for (const auto& d : found) out << d.str() << " (flow " << flow.name() << ")\n";
  return found.empty();
}

}  // namespace

int test_command(const std::vector<std::string>& paths, const std::string& cases_file, std::ostream& out) {
  if (paths.empty()) {
    out << "usage: weir test FILE|DIR... [--cases FILE]\n";
    return 2;
  }
  Json shared_cases;
  SrcNode case_nodes;
  std::vector<std::string> files;
  bool load_failed = !expand_paths(paths, &files, out);
  if (!cases_file.empty() && !load_cases(cases_file, &shared_cases, &case_nodes, out)) return 2;
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
    if (!cases_file.empty() && !check_cases_for(flow, case_nodes, cases_file, out)) {
      load_failed = true;
      continue;
    }
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

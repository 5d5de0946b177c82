// Every series GET /metrics renders from runtime/base/metrics.cc is described in docs/metrics.md
// (an operator reads the meaning there; a gauge added without a line would be a guess).
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "runtime/base/metrics.h"

TEST_CASE("metrics: every rendered series is described in docs/metrics.md", "[metrics]") {
  weir::Metrics m;
  m.stage("f", "ingress");
  m.stage("f", "flow");
  m.stage("f", "sink:out");
  std::istringstream rendered(m.render_prometheus());
  std::set<std::string> names;
  for (std::string line; std::getline(rendered, line);) {
    if (line.rfind("# TYPE ", 0) == 0) names.insert(line.substr(7, line.find(' ', 7) - 7));
  }
  REQUIRE(names.size() > 10);

  std::ifstream in(std::string(WEIR_SOURCE_DIR) + "/docs/metrics.md");
  REQUIRE(in.good());
  std::stringstream doc;
  doc << in.rdbuf();
  for (const std::string& name : names) {
    INFO(name);
    CHECK(doc.str().find("| `" + name + "` |") != std::string::npos);
  }
}

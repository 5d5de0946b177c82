// The Node reference implementations the integration tests check weir against
// (tests/integration/npm/: package.json pins them, package-lock.json is committed).
#pragma once

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "tests/support/harness.h"

namespace weir::itest {

inline const std::string kNpmDir = std::string(WEIR_SOURCE_DIR) + "/tests/integration/npm";

// Every dependency of package.json installed, else `npm ci` from the lock file, as
// scripts/setup.sh does.
inline void ensure_npm_packages() {
  std::ifstream in(kNpmDir + "/package.json");
  REQUIRE(in.good());
  bool all = true;
  for (const auto& [name, version] : json::parse(in).at("dependencies").items()) {
    struct stat st {};
    all = all && ::stat((kNpmDir + "/node_modules/" + name + "/package.json").c_str(), &st) == 0;
  }
  if (all) return;
  weir::testing::TempDir dir;
  auto npm = weir::testing::Process::spawn({"npm", "ci", "--no-audit", "--no-fund", "--prefix", kNpmDir}, {},
                                           dir.file("npm.log"));
  const auto code = npm.wait_exit(std::chrono::minutes(3));
  INFO("npm ci: " << npm.read_log());
  REQUIRE(code == 0);
}

// What `node <script> <arg>` printed (stdout and stderr), without the last newline;
// fails the test unless it exits 0 within 30 s.
inline std::string node_output(const std::string& script, const std::string& arg) {
  ensure_npm_packages();
  weir::testing::TempDir dir;
  auto node = weir::testing::Process::spawn({"node", kNpmDir + "/" + script, arg}, {}, dir.file("node.log"));
  const auto code = node.wait_exit(std::chrono::seconds(30));
  std::string out = node.read_log();
  INFO("node " << script << ": " << out);
  REQUIRE(code == 0);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace weir::itest

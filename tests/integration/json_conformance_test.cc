// JSONTestSuite's parsing corpus through a real weir's
// http-in (json_conformance/README.md): every file a parser must accept (y_) answers 202,
// every file it must reject (n_) 400, the implementation-defined ones (i_) one of 202 /
// 400 / 413, and weir still answers /healthz after all 318 of them.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <iostream>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;

TEST_CASE("JSONTestSuite through http-in: y_ 202, n_ 400, i_ either, never a crash",
          "[integration][ingress][json-conformance]") {
  const std::filesystem::path corpus = WEIR_JSON_CORPUS;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(corpus)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() == 318);  // the suite as copied: a missing file fails here, not silently

  NatsServer nats;
  SinkProcess sink;
  WeirProcess weir({.nats_url = nats.url(), .flows = {{"docs.yaml", http_flow("docs", "/in/docs", sink.url("/out"))}}});
  weir.start();

  std::map<std::string, std::map<int, int>> by_kind;  // "y" / "n" / "i" → status → count
  for (const auto& path : files) {
    const std::string name = path.filename().string();
    const std::string kind = name.substr(0, 1);
    REQUIRE((kind == "y" || kind == "n" || kind == "i"));
    HttpReply r = weir.post("/in/docs", weir::testing::read_file(path.string()), {"Content-Type: application/json"});
    ++by_kind[kind][r.status];
    INFO(name << " answered " << r.status << " " << r.body << r.error);
    if (kind == "y") {
      CHECK((r.status == 202 || r.status == 413));
    } else if (kind == "n") {
      CHECK(r.status == 400);
      if (r.status == 400) CHECK(r.body.find("error") != std::string::npos);
    } else {
      CHECK((r.status == 202 || r.status == 400 || r.status == 413));
    }
  }
  for (const auto& [kind, statuses] : by_kind) {
    std::cout << "JSONTestSuite " << kind << "_:";
    for (auto [status, n] : statuses) std::cout << " HTTP " << status << " x" << n;
    std::cout << "\n";
  }
  CHECK(weir.running());
  CHECK(weir.admin("GET", "/healthz").status == 200);
  // And it still stores: a plain event after the corpus is acknowledged.
  CHECK(weir.post("/in/docs", R"({"id": "after-the-corpus"})", {"Content-Type: application/json"}).status == 202);
}

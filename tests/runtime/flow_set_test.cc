// check_flow_set / check_new_flow (runtime/control/flow_set.h): the cross-flow rules a flows dir
// and a flow joining the running ones must keep — unique names and http paths, chains
// that read a `flow` sink of a flow in the set, one reader per flow sink. Pure: flows
// compiled from text, no NATS.
#include <catch2/catch.hpp>

#include "runtime/control/flow_set.h"

using weir::FlowList;
using weir::Status;

namespace {

std::shared_ptr<const weir::flows::Flow> flow(const std::string& file, const std::string& text) {
  auto r = weir::flows::load_flow_text(text, file);
  for (const auto& d : r.diagnostics) UNSCOPED_INFO(d.str());
  REQUIRE(r.diagnostics.empty());
  return r.flow;
}

std::string http_flow(const std::string& name, const std::string& path) {
  return "flow: " + name + "\nfrom: { http: { path: " + path +
         " } }\nsteps:\n  - branch:\n      - when: this.web\n        to: web\n      - to: out\n"
         "to:\n  out: { flow: {} }\n  web: { http: { url: \"http://127.0.0.1:1/x\" } }\n";
}

std::string chained(const std::string& name, const std::string& ref) {
  return "flow: " + name + "\nfrom: { flow: " + ref + " }\nto:\n  out: { http: { url: \"http://127.0.0.1:1/x\" } }\n";
}

}  // namespace

TEST_CASE("check_flow_set: a consistent set passes and keeps every flow", "[flow_set]") {
  FlowList set = {flow("a.yaml", http_flow("a", "/in/a")), flow("b.yaml", http_flow("b", "/in/b")),
                  flow("c.yaml", chained("c", "a.out"))};
  FlowList kept;
  Status s = weir::check_flow_set(set, &kept);
  CHECK(s.is_ok());
  CHECK(kept.size() == 3);
}

TEST_CASE("check_flow_set: names and http paths are unique, and the second is dropped", "[flow_set]") {
  FlowList set = {flow("a.yaml", http_flow("a", "/in/a")), flow("a2.yaml", http_flow("a", "/in/other")),
                  flow("b.yaml", http_flow("b", "/in/a"))};
  FlowList kept;
  Status s = weir::check_flow_set(set, &kept);
  REQUIRE(s.code() == Status::Code::kInvalid);
  CHECK(s.message() ==
        "a2.yaml: flow: the name a is used by a.yaml too\n"
        "b.yaml: from.http.path: /in/a is used by a.yaml too");
  REQUIRE(kept.size() == 1);
  CHECK(kept[0]->file() == "a.yaml");
}

TEST_CASE("check_flow_set: a chain must read a flow sink of a loaded flow, once", "[flow_set]") {
  SECTION("not a flow sink") {
    Status s = weir::check_flow_set({flow("a.yaml", http_flow("a", "/in/a")), flow("c.yaml", chained("c", "a.web"))});
    CHECK(s.message() == "c.yaml: from.flow: a.web is not a flow sink (write `web: { flow: {} }` in a.yaml)");
  }
  SECTION("no such sink") {
    Status s = weir::check_flow_set({flow("a.yaml", http_flow("a", "/in/a")), flow("c.yaml", chained("c", "a.nope"))});
    CHECK(s.message() == "c.yaml: from.flow: flow a has no sink nope");
  }
  SECTION("two readers") {
    Status s = weir::check_flow_set({flow("a.yaml", http_flow("a", "/in/a")), flow("c.yaml", chained("c", "a.out")),
                                     flow("d.yaml", chained("d", "a.out"))});
    CHECK(s.message() == "d.yaml: from.flow: a.out is read by c.yaml already");
  }
  SECTION("a flow not in the set is not checked here (it may run elsewhere)") {
    CHECK(weir::check_flow_set({flow("c.yaml", chained("c", "elsewhere.out"))}).is_ok());
  }
}

TEST_CASE("check_new_flow: a flow joining the running ones", "[flow_set]") {
  FlowList running = {flow("a.yaml", http_flow("a", "/in/a")), flow("c.yaml", chained("c", "a.out"))};
  CHECK(weir::check_new_flow(*flow("b.yaml", http_flow("b", "/in/b")), running).is_ok());

  Status path = weir::check_new_flow(*flow("b.yaml", http_flow("b", "/in/a")), running);
  CHECK(path.code() == Status::Code::kConflict);
  CHECK(path.message() == "from.http.path: /in/a is used by flow a");

  Status taken = weir::check_new_flow(*flow("d.yaml", chained("d", "a.out")), running);
  CHECK(taken.code() == Status::Code::kConflict);
  CHECK(taken.message() == "from.flow: a.out is read by flow c already (a flow sink feeds one flow)");

  Status not_sink = weir::check_new_flow(*flow("d.yaml", chained("d", "a.web")), running);
  CHECK(not_sink.code() == Status::Code::kInvalid);
  CHECK(not_sink.message() == "from.flow: a.web is not a running flow's `flow: {}` sink");

  Status not_running = weir::check_new_flow(*flow("d.yaml", chained("d", "x.out")), running);
  CHECK(not_running.code() == Status::Code::kInvalid);
}

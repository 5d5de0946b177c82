// validate ⇒ run: every flow file the project ships or tests with that passes
// `weir validate` (flows::validate_command, the CLI's code) is compiled the way `weir run`
// compiles it and built through the real connector factories (connectors/registry), so a
// setting the loader accepts and a connector refuses fails here, not in production. Files
// under tests/flows/data/invalid/ must fail validate *and* the connector they name must
// refuse the same setting where it has its own check (cron, broker schemes).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "connectors/mqtt/mqtt_transport.h"
#include "connectors/registry.h"
#include "connectors/timer/timer_source.h"
#include "flows/cli.h"
#include "flows/cron.h"
#include "flows/flow.h"
#include "flows/schema.h"
#include "runtime/base/config.h"

namespace fs = std::filesystem;
using weir::connectors::BuiltinConnectors;
using weir::connectors::TimerSource;

namespace {

const fs::path kRoot = WEIR_SOURCE_DIR;

std::vector<fs::path> flow_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    auto ext = e.path().extension();
    if (e.is_regular_file() && (ext == ".yaml" || ext == ".yml" || ext == ".json")) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The secrets the shipped flows name by variable (validate checks names; the connectors
// check that the variables are set, as they must be at run time).
void set_test_env() {
  setenv("WEIR_VR_CLIENT_ID", "client", 1);
  setenv("WEIR_VR_CLIENT_SECRET", "secret", 1);
  setenv("WEIR_VR_SECRET", "whsec_dGVzdHNlY3JldA==", 1);
}

// The recipes' secrets (examples/recipes/*.yaml, each sender's page in docs/recipes/): every
// variable a `*_env:` key names (`secrets_env` lists several) gets a Standard Webhooks
// secret, which every scheme and token accepts, unless the environment has it.
void set_recipe_env() {
  const std::regex key(R"(\b[a-z_]*_env:\s*\[?\s*([A-Z][A-Z0-9_]*(\s*,\s*[A-Z][A-Z0-9_]*)*))");
  const std::regex name("[A-Z][A-Z0-9_]*");
  for (const fs::path& file : flow_files(kRoot / "examples/recipes")) {
    std::ifstream in(file);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (std::sregex_iterator it(text.begin(), text.end(), key), end; it != end; ++it) {
      const std::string names = (*it)[1].str();
      for (std::sregex_iterator n(names.begin(), names.end(), name); n != end; ++n) {
        setenv(n->str().c_str(), "whsec_dGVzdHNlY3JldA==", 0);
      }
    }
  }
}

bool validates(const fs::path& file, std::string* diagnostics) {
  std::ostringstream out, err;
  int rc = weir::flows::validate_command({file.string()}, out, err);
  *diagnostics = err.str();
  return rc == 0;
}

// What `weir run` does with a file of the flows dir: compile it as local, then make its
// source (unless it reads another flow, which the runtime wires itself) and every sink
// (except `flow: {}` sinks, which are the runtime's own streams).
void build_like_run(const fs::path& file, BuiltinConnectors& factory, const weir::RuntimeConfig& config) {
  INFO(file.string());
  auto loaded = weir::flows::load_flow_file(file.string());
  REQUIRE(loaded.flow);
  const weir::flows::Flow& flow = *loaded.flow;
  if (!std::holds_alternative<weir::flows::FlowSourceSpec>(flow.source())) {
    auto source = factory.make_source(flow, config);
    INFO((source ? std::string("ok") : source.status().message()));
    CHECK(source.is_ok());
  }
  for (const auto& sink : flow.sinks()) {
    if (std::holds_alternative<weir::flows::FlowSinkSpec>(sink.kind)) continue;
    auto made = factory.make_sink(flow, sink, config);
    INFO("sink " << sink.name << ": " << (made ? std::string("ok") : made.status().message()));
    CHECK(made.is_ok());
  }
}

}  // namespace

TEST_CASE("validate => run: every shipped and test flow that validates builds through the connector factories",
          "[validate-run]") {
  set_test_env();
  set_recipe_env();
  BuiltinConnectors factory;
  weir::RuntimeConfig config;
  const std::set<std::string> expected_invalid = {"three_mistakes.yaml", "three_mistakes.json"};
  const std::set<std::string> tables = {"tiers.json"};  // a lookup table beside the flows, not a flow
  int built = 0;
  for (const fs::path& dir : {kRoot / "examples/flows", kRoot / "examples/recipes", kRoot / "tests/flows/data",
                              kRoot / "tests/flows/data/kinds", kRoot / "bench/flows"}) {
    for (const fs::path& file : flow_files(dir)) {
      if (tables.count(file.filename().string())) continue;
      std::string diagnostics;
      bool ok = validates(file, &diagnostics);
      INFO(file.string() << "\n" << diagnostics);
      if (expected_invalid.count(file.filename().string())) {
        CHECK_FALSE(ok);
        continue;
      }
      REQUIRE(ok);  // a shipped flow that stopped validating is a defect too
      build_like_run(file, factory, config);
      ++built;
    }
  }
  // examples (2), recipes (2), tests/flows/data (2), kinds (the connector matrix), bench (1).
  CHECK(built >= 7 + static_cast<int>(flow_files(kRoot / "tests/flows/data/kinds").size()));
}

TEST_CASE("validate => run: what validate refuses, the connectors refuse too", "[validate-run]") {
  auto files = flow_files(kRoot / "tests/flows/data/invalid");
  REQUIRE(files.size() >= 5);
  for (const fs::path& file : files) {
    std::string diagnostics;
    INFO(file.string());
    CHECK_FALSE(validates(file, &diagnostics));
    CHECK(diagnostics.find(file.string() + ":") != std::string::npos);  // file:line:column
  }
  // The same settings straight at the connectors (their own checks, without the loader).
  weir::flows::TimerSourceSpec feb30;
  feb30.cron = "0 0 30 2 *";
  CHECK_FALSE(TimerSource::create(feb30).is_ok());
  namespace mqtt = weir::connectors::mqtt;
  CHECK_FALSE(mqtt::parse_broker_url("ws://127.0.0.1:9001").is_ok());  // the source's list
  CHECK_FALSE(mqtt::parse_broker_url("tls://127.0.0.1:8883", weir::flows::schema::kMqttSinkSchemes).is_ok());
}

// The @ macros through validate and through the timer the runtime builds: the ticks the
// running source schedules (TimerSource::next_tick_after drives its thread) are the ones
// the macro stands for.
TEST_CASE("validate => run: @hourly ... @yearly validate and schedule the timer's ticks", "[validate-run][timer]") {
  BuiltinConnectors factory;
  weir::RuntimeConfig config;
  // Thursday 2026-01-01 10:17:00 UTC.
  const int64_t t = 1767262620000;
  struct Want {
    const char* macro;
    int64_t next;
  };
  const Want wants[] = {
      {"hourly", 1767265200000},    // 11:00
      {"daily", 1767312000000},     // 2026-01-02 00:00
      {"midnight", 1767312000000},  // the same
      {"weekly", 1767484800000},    // Sunday 2026-01-04 00:00
      {"monthly", 1769904000000},   // 2026-02-01 00:00
      {"yearly", 1798761600000},    // 2027-01-01 00:00
      {"annually", 1798761600000},  // the same
  };
  for (const Want& w : wants) {
    fs::path file = kRoot / "tests/flows/data/kinds" / (std::string("timer_") + w.macro + ".yaml");
    INFO(file.string());
    std::string diagnostics;
    REQUIRE(validates(file, &diagnostics));
    auto loaded = weir::flows::load_flow_file(file.string());
    REQUIRE(loaded.flow);
    auto source = factory.make_source(*loaded.flow, config);
    REQUIRE(source.is_ok());
    auto* timer = dynamic_cast<TimerSource*>(source.value().get());
    REQUIRE(timer != nullptr);
    CHECK(timer->next_tick_after(t) == w.next);
    CHECK(timer->next_tick_after(w.next) > w.next);
  }
  // 29 February: valid, and the next one after 2026 is in 2028.
  auto leap = weir::flows::load_flow_file((kRoot / "tests/flows/data/kinds/timer_leap_day.yaml").string());
  REQUIRE(leap.flow);
  auto source = factory.make_source(*leap.flow, config);
  REQUIRE(source.is_ok());
  CHECK(dynamic_cast<TimerSource*>(source.value().get())->next_tick_after(t) == 1835395200000);  // 2028-02-29
}

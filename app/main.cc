// weir — the command line (docs/operations.md). Parses arguments, loads configuration (the
// edge where exceptions are allowed), and hands over to the runtime, the flows
// library (validate/test) or the admin client (deploy/promote/rollback/status/dlq).
#include <malloc.h>
#include <signal.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#if WEIR_MIMALLOC
#include <mimalloc.h>
#endif
#include <nlohmann/json.hpp>

#include "cluster/runtime_hooks.h"
#include "connectors/registry.h"
#include "flows/cli.h"
#include "flows/flow.h"
#include "flows/text.h"
#include "app/admin_client.h"
#include "runtime/base/config.h"
#include "runtime/runtime.h"

#ifndef WEIR_VERSION
#define WEIR_VERSION "0.1.0"
#endif

namespace {
constexpr const char* kDefaultServer = "http://127.0.0.1:8081";

std::string cell(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return "-";
  return j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
}

// Which allocator serves this process's malloc (docs/adr/0263-mimalloc.md): mimalloc when
// the binary was linked with it and a block from malloc is in its heap (its malloc won the
// symbol lookup); in a sanitizer build the sanitizer's own (it replaces malloc); the C
// library's otherwise.
std::string allocator_name() {
#if defined(__SANITIZE_ADDRESS__)
  return "AddressSanitizer's allocator";
#elif defined(__SANITIZE_THREAD__)
  return "ThreadSanitizer's allocator";
#else
#if WEIR_MIMALLOC
  // calloc: GCC 12 takes a malloc'd block handed on as `const void*` for a read of
  // uninitialised memory (-Wmaybe-uninitialized, an error here).
  void* probe = std::calloc(1, 64);
  const bool ours = mi_is_in_heap_region(probe);
  std::free(probe);
  if (ours) {
    const int v = mi_version();  // 209 for 2.0.9
    return "mimalloc " + std::to_string(v / 100) + "." + std::to_string(v / 10 % 10) + "." + std::to_string(v % 10);
  }
#endif
  return "glibc malloc";
#endif
}

// `weir status`: GET /status twice, `interval` apart, for rates; a table or JSON.
// Sinks' circuits (GET /sinks) as a table: state, health (ADR 0313), since, next probe,
// last error (docs/admin-api.md#sinks).
void print_sinks(const nlohmann::json& sinks) {
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  auto ago = [&](const nlohmann::json& v, bool future) -> std::string {
    if (!v.is_number_integer()) return "-";
    const int64_t d = future ? v.get<int64_t>() - now : now - v.get<int64_t>();
    return (future ? "in " : "") + std::to_string(std::max<int64_t>(d, 0) / 1000) + "s" + (future ? "" : " ago");
  };
  std::printf("%-20s %-16s %-7s %-8s %-12s %-12s %s\n", "FLOW", "SINK", "STATE", "HEALTH", "SINCE", "NEXT PROBE",
              "LAST ERROR");
  for (const auto& s : sinks) {
    const std::string err = s.contains("last_error") && s["last_error"].is_string() ? s["last_error"].get<std::string>()
                                                                                    : "-";
    const std::string probe = s.value("probing", false) ? "on the wire"
                                                        : ago(s.value("next_probe", nlohmann::json()), true);
    std::printf("%-20s %-16s %-7s %-8s %-12s %-12s %s\n", s.value("flow", "").c_str(), s.value("sink", "").c_str(),
                s.value("state", "").c_str(), cell(s, "health").c_str(),
                ago(s.value("since", nlohmann::json()), false).c_str(), probe.c_str(), err.c_str());
  }
}

// Rates between two /status samples: per flow in (received by the flow stage) and out
// (acked) per second, per sink delivered per second.
void add_rates(nlohmann::json& second, const nlohmann::json& first, double secs) {
  if (!second.contains("flows") || !first.contains("flows")) return;
  for (auto& f : second["flows"]) {
    for (const auto& g : first["flows"]) {
      if (g.value("name", "") != f.value("name", "")) continue;
      f["in_per_s"] = (f.value("received", 0.0) - g.value("received", 0.0)) / secs;
      f["out_per_s"] = (f.value("acked", 0.0) - g.value("acked", 0.0)) / secs;
    }
  }
  if (!second.contains("sinks") || !first.contains("sinks")) return;
  for (auto& s : second["sinks"]) {
    for (const auto& t : first["sinks"]) {
      if (t.value("flow", "") != s.value("flow", "") || t.value("sink", "") != s.value("sink", "")) continue;
      s["delivered_per_s"] = (s.value("delivered", 0.0) - t.value("delivered", 0.0)) / secs;
    }
  }
}

std::string rate_cell(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", j[key].get<double>());
  return buf;
}

// A counter of a /status object; 0 when it is absent or not a count (another weir's answer).
uint64_t count_of(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number_unsigned() ? j[key].get<uint64_t>() : 0;
}

// /status "sinks" when it is an array of objects, else an empty array.
nlohmann::json sinks_in(const nlohmann::json& status) {
  nlohmann::json out = nlohmann::json::array();
  if (!status.contains("sinks") || !status["sinks"].is_array()) return out;
  for (const auto& s : status["sinks"]) {
    if (s.is_object()) out.push_back(s);
  }
  return out;
}

// One row per sink (docs/operations.md "weir status"): its health word and circuit,
// delivered per second and in all, lag, errors, dead letters and the last error.
void print_sink_rows(const nlohmann::json& sinks) {
  if (sinks.empty()) return;
  std::printf("%-20s %-16s %-8s %-7s %9s %9s %7s %7s %5s %s\n", "FLOW", "SINK", "HEALTH", "CIRCUIT", "OUT/s",
              "DELIVERED", "LAG", "ERRORS", "DLQ", "LAST ERROR");
  for (const auto& s : sinks) {
    std::printf("%-20s %-16s %-8s %-7s %9s %9s %7s %7s %5s %s\n", cell(s, "flow").c_str(), cell(s, "sink").c_str(),
                cell(s, "health").c_str(), cell(s, "state").c_str(), rate_cell(s, "delivered_per_s").c_str(),
                cell(s, "delivered").c_str(), cell(s, "lag").c_str(), cell(s, "errors").c_str(),
                cell(s, "dead").c_str(), cell(s, "last_error").c_str());
  }
}

// One row per flow, then the sinks' table and what the columns count (docs/operations.md
// "weir status"). A flow's ERRORS and DLQ add its sinks' to its flow stage's.
void print_flows(const nlohmann::json& status) {
  std::printf("%-20s %6s %6s %7s %8s %9s %9s %7s %7s %5s\n", "FLOW", "ACTIVE", "LATEST", "RUNNING", "PHASE", "IN/s",
              "OUT/s", "LAG", "ERRORS", "DLQ");
  const nlohmann::json sinks = sinks_in(status);
  const nlohmann::json none = nlohmann::json::array();
  for (const auto& f : status.contains("flows") ? status["flows"] : none) {
    uint64_t errors = count_of(f, "errors"), dead = count_of(f, "dead");
    for (const auto& s : sinks) {
      if (cell(s, "flow") != cell(f, "name")) continue;
      errors += count_of(s, "errors");
      dead += count_of(s, "dead");
    }
    std::printf("%-20s %6s %6s %7s %8s %9s %9s %7s %7llu %5llu\n", cell(f, "name").c_str(),
                cell(f, "active_version").c_str(), cell(f, "latest_version").c_str(),
                cell(f, "running_version").c_str(), f.contains("phase") ? cell(f, "phase").c_str() : "-",
                rate_cell(f, "in_per_s").c_str(), rate_cell(f, "out_per_s").c_str(), cell(f, "lag").c_str(),
                static_cast<unsigned long long>(errors), static_cast<unsigned long long>(dead));
  }
  print_sink_rows(sinks);
  std::printf(
      "ERRORS: failed attempts (each retry counts); DLQ: events dead-lettered; both counted by this weir since it "
      "started, a flow's row adding its sinks'.\n");
  if (sinks.empty()) return;
  const nlohmann::json& recent = sinks[0].contains("recent") ? sinks[0]["recent"] : nlohmann::json();
  std::printf(
      "HEALTH: down (circuit open), paused, else from the last %ss of results: failing (half or more "
      "failed), degraded (some failed), healthy.\n",
      cell(recent.is_object() ? recent : nlohmann::json::object(), "seconds").c_str());
}

int status_command(const std::string& server, int interval_ms, bool as_json) {
  auto sample = [&](nlohmann::json* out) -> int {
    weir::AdminReply r = weir::admin_call(server, "GET", "/status");
    if (r.status == 0) {
      std::fprintf(stderr, "weir: cannot reach %s: %s\n", server.c_str(), r.error.c_str());
      return 1;
    }
    *out = nlohmann::json::parse(r.body, nullptr, false);
    if (r.status != 200 || !out->is_object()) {
      std::fprintf(stderr, "%s\n", r.body.c_str());
      return r.status == 200 ? 1 : weir::admin_exit_code(r);
    }
    return 0;
  };
  nlohmann::json first, second;
  if (int rc = sample(&first); rc != 0) return rc;
  auto t0 = std::chrono::steady_clock::now();
  second = first;
  if (interval_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    if (int rc = sample(&second); rc != 0) return rc;
    add_rates(second, first, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (as_json) {
    std::printf("%s\n", second.dump(2).c_str());
    return 0;
  }
  const nlohmann::json& members = second.value("members", nlohmann::json::object());
  std::printf("cluster %s  instance %s  nats %s%s\n",
              second.value("cluster", "").empty() ? "(standalone)" : second.value("cluster", "").c_str(),
              members.value("instance", "-").c_str(), second.value("nats", "").c_str(),
              second.value("connected", false) ? "" : " (disconnected)");
  if (members.contains("members")) std::printf("members %s\n", members["members"].dump().c_str());
  print_flows(second);
  if (members.contains("leases") && !members["leases"].empty()) {
    std::printf("%-28s %s\n", "LEASE", "HOLDER");
    for (const auto& l : members["leases"]) {
      std::printf("%-28s %s%s\n", cell(l, "key").c_str(), cell(l, "holder").c_str(),
                  l.value("held_here", false) ? " (this instance)" : "");
    }
  }
  return 0;
}
// `weir dlq list`: every page (GET /dlq follows its Link rel="next"), printed as one array.
int dlq_list_command(const std::string& server, const std::string& flow, const std::string& id, int page_size) {
  nlohmann::json all = nlohmann::json::array();
  std::string path = "/dlq?limit=" + std::to_string(page_size);
  if (!flow.empty()) path += "&flow=" + flow;
  if (!id.empty()) path += "&id=" + weir::flows::url_encode(id);
  for (;;) {
    weir::AdminReply r = weir::admin_call(server, "GET", path);
    if (r.status == 0) {
      std::fprintf(stderr, "weir: cannot reach %s: %s\n", server.c_str(), r.error.c_str());
      return 1;
    }
    auto page = nlohmann::json::parse(r.body, nullptr, false);
    if (r.status != 200 || !page.is_array()) {
      std::fprintf(stderr, "%s\n", r.body.c_str());
      return r.status == 200 ? 1 : weir::admin_exit_code(r);
    }
    for (auto& d : page) all.push_back(std::move(d));
    // Link: </dlq?after_seq=N&...>; rel="next"
    std::string link = r.header("link");
    auto lt = link.find('<'), gt = link.find('>');
    if (link.find("rel=\"next\"") == std::string::npos || lt == std::string::npos || gt == std::string::npos) break;
    path = link.substr(lt + 1, gt - lt - 1);
  }
  if (!id.empty()) {
    if (all.empty()) {
      std::fprintf(stderr, "weir: no dead letter with id %s\n", id.c_str());
      return 1;
    }
    // One event may have died in two sinks: then both are shown.
    std::printf("%s\n", (all.size() == 1 ? all[0] : all).dump(2).c_str());
    return 0;
  }
  std::printf("%s\n", all.dump(2).c_str());
  return 0;
}

// weir sink status|pause|resume (docs/admin-api.md#sinks): GET /sinks as a table (or JSON),
// or one POST /sinks/{flow}/{sink}/pause|resume.
int sink_command(const std::string& server, const std::string& action, const std::vector<std::string>& args,
                 bool as_json) {
  auto seg = [](const std::string& s) { return weir::flows::url_encode(s); };
  if (action != "status") {
    if (args.size() != 2) {
      std::fprintf(stderr, "weir sink %s: usage: weir sink %s FLOW SINK\n", action.c_str(), action.c_str());
      return 2;
    }
    return weir::admin_command(server, "POST", "/sinks/" + seg(args[0]) + "/" + seg(args[1]) + "/" + action);
  }
  if (!args.empty() && args.size() != 2) {
    std::fprintf(stderr, "weir sink status: usage: weir sink status [FLOW SINK]\n");
    return 2;
  }
  weir::AdminReply r = weir::admin_call(server, "GET", "/sinks");
  if (r.status != 200) return weir::admin_command(server, "GET", "/sinks");
  auto all = nlohmann::json::parse(r.body, nullptr, false);
  if (!all.is_array()) {
    std::fprintf(stderr, "weir sink status: the answer is not a JSON array\n");
    return 1;
  }
  nlohmann::json shown = nlohmann::json::array();
  for (const auto& s : all) {
    if (args.empty() || (s.value("flow", "") == args[0] && s.value("sink", "") == args[1])) shown.push_back(s);
  }
  if (!args.empty() && shown.empty()) {
    std::fprintf(stderr, "weir sink status: flow %s has no sink %s here\n", args[0].c_str(), args[1].c_str());
    return 2;
  }
  if (as_json) {
    std::printf("%s\n", shown.dump(2).c_str());
    return 0;
  }
  print_sinks(shown);
  return 0;
}

// `weir dlq replay`: one POST /dlq/replay (docs/admin-api.md, ADR 0298). Prints the answer;
// when a flow's backlog bound left dead letters in the stream, says so on stderr and that
// the same command replays them once the flow drains (exit 0: what could go back went).
int dlq_replay_command(const std::string& server, const nlohmann::json& body) {
  weir::AdminReply r = weir::admin_call(server, "POST", "/dlq/replay", body.dump());
  if (r.status == 0) {
    std::fprintf(stderr, "weir: cannot reach %s: %s\n", server.c_str(), r.error.c_str());
    return 1;
  }
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  std::fprintf(r.status < 300 ? stdout : stderr, "%s\n", j.is_discarded() ? r.body.c_str() : j.dump(2).c_str());
  if (r.status < 300 && j.is_object() && j.value("remaining", 0) > 0) {
    std::fprintf(stderr, "weir: %d dead letters remain: ", j.value("remaining", 0));
    const char* sep = "";
    for (const auto& [flow, why] : j.value("held", nlohmann::json::object()).items()) {
      std::fprintf(stderr, "%sflow %s: %s", sep, flow.c_str(), why.is_string() ? why.get<std::string>().c_str() : "");
      sep = "; ";
    }
    std::fprintf(stderr, ". Run the same command again once it drains.\n");
  }
  return weir::admin_exit_code(r);
}

// weir table ACTION ARGS: one admin call under /tables (docs/admin-api.md#tables).
int table_command(const std::string& server, const std::string& action, const std::vector<std::string>& args,
                  const std::string& key_column) {
  auto need = [&](size_t n, const char* usage) {
    if (args.size() == n) return true;
    std::fprintf(stderr, "weir table %s: usage: weir table %s %s\n", action.c_str(), action.c_str(), usage);
    return false;
  };
  auto seg = [](const std::string& s) { return weir::flows::url_encode(s); };
  if (action == "list") return need(0, "") ? weir::admin_command(server, "GET", "/tables") : 2;
  if (action == "get")
    return need(2, "NAME KEY") ? weir::admin_command(server, "GET", "/tables/" + seg(args[0]) + "/" + seg(args[1])) : 2;
  if (action == "delete") {
    return need(2, "NAME KEY") ? weir::admin_command(server, "DELETE", "/tables/" + seg(args[0]) + "/" + seg(args[1]))
                               : 2;
  }
  if (action == "put") {
    if (!need(3, "NAME KEY JSON")) return 2;
    auto row = nlohmann::json::parse(args[2], nullptr, false);
    if (row.is_discarded() || !row.is_object()) {
      std::fprintf(stderr, "weir table put: the row must be a JSON object, e.g. '{\"tier\": \"gold\"}'\n");
      return 2;
    }
    return weir::admin_command(server, "PUT", "/tables/" + seg(args[0]) + "/" + seg(args[1]), args[2]);
  }
  if (action == "export") return need(1, "NAME") ? weir::admin_command(server, "GET", "/tables/" + seg(args[0])) : 2;
  // import
  if (!need(2, "NAME FILE.csv|FILE.json [--key COLUMN]")) return 2;
  const std::string& file = args[1];
  std::string format;
  if (file.size() > 4 && (file.substr(file.size() - 4) == ".csv" || file.substr(file.size() - 4) == ".CSV"))
    format = "csv";
  if (file.size() > 5 && (file.substr(file.size() - 5) == ".json" || file.substr(file.size() - 5) == ".JSON"))
    format = "json";
  if (format.empty()) {
    std::fprintf(stderr, "weir table import: %s must end in .csv or .json\n", file.c_str());
    return 2;
  }
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (!f) {
    std::fprintf(stderr, "weir table import: cannot read %s\n", file.c_str());
    return 2;
  }
  std::string body;
  char buf[8192];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) body.append(buf, n);
  std::fclose(f);
  std::string path = "/tables/" + seg(args[0]) + "?format=" + format;
  if (!key_column.empty()) path += "&key=" + weir::flows::url_encode(key_column);
  return weir::admin_command(server, "PUT", path, body);
}

// The admin token for the client commands: --token-env NAME, else the config's
// admin.token_env, else WEIR_ADMIN_TOKEN when set. A named variable that is unset is a
// usage error (the call would only answer 401).
int resolve_token(const std::string& token_env, const std::string& config_file, std::string* server,
                  bool server_given) {
  std::string env = token_env;
  if (!config_file.empty()) {
    try {
      weir::RuntimeConfig c = weir::load_runtime_config(config_file);
      if (env.empty()) env = c.admin.token_env;
      if (!server_given && c.admin.listen.find(":0") == std::string::npos) *server = "http://" + c.admin.listen;
    } catch (const weir::ConfigError& e) {
      std::fprintf(stderr, "weir: %s\n", e.what());
      return 2;
    }
  }
  if (env.empty()) {
    if (const char* t = std::getenv("WEIR_ADMIN_TOKEN"); t && *t) weir::set_admin_token(t);
    return 0;
  }
  const char* t = std::getenv(env.c_str());
  if (!t || !*t) {
    std::fprintf(stderr, "weir: the admin token's environment variable %s is not set\n", env.c_str());
    return 2;
  }
  weir::set_admin_token(t);
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
#if !WEIR_MIMALLOC
  // Few arenas: weir's threads are many but light; the default (8 per core) multiplies
  // idle RSS for nothing. (With mimalloc, glibc's malloc serves nothing.)
  mallopt(M_ARENA_MAX, 2);
#endif

  CLI::App app{"weir — a flow runtime for event streams"};
  app.require_subcommand(1);
  app.set_version_flag("--version", WEIR_VERSION);

  // run
  auto* run = app.add_subcommand("run", "run flows (embedded NATS unless --nats or nats.url)");
  std::string config_file, flows_dir, nats_url, data_dir, http_listen, admin_listen, cluster;
  run->add_option("--config", config_file, "weir.yaml");
  run->add_option("--flows", flows_dir, "folder of flow files (*.yaml, *.json)");
  run->add_option("--nats", nats_url, "NATS URL; without it an embedded nats-server is started");
  run->add_option("--data-dir", data_dir, "where the embedded NATS keeps its store");
  run->add_option("--http", http_listen, "http-in listen address host:port");
  run->add_option("--admin", admin_listen, "admin API listen address host:port");
  run->add_option("--cluster", cluster, "join this cluster");

  // validate / test
  auto* validate = app.add_subcommand("validate", "check flow files; errors as file:line:column: message");
  std::vector<std::string> files;
  validate->add_option("files", files, "flow files or directories of them")->required();
  auto* test = app.add_subcommand("test", "run the test cases of flow files");
  std::vector<std::string> test_files;
  std::string cases_file;
  test->add_option("files", test_files, "flow files or directories of them")->required();
  test->add_option("--cases", cases_file, "a file of extra cases");

  // admin clients
  std::string server = kDefaultServer;
  auto* deploy = app.add_subcommand("deploy", "send a flow file to a running weir");
  std::string deploy_file;
  deploy->add_option("file", deploy_file)->required();
  auto* promote = app.add_subcommand(
      "promote",
      "make a version of a flow the active one (cluster only: standalone weir keeps no versions — the flow "
      "file is the one version, `weir deploy` replaces it; the 501 answer says so)");
  std::string flow_name;
  int64_t version = 0;
  promote->add_option("flow", flow_name)->required();
  promote->add_option("version", version)->required();
  int64_t expect_active = 0;
  promote->add_option("--expect", expect_active, "only if this version is the active one (else 409)");
  auto* rollback = app.add_subcommand(
      "rollback",
      "go back to the previous version of a flow (cluster only, like promote: standalone, deploy "
      "the previous file again)");
  std::string rollback_flow;
  rollback->add_option("flow", rollback_flow)->required();
  auto* status = app.add_subcommand("status", "flows, versions, rates, lag, leases");
  int status_interval = 1000;
  bool status_json = false;
  status->add_option("--interval-ms", status_interval, "sampling interval for rates (0: no rates)")
      ->capture_default_str();
  status->add_flag("--json", status_json, "print JSON instead of a table");
  auto* dlq = app.add_subcommand(
      "dlq",
      "dead letters: list | show ID | replay [--flow F] [--sink S] [--since T] [--until T] [--reason TEXT] "
      "[--dry-run] [ID...]");
  std::string dlq_action, dlq_flow, dlq_sink, dlq_since, dlq_until, dlq_reason;
  std::vector<std::string> dlq_ids;
  bool dlq_dry_run = false;
  dlq->add_option("action", dlq_action, "list, show or replay")
      ->required()
      ->check(CLI::IsMember({"list", "show", "replay"}));
  dlq->add_option("id", dlq_ids, "event id (show: one; replay: only these, any number)");
  auto* dlq_flow_opt = dlq->add_option("--flow", dlq_flow, "only this flow");
  auto* dlq_sink_opt = dlq->add_option("--sink", dlq_sink,
                                       "replay: only dead letters of this sink (in any flow unless --flow)");
  auto* dlq_since_opt = dlq->add_option(
      "--since", dlq_since,
      "replay: only those dead-lettered at or after this time (RFC 3339, e.g. 2026-01-02T15:04:05Z, "
      "or epoch milliseconds)");
  auto* dlq_until_opt = dlq->add_option("--until", dlq_until,
                                        "replay: only those dead-lettered before this time (as --since)");
  auto* dlq_reason_opt = dlq->add_option("--reason", dlq_reason,
                                         "replay: only those whose reason contains this text (case-sensitive)");
  dlq->add_flag("--dry-run", dlq_dry_run, "replay: count what would be replayed (per flow and stage), change nothing");
  int dlq_page = 1000;
  dlq->add_option("--page-size", dlq_page, "dead letters per GET /dlq request (list and show read every page)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  auto* table = app.add_subcommand(
      "table",
      "KV lookup tables (`kv:` in a flow's tables): list | get NAME KEY | put NAME KEY JSON | "
      "delete NAME KEY | import NAME FILE.csv|FILE.json | export NAME");
  std::string table_action;
  std::vector<std::string> table_args;
  std::string table_key;
  table->add_option("action", table_action, "list, get, put, delete, import or export")
      ->required()
      ->check(CLI::IsMember({"list", "get", "put", "delete", "import", "export"}));
  table->add_option("args", table_args, "NAME [KEY [JSON]] or NAME FILE");
  table->add_option("--key", table_key,
                    "import: the column rows are keyed by (default: the `key` a running flow declares)");
  auto* sink = app.add_subcommand(
      "sink", "sinks' circuits (docs/admin-api.md#sinks): status [FLOW SINK] | pause FLOW SINK | resume FLOW SINK");
  std::string sink_action;
  std::vector<std::string> sink_args;
  bool sink_json = false;
  sink->add_option("action", sink_action, "status, pause or resume")
      ->required()
      ->check(CLI::IsMember({"status", "pause", "resume"}));
  sink->add_option("names", sink_args, "FLOW SINK");
  sink->add_flag("--json", sink_json, "status: print JSON instead of a table");
  std::string token_env, client_config;
  std::vector<CLI::Option*> server_options;
  for (auto* sc : {deploy, promote, rollback, status, dlq, table, sink}) {
    server_options.push_back(sc->add_option("--server", server,
                                            "admin API of a running weir (default: the config's admin.listen, "
                                            "else http://127.0.0.1:8081)"));
    sc->add_option("--token-env", token_env,
                   "environment variable holding the admin token (default: the config's admin.token_env, "
                   "else WEIR_ADMIN_TOKEN)");
    sc->add_option("--config", client_config, "weir.yaml to read admin.listen and admin.token_env from");
  }
  app.add_subcommand("version", "print the version");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  if (app.got_subcommand("version")) {
    std::printf("weir %s\nallocator: %s\n", WEIR_VERSION, allocator_name().c_str());
    return 0;
  }
  if (app.got_subcommand(validate)) return weir::flows::validate_command(files, std::cout, std::cerr);
  if (app.got_subcommand(test)) return weir::flows::test_command(test_files, cases_file, std::cout);

  // curl (and with it OpenSSL) is initialised where it is first used: admin_call, the
  // HTTP sinks' loop, the poll source, the span exporter (ADR 0161).
  if (app.got_subcommand(deploy) || app.got_subcommand(promote) || app.got_subcommand(rollback) ||
      app.got_subcommand(status) || app.got_subcommand(dlq) || app.got_subcommand(table)) {
    bool server_given = false;
    for (auto* o : server_options) server_given = server_given || o->count() > 0;
    if (int rc = resolve_token(token_env, client_config, &server, server_given); rc != 0) return rc;
  }
  if (app.got_subcommand(deploy)) {
    std::FILE* f = std::fopen(deploy_file.c_str(), "rb");
    if (!f) {
      std::fprintf(stderr, "weir: cannot read %s\n", deploy_file.c_str());
      return 2;
    }
    std::string body;
    char buf[8192];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) body.append(buf, n);
    std::fclose(f);
    // The flow's name is in the file (`flow:`); the file's name only when it does not load
    // here (the server then answers 422 with the reasons).
    std::string name = deploy_file.substr(deploy_file.find_last_of('/') + 1);
    name = name.substr(0, name.find('.'));
    if (auto loaded = weir::flows::load_flow_file(deploy_file); loaded.flow) name = loaded.flow->name();
    return weir::admin_command(server, "PUT", "/flows/" + name, body);
  }
  if (app.got_subcommand(promote)) {
    nlohmann::json body = {{"version", version}};
    if (expect_active != 0) body["expected_active"] = expect_active;
    return weir::admin_command(server, "POST", "/flows/" + flow_name + "/promote", body.dump());
  }
  if (app.got_subcommand(rollback)) return weir::admin_command(server, "POST", "/flows/" + rollback_flow + "/rollback");
  if (app.got_subcommand(status)) return status_command(server, status_interval, status_json);
  if (app.got_subcommand(dlq)) {
    const bool replay_only = dlq_sink_opt->count() || dlq_since_opt->count() || dlq_until_opt->count() ||
                             dlq_reason_opt->count() || dlq_dry_run;
    if (dlq_action != "replay" && replay_only) {
      std::fprintf(stderr, "weir dlq %s: --sink, --since, --until, --reason and --dry-run are for replay\n",
                   dlq_action.c_str());
      return 2;
    }
    if (dlq_action == "list") {
      if (!dlq_ids.empty()) {
        std::fprintf(stderr, "weir dlq list: takes no id (weir dlq show ID)\n");
        return 2;
      }
      return dlq_list_command(server, dlq_flow, "", dlq_page);
    }
    if (dlq_action == "show") {
      if (dlq_ids.size() != 1) {
        std::fprintf(stderr, "weir dlq show: give one event id\n");
        return 2;
      }
      return dlq_list_command(server, dlq_flow, dlq_ids[0], dlq_page);
    }
    // Each flag given becomes its key, even empty: the server checks them all (a 400 names what
    // was wrong), so a filter mistyped as "" never turns into "replay everything".
    // A time of digits only is epoch milliseconds, as GET /dlq's `at`.
    auto when = [](const std::string& t) {
      return !t.empty() && t.find_first_not_of("0123456789") == std::string::npos && t.size() <= 18
                 ? nlohmann::json(std::stoll(t))
                 : nlohmann::json(t);
    };
    nlohmann::json body = nlohmann::json::object();
    if (dlq_flow_opt->count()) body["flow"] = dlq_flow;
    if (dlq_sink_opt->count()) body["sink"] = dlq_sink;
    if (!dlq_ids.empty()) body["ids"] = dlq_ids;
    if (dlq_since_opt->count()) body["since"] = when(dlq_since);
    if (dlq_until_opt->count()) body["until"] = when(dlq_until);
    if (dlq_reason_opt->count()) body["reason"] = dlq_reason;
    if (dlq_dry_run) body["dry_run"] = true;
    return dlq_replay_command(server, body);
  }

  if (app.got_subcommand(table)) return table_command(server, table_action, table_args, table_key);
  if (app.got_subcommand(sink)) return sink_command(server, sink_action, sink_args, sink_json);

  // weir run
  weir::RuntimeConfig config;
  try {
    if (!config_file.empty()) config = weir::load_runtime_config(config_file);
  } catch (const weir::ConfigError& e) {
    std::fprintf(stderr, "weir: %s\n", e.what());
    return 2;
  }
  if (!flows_dir.empty()) config.flows = flows_dir;
  if (!nats_url.empty()) config.nats.url = nats_url;
  if (!data_dir.empty()) config.data_dir = data_dir;
  if (!http_listen.empty()) config.http.listen = http_listen;
  if (!admin_listen.empty()) config.admin.listen = admin_listen;
  if (!cluster.empty()) config.cluster.name = cluster;

  // Every thread inherits this mask; the main thread takes the signals with sigwait.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);  // a reload (runtime/runtime.cc), never the default's exit
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  weir::connectors::BuiltinConnectors connectors;
  weir::cluster::ClusterRuntime cluster_runtime;
  int rc = 1;
  {
    weir::Runtime runtime(config, connectors, &cluster_runtime);
    rc = runtime.run();
  }
  return rc;
}

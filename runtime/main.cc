// weir — the command line (spec §2). Parses arguments, loads configuration (the
// edge where exceptions are allowed), and hands over to the runtime, the flows
// library (validate/test) or the admin client (deploy/promote/rollback/status/dlq).
#include <malloc.h>
#include <signal.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <curl/curl.h>
#include <nlohmann/json.hpp>

#include "cluster/runtime_hooks.h"
#include "connectors/registry.h"
#include "flows/cli.h"
#include "runtime/admin_client.h"
#include "runtime/config.h"
#include "runtime/runtime.h"

#ifndef WEIR_VERSION
#define WEIR_VERSION "0.1.0"
#endif

namespace {
constexpr const char* kDefaultServer = "http://127.0.0.1:8081";
}

int main(int argc, char** argv) {
  // Few arenas: weir's threads are many but light; the default (8 per core) multiplies
  // idle RSS for nothing.
  mallopt(M_ARENA_MAX, 2);

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
  validate->add_option("files", files, "flow files")->required();
  auto* test = app.add_subcommand("test", "run the test cases of flow files");
  std::vector<std::string> test_files;
  std::string cases_file;
  test->add_option("files", test_files, "flow files")->required();
  test->add_option("--cases", cases_file, "a file of extra cases");

  // admin clients
  std::string server = kDefaultServer;
  auto* deploy = app.add_subcommand("deploy", "send a flow file to a running weir");
  std::string deploy_file;
  deploy->add_option("file", deploy_file)->required();
  auto* promote = app.add_subcommand("promote", "make a version of a flow the active one");
  std::string flow_name;
  int64_t version = 0;
  promote->add_option("flow", flow_name)->required();
  promote->add_option("version", version)->required();
  auto* rollback = app.add_subcommand("rollback", "go back to the previous version of a flow");
  std::string rollback_flow;
  rollback->add_option("flow", rollback_flow)->required();
  auto* status = app.add_subcommand("status", "flows, versions, rates, lag, leases");
  auto* dlq = app.add_subcommand("dlq", "dead letters: list | show ID | replay");
  std::string dlq_action, dlq_id, dlq_flow;
  dlq->add_option("action", dlq_action, "list, show or replay")->required()->check(CLI::IsMember({"list", "show", "replay"}));
  dlq->add_option("id", dlq_id, "event id (show, replay)");
  dlq->add_option("--flow", dlq_flow, "only this flow");
  for (auto* sc : {deploy, promote, rollback, status, dlq}) {
    sc->add_option("--server", server, "admin API of a running weir")->capture_default_str();
  }
  app.add_subcommand("version", "print the version");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  if (app.got_subcommand("version")) {
    std::printf("weir %s\n", WEIR_VERSION);
    return 0;
  }
  if (app.got_subcommand(validate)) return weir::flows::validate_command(files, std::cout, std::cerr);
  if (app.got_subcommand(test)) return weir::flows::test_command(test_files, cases_file, std::cout);

  curl_global_init(CURL_GLOBAL_DEFAULT);
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
    // The flow's name is in the file; the server reads it from there too.
    std::string name = deploy_file.substr(deploy_file.find_last_of('/') + 1);
    name = name.substr(0, name.find('.'));
    return weir::admin_command(server, "PUT", "/flows/" + name, body);
  }
  if (app.got_subcommand(promote)) {
    return weir::admin_command(server, "POST", "/flows/" + flow_name + "/promote",
                               nlohmann::json{{"version", version}}.dump());
  }
  if (app.got_subcommand(rollback)) return weir::admin_command(server, "POST", "/flows/" + rollback_flow + "/rollback");
  if (app.got_subcommand(status)) return weir::admin_command(server, "GET", "/status");
  if (app.got_subcommand(dlq)) {
    if (dlq_action == "list") return weir::admin_command(server, "GET", "/dlq" + (dlq_flow.empty() ? "" : "?flow=" + dlq_flow));
    if (dlq_action == "show") {
      if (dlq_id.empty()) {
        std::fprintf(stderr, "weir dlq show: give the event id\n");
        return 2;
      }
      auto r = weir::admin_call(server, "GET", "/dlq" + (dlq_flow.empty() ? "" : "?flow=" + dlq_flow));
      if (r.status != 200) return weir::admin_command(server, "GET", "/dlq");
      auto all = nlohmann::json::parse(r.body, nullptr, false);
      if (all.is_array()) {
        for (const auto& d : all) {
          if (d.value("id", "") == dlq_id) {
            std::printf("%s\n", d.dump(2).c_str());
            return 0;
          }
        }
      }
      std::fprintf(stderr, "weir: no dead letter with id %s\n", dlq_id.c_str());
      return 1;
    }
    nlohmann::json body = nlohmann::json::object();
    if (!dlq_flow.empty()) body["flow"] = dlq_flow;
    if (!dlq_id.empty()) body["ids"] = {dlq_id};
    return weir::admin_command(server, "POST", "/dlq/replay", body.dump());
  }

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
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  weir::connectors::BuiltinConnectors connectors;
  weir::cluster::ClusterRuntime cluster_runtime;
  int rc = 1;
  {
    weir::Runtime runtime(config, connectors, &cluster_runtime);
    rc = runtime.run();
  }
  curl_global_cleanup();
  return rc;
}

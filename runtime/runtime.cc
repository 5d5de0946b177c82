#include "runtime/runtime.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <thread>

#include "flows/flow.h"
#include "flows/text.h"
#include "runtime/admin/admin.h"
#include "runtime/flow/backpressure.h"
#include "runtime/banner.h"
#include "runtime/nats/bus.h"
#include "runtime/flow/dlq.h"
#include "runtime/nats/embedded_nats.h"
#include "runtime/control/flow_host.h"
#include "runtime/http/http_router.h"
#include "runtime/http/http_server.h"
#include "runtime/flow/kv_tables.h"
#include "runtime/base/log.h"
#include "runtime/nats/loop_publisher.h"
#include "runtime/base/metrics.h"
#include "runtime/base/redact.h"
#include "runtime/base/service_notify.h"
#include "runtime/flow/state_store.h"
#include "runtime/base/thread_annotations.h"
#include "runtime/base/trace_export.h"

namespace weir {

namespace {
// Exit codes: 2 for a usage or configuration error (a malformed address, a bad flow), 1 for
// a runtime failure (a port someone else holds, an unreachable service).
int exit_code_for(const Status& s) { return s.code() == Status::Code::kInvalid ? 2 : 1; }

const char* signal_name(int sig) { return sig == SIGTERM ? "SIGTERM" : "SIGINT"; }

// SIGTERM/SIGINT, taken by a thread of its own from the start (blocked in every thread by
// main), so a signal during start-up (NATS still coming up, flows starting) stops weir
// cleanly too (exit 0). Its destructor ends the thread when no signal came.
// SIGHUP (docs/adr/0306-reload-on-sighup.md) runs the reload set by on_reload(), on this
// thread, one at a time; before one is set (start-up) it is logged and ignored.
class SignalWatch {
 public:
  SignalWatch() : thread_([this] { watch(); }) {}
  ~SignalWatch() {
    over_ = true;
    // SIGTERM is what its sigwait() takes (blocked in every thread, so it ends nothing):
    // the one signal that wakes it without a race against its own sigmask.
    if (!taken()) pthread_kill(thread_.native_handle(), SIGTERM);  // NOLINT(bugprone-bad-signal-to-kill-thread)
    thread_.join();
  }
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

  bool taken() const { return signal_.load() != 0; }
  int signal() const { return signal_.load(); }
  int wait() {
    UniqueLock lock(mu_);
    lock.wait(cv_, [&] { return taken(); });
    return signal_.load();
  }
  // Set once serving (the reload needs the running flows); cleared by the destructor's join.
  void on_reload(std::function<void()> reload) {
    MutexLock lock(reload_mu_);
    reload_ = std::move(reload);
  }

 private:
  void watch() {
    pthread_setname_np(pthread_self(), "weir-signals");
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);  // main blocks them too; sigwait needs it here
    int sig = 0;
    while (sigwait(&set, &sig) == 0 && sig == SIGHUP && !over_.load()) {
      std::function<void()> reload;
      {
        MutexLock lock(reload_mu_);
        reload = reload_;
      }
      if (reload) {
        reload();
      } else {
        log::warn("SIGHUP ignored: weir is not serving yet", {});
      }
    }
    if (over_.load()) return;
    {
      MutexLock lock(mu_);
      signal_ = sig;
    }
    cv_.notify_all();
  }

  // signal_ is atomic (taken() reads it unlocked); mu_ orders its store with wait()'s check,
  // so the wake-up is not lost.
  Mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> signal_{0};
  std::atomic<bool> over_{false};
  Mutex reload_mu_;
  std::function<void()> reload_ GUARDED_BY(reload_mu_);
  std::thread thread_;  // last: starts once the rest is built
};

// The Bus' connection and http-in's (LoopPublisher, on the io thread), each opened on a
// thread of its own (ADR 0215). With nats.url given they start right after the
// configuration is read, while the main thread compiles the flows: cnats' and OpenSSL's
// initialisation and the two handshakes leave the path to the first 202. Each retries for
// 10 s while NATS does not answer (it may be coming up), until cancel(). Destroying it
// cancels and waits for both threads (nothing of start-up outlives it); destroy it while
// the io thread still runs (a LoopPublisher it still holds closes on it).
class NatsConnecting {
 public:
  NatsConnecting(IoLoop& io, const BusOptions& options) {
    // Both threads keep the process' name: the threads cnats starts from the first
    // connection (timers, delivery pool, garbage) inherit it, and show as `weir` as before.
    bus_ = std::async(std::launch::async, [this, options] {
      auto bus = with_retries([&] { return Bus::connect(options); });
      if (bus) log::startup("NATS connection open (on its thread)");
      return bus;
    });
    ingress_ = std::async(std::launch::async, [this, &io, options] {
      auto lp = with_retries([&] { return LoopPublisher::connect(io, options); });
      if (lp) log::startup("http-in's NATS connection open (on its thread)");
      return lp;
    });
  }
  ~NatsConnecting() {
    cancel();
    if (bus_.valid()) bus_.wait();
    if (ingress_.valid()) ingress_.wait();
  }
  NatsConnecting(const NatsConnecting&) = delete;
  NatsConnecting& operator=(const NatsConnecting&) = delete;

  // Stops retrying (an attempt under way still ends, within cnats' connect timeout).
  void cancel() {
    {
      MutexLock lock(mu_);
      cancelled_ = true;
    }
    cv_.notify_all();
  }

  // Each once. While waiting, `stop` is asked every 20 ms: true (a signal) cancels.
  Result<std::unique_ptr<Bus>> bus(const std::function<bool()>& stop) { return take(bus_, stop); }
  Result<std::unique_ptr<LoopPublisher>> ingress(const std::function<bool()>& stop) { return take(ingress_, stop); }

 private:
  template <typename T>
  T take(std::future<T>& f, const std::function<bool()>& stop) {
    while (f.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) {
      if (stop()) cancel();
    }
    return f.get();
  }

  template <typename Connect>
  auto with_retries(Connect connect) -> decltype(connect()) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      auto r = connect();
      if (r || std::chrono::steady_clock::now() > deadline) return r;
      UniqueLock lock(mu_);
      if (lock.wait_for(cv_, std::chrono::milliseconds(200), [&]() REQUIRES(mu_) { return cancelled_; })) return r;
    }
  }

  Mutex mu_;
  std::condition_variable cv_;
  bool cancelled_ GUARDED_BY(mu_) = false;
  // Last: the threads start once the rest is built.
  std::future<Result<std::unique_ptr<Bus>>> bus_;
  std::future<Result<std::unique_ptr<LoopPublisher>>> ingress_;
};
}  // namespace

// The process lifecycle (docs/adr/0200-thin-runtime-core.md): start-up in order, the wait
// for a signal, the drain and the teardown. The flows and the admin calls on them are
// FlowHost's.
struct Runtime::Impl {
  RuntimeConfig config;
  ConnectorFactory& connectors;
  ClusterHooks* cluster = nullptr;  // set only when clustered
  Metrics metrics;
  // Declared early so it is destroyed late: stages record into it until they stop.
  std::unique_ptr<trace::SpanExporter> tracer;  // OTLP export (ADR 0141); null when off
  IoLoop io;
  HttpRouter router;
  std::unique_ptr<HttpServer> admin_server, ingress_server;
  std::unique_ptr<Admin> admin;
  std::unique_ptr<EmbeddedNats> nats;
  std::unique_ptr<Bus> bus;
  std::unique_ptr<LoopPublisher> ingress_pub;  // http-in's own connection on the io thread (ADR 0130)
  std::unique_ptr<DeadLetters> dlq;
  std::unique_ptr<BacklogMonitor> backlog;     // ingress backpressure (ADR 0080)
  std::unique_ptr<DeferredStateStore> state;   // sources' durable state, e.g. poll cursors (weir_state KV)
  std::unique_ptr<KvTables> kv_tables;         // `tables: {t: {kv: NAME}}` (ADR 0120)
  std::unique_ptr<FlowHost> host;              // the running flows
  std::unique_ptr<NatsConnecting> connecting;  // until connect_nats takes its connections
  SignalWatch* signals = nullptr;              // while run() runs

  Impl(RuntimeConfig c, ConnectorFactory& f, ClusterHooks* h) : config(std::move(c)), connectors(f) {
    if (!config.cluster.name.empty()) cluster = h;
    host = std::make_unique<FlowHost>(config, cluster);
  }

  bool clustered() const { return cluster != nullptr; }
  bool stop_requested() const { return signals && signals->taken(); }
  const char* config_name() const { return config.config_file.empty() ? "weir" : config.config_file.c_str(); }

  bool stopped_during_start() {
    if (!stop_requested()) return false;
    log::info("signal received during start-up, stopping", {{"signal", signal_name(signals->signal())}});
    if (bus) drain();  // without NATS nothing has started yet
    return true;
  }

  log::Format configure_logging() const {
    log::Level level = log::Level::kInfo;
    log::Format format = log::Format::kText;
    log::parse_level(config.log.level, &level);
    log::parse_format(config.log.format, &format);
    log::configure(level, format);
    log::startup("config read");
    return format;
  }

  // Every stream, subject and bucket name carries the cluster (ADR 0112): fixed before
  // anything makes a name. false: the name is not valid (said on stderr).
  bool set_cluster_layout() const {
    if (!config.cluster.name.empty()) {
      if (std::string why = layout::invalid_cluster_name(config.cluster.name); !why.empty()) {
        std::fprintf(stderr, "%s: cluster.name: \"%s\" %s\n", config_name(), config.cluster.name.c_str(), why.c_str());
        return false;
      }
    }
    layout::set_cluster(config.cluster.name);
    return true;
  }

  void start_tracing() {
    if (config.trace.otlp_endpoint.empty()) return;
    tracer = std::make_unique<trace::SpanExporter>(
        trace::SpanExporter::Options{.endpoint = config.trace.otlp_endpoint,
                                     .service_name = config.trace.service_name,
                                     .max_queue = static_cast<size_t>(config.trace.max_queue)});
    tracer->start();
    trace::set_exporter(tracer.get());
  }

  // The admin token from admin.token_env; none only on a loopback listener. false: why on stderr.
  bool admin_token(std::string* token) const {
    if (!config.admin.token_env.empty()) {
      const char* t = std::getenv(config.admin.token_env.c_str());
      if (!t || !*t) {
        std::fprintf(stderr, "%s: admin.token_env: environment variable %s is not set\n", config_name(),
                     config.admin.token_env.c_str());
        return false;
      }
      *token = t;
    }
    if (token->empty() && !is_loopback_listen(config.admin.listen)) {
      std::fprintf(stderr,
                   "%s: admin.listen %s is not a loopback address and no admin token is set: anyone who can "
                   "reach it could deploy flows and read dead letters. Set admin.token_env (Bearer token) or "
                   "listen on 127.0.0.1\n",
                   config_name(), config.admin.listen.c_str());
      return false;
    }
    if (!token->empty() && !config.admin.tls.enabled() && !is_loopback_listen(config.admin.listen)) {
      log::warn("the admin token travels in clear text: admin.listen is off loopback without admin.tls",
                {{"listen", config.admin.listen}});
    }
    return true;
  }

  // Logs why not.
  // Admin first: /healthz answers while NATS and the flows come up (the cold-start mark).
  // http-in is bound before NATS and the flows come up too: its address is known at once
  // (port 0 picks a free one) and it answers 503 "starting" until the flows run.
  Status start_listeners(const std::string& token) {
    admin = std::make_unique<Admin>(*host, metrics, nullptr, token);
    HttpServerOptions ao;
    ao.name = "admin";
    ao.listen = config.admin.listen;
    ao.max_body = 4 << 20;
    ao.max_connections = static_cast<size_t>(config.admin.max_connections);
    ao.max_connections_per_client = static_cast<size_t>(config.admin.max_connections_per_client);
    ao.check_header = admin->header_check();  // the token before the body (docs/admin-api.md)
    ao.tls_cert_file = config.admin.tls.cert_file;
    ao.tls_key_file = config.admin.tls.key_file;
    auto as = HttpServer::create(io, ao, admin->handler());
    if (!as) {
      log::error("cannot start the admin API", {{"error", as.status().message()}});
      return as.status();
    }
    admin_server = std::move(as.value());
    HttpServerOptions io_opts;
    io_opts.name = "ingress";
    io_opts.listen = config.http.listen;
    io_opts.max_body = config.http.max_body;
    io_opts.max_header = config.http.max_header;
    io_opts.read_timeout = config.http.read_timeout;
    io_opts.max_connections = static_cast<size_t>(config.http.max_connections);
    io_opts.max_connections_per_client = static_cast<size_t>(config.http.max_connections_per_client);
    io_opts.max_connection_age = config.http.max_connection_age;
    io_opts.tls_cert_file = config.http.tls.cert_file;
    io_opts.tls_key_file = config.http.tls.key_file;
    auto is = HttpServer::create(io, io_opts,
                                 [this](HttpRequest& req, Responder r) { router.handle(req, std::move(r)); });
    if (!is) {
      log::error("cannot start http-in", {{"error", is.status().message()}});
      return is.status();
    }
    ingress_server = std::move(is.value());
    // The bound addresses, once, machine-readable (the `listening` line tests and scripts read).
    host->set_listen(ingress_server->address(), admin_server->address());
    log::info("listening", {{"http", ingress_server->address()}, {"admin", admin_server->address()}});
    if (ingress_server->tls() || admin_server->tls()) {  // ADR 0305
      log::info("TLS", {{"http", ingress_server->tls() ? "on" : "off"}, {"admin", admin_server->tls() ? "on" : "off"}});
    }
    log::startup("listeners bound");
    return Status::ok();
  }

  BusOptions bus_options() const {
    BusOptions bo;
    bo.url = config.nats.url;
    bo.creds_file = config.nats.creds;
    bo.stream_replicas = config.nats.replicas;
    bo.stream_max_bytes = config.nats.stream_max_bytes;
    bo.delivery_threads = config.nats.delivery_threads;
    bo.delivery_loops = config.delivery_loops_in_force();
    bo.name = "weir";
    return bo;
  }

  // The io thread, and with nats.url given both NATS connections, start now, while the
  // flows compile (ADR 0215). The embedded server is started by connect_nats,
  // once the flows are known to be valid.
  void start_connecting() {
    io.set_nice(config.backlog.ingress_nice);  // delivery first when the CPU is short (ADR 0268)
    io.start();
    const int loops = config.delivery_loops_in_force();
    log::info("delivery loops",
              {{"loops", std::to_string(loops)},
               {"threads", loops == 1 ? "weir-delivery" : "weir-flows weir-sinks"},
               {"setting", config.delivery_loops == 0 ? "auto" : std::to_string(config.delivery_loops)},
               {"cpus", std::to_string(usable_cpus())}});
    if (!config.nats.url.empty()) connecting = std::make_unique<NatsConnecting>(io, bus_options());
  }

  // The embedded nats-server when no URL is given, then the Bus and http-in's connection
  // (each retried for 10 s while the server comes up), then the dead-letter stream.
  Status connect_nats(const FlowList& flows) {
    if (config.nats.url.empty()) {
      auto n = EmbeddedNats::start(config.data_dir);
      if (!n) return n.status();
      nats = std::move(n.value());
      config.nats.url = nats->url();  // the nats source and sink open their own connection to it
      connecting = std::make_unique<NatsConnecting>(io, bus_options());
    }
    auto stop = [this] { return stop_requested(); };
    auto b = connecting->bus(stop);
    if (!b) return b.status();
    bus = std::move(b.value());
    log::startup("NATS connected");
    std::vector<std::string> streams;  // their info is on its way while the rest is set up (ADR 0215)
    for (const auto& f : flows) streams.push_back(layout::flow_stream(f->name()));
    bus->prefetch_setup(streams);
    // The source-state bucket opens on a thread of its own while this one plans the
    // streams (their round trips overlap; ADR 0215).
    StateStoreOptions so;
    so.bucket = layout::state_bucket();
    so.replicas = config.nats.replicas;
    state = std::make_unique<DeferredStateStore>(bus->connection(), so);
    dlq = std::make_unique<DeadLetters>(*bus);
    Status planned = check_old_streams(flows);
    if (planned) planned = plan_streams(flows);
    log::startup("stream sizes planned, dead-letter stream ready");
    auto connected = connecting->ingress(stop);
    connecting.reset();  // both threads are done
    if (!connected) return connected.status();
    ingress_pub = std::move(connected.value());
    // weir_nats_connected (docs/metrics.md): the alert "NATS unreachable" reads it.
    metrics.set_nats_probe([this] { return bus->connected() && ingress_pub->connected(); });
    log::startup("http-in's NATS connection up");
    return planned;
  }

  // Before ADR 0112 clustered instances used the standalone names. Events left in such a
  // stream would never be read again: say so rather than start beside them.
  Status check_old_streams(const FlowList& flows) {
    if (!clustered()) return Status::ok();
    for (const auto& f : flows) {
      const std::string old = "weir_" + f->name();
      if (auto st = bus->stream_state(old); st && st->messages > 0) {
        return Status::invalid("stream " + old + " (the layout before cluster namespaces, ADR 0112) holds " +
                               std::to_string(st->messages) + " events of flow " + f->name() +
                               ": drain it with the previous weir, or delete it (nats stream rm " + old +
                               "), then start again; cluster " + config.cluster.name + " now uses " +
                               layout::flow_stream(f->name()));
      }
    }
    return Status::ok();
  }

  // Flow streams share what the server can reserve; dead letters are unlimited unless
  // dlq.max_bytes says otherwise (ADR 0090, 0110). The backlog bound follows the stream
  // size in force (it may have been shared out).
  Status plan_streams(const FlowList& flows) {
    std::vector<std::string> streams;
    for (const auto& f : flows) streams.push_back(layout::flow_stream(f->name()));
    if (Status s = bus->plan_stream_sizes(streams); !s) return s;
    BackpressureOptions bp;
    bp.max_bytes = config.backlog.bytes_bound(bus->stream_max_bytes());
    if (bp.max_bytes + config.http.max_body > bus->stream_max_bytes()) {
      bp.max_bytes = std::max<int64_t>(bus->stream_max_bytes() / 4 * 3, 1);
      log::warn("backlog.max_bytes lowered to fit the flow streams", {{"max_bytes", std::to_string(bp.max_bytes)}});
    }
    bp.max_messages = config.backlog.max_events;
    bp.max_pending = config.backlog.max_pending;
    bp.max_delay = config.backlog.max_delay;
    backlog = std::make_unique<BacklogMonitor>(*bus, metrics, bp);
    dlq->set_backlog(backlog.get());  // replay stops at a flow's backlog bound (ADR 0298)
    return bus->ensure_dlq_stream(config.dlq.max_age, config.dlq.max_bytes);
  }

  // The KV lookup tables: every table a flow names is read before the flows start. (The
  // KV bucket behind SourceState — poll cursors, ETags — is opened meanwhile by
  // connect_nats; NatsKv retries while a fresh server or cluster does not answer yet, ADR 0110.)
  Status open_tables() {
    KvTablesOptions to;
    to.replicas = config.nats.replicas;
    to.max_entries = static_cast<size_t>(config.tables.max_entries);
    to.max_value_bytes = static_cast<size_t>(config.tables.max_value_bytes);
    to.max_depth = config.http.max_depth;
    to.max_tables = static_cast<size_t>(config.tables.max_tables);
    kv_tables = std::make_unique<KvTables>(bus->connection(), to);
    return kv_tables->start(std::chrono::seconds(30));
  }

  Status connect_bus(const FlowList& flows) {
    if (Status s = connect_nats(flows); !s) return s;
    if (Status s = open_tables(); !s) return s;
    if (clustered()) {
      if (Status s = cluster->start(*bus, config); !s) return s;
    }
    FlowDeps deps;
    deps.config = &config;
    deps.connectors = &connectors;
    deps.metrics = &metrics;
    deps.bus = bus.get();
    deps.dlq = dlq.get();
    deps.ingress_pub = ingress_pub.get();
    deps.backlog = backlog.get();
    deps.router = &router;
    deps.state = state.get();
    host->connect(deps, kv_tables.get());
    return Status::ok();
  }

  // -1 when every flow started; else the exit code (the drain done).
  int start_flows(const FlowList& flows) {
    for (const auto& f : flows) {
      if (Status s = host->start_local(f); !s) {
        drain();
        return exit_code_for(s);
      }
      if (stopped_during_start()) return 0;
    }
    log::startup("flows started (consumers ready)");
    return -1;
  }

  void announce_ready(log::Format format) {
    auto routes = host->http_routes();  // before serving: no deploy adds a flow yet
    std::string route_list;
    for (const auto& [path, flow] : routes) route_list += (route_list.empty() ? "" : " ") + path + "=" + flow;
    const size_t started_flows = host->size();
    router.set_serving();
    host->serve();
    const std::string nats_url = redact_urls(bus->url());
    log::info("weir ready", {{"ingress", ingress_server->address()},
                             {"admin", admin_server->address()},
                             {"nats", nats_url},
                             {"flows", std::to_string(started_flows)},
                             {"routes", route_list}});
    // For a person at a terminal: where to POST. (With JSON logs the line above says it.)
    if (format == log::Format::kText) {
      print_ready_banner(ingress_server->address(), admin_server->address(), nats_url, routes);
    }
    std::fflush(stdout);
    // /readyz answers 200 from here on (docs/adr/0304-readiness-notification.md).
    service::notify("READY=1\nSTATUS=ready: " + std::to_string(started_flows) + " flows");
  }

  // A secret variable missing is found before any listener, nats-server or consumer starts
  // (each connector would refuse it at its start, with half of weir up); `weir validate`
  // warns about the same variables. false: each named on stderr.
  static bool secrets_set(const FlowList& loaded) {
    std::string unset;
    for (const auto& f : loaded) {
      for (const auto& d : flows::unset_secret_variables(*f, flows::process_env())) unset += d.str() + "\n";
    }
    if (unset.empty()) return true;
    std::fprintf(stderr, "%sweir: not started: set the environment variables above\n", unset.c_str());
    return false;
  }

  int run() {
    const log::Format format = configure_logging();
    if (!set_cluster_layout()) return 2;
    start_tracing();
    start_connecting();
    auto loaded = host->load();
    if (!loaded) {
      std::fprintf(stderr, "%s\n", loaded.status().message().c_str());
      return 2;
    }
    if (loaded->empty()) log::warn("no flows found", {{"dir", config.flows}});
    if (!secrets_set(loaded.value())) return 2;
    log::startup("flows compiled");
    SignalWatch watch;
    signals = &watch;
    struct Unset {
      SignalWatch*& p;
      ~Unset() { p = nullptr; }
    } unset{signals};
    std::string token;
    if (!admin_token(&token)) return 2;
    if (Status s = start_listeners(token); !s) return exit_code_for(s);
    if (Status s = connect_bus(loaded.value()); !s) {
      if (stopped_during_start()) return 0;
      // Connect errors say "connect to URL"; set-up errors name the stream and the key to change.
      log::error("NATS start-up failed", {{"error", s.message()}});
      return exit_code_for(s);
    }
    admin->set_dead_letters(dlq.get());
    admin->set_tables(kv_tables.get());
    log::startup("streams and buckets ready");
    if (stopped_during_start()) return 0;
    if (int rc = start_flows(loaded.value()); rc >= 0) return rc;
    if (Status s = state->wait(); !s) {
      log::error("NATS start-up failed", {{"error", s.message()}});
      drain();
      return exit_code_for(s);
    }
    announce_ready(format);
    watch.on_reload([this] { reload(); });
    const int sig = watch.wait();
    log::info("signal received, draining", {{"signal", signal_name(sig)}});
    drain();
    return 0;
  }

  // SIGHUP (docs/adr/0306-reload-on-sighup.md), on the signal thread: the listeners'
  // certificates read again, then the flows dir. One log line and one count for the outcome.
  void reload() {
    log::info("SIGHUP: reloading", {{"flows", config.flows}});
    std::vector<std::string> errors;
    int certificates = 0;
    for (HttpServer* s : {ingress_server.get(), admin_server.get()}) {
      if (!s || !s->tls()) continue;
      if (Status st = s->reload_tls(); !st) {
        errors.push_back(st.message() + " (the certificate in use stays)");
      } else {
        ++certificates;
      }
    }
    std::string summary = "nothing changed";
    if (Status st = host->reload(&summary); !st) errors.push_back(st.message());
    std::string error;
    for (const auto& e : errors) error += (error.empty() ? "" : "\n") + e;
    if (errors.empty()) {
      ++metrics.reloads_ok;
      log::info("reload done", {{"result", "ok"}, {"flows", summary}, {"certificates", std::to_string(certificates)}});
    } else {
      ++metrics.reloads_failed;
      log::error(
          "reload failed",
          {{"result", "failed"}, {"flows", summary}, {"certificates", std::to_string(certificates)}, {"error", error}});
    }
  }

  // Let answers to requests already taken go out (their PubAcks are on the way); those
  // still waiting get their 503 at the deadline, while the servers still write answers
  // (tests/integration/shutdown_test.cc).
  void finish_publishes(std::chrono::steady_clock::time_point deadline) {
    auto pending = [&] { return (bus ? bus->pending_publishes() : 0) + (ingress_pub ? ingress_pub->pending() : 0); };
    while (pending() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (bus && bus->pending_publishes() > 0) bus->fail_pending("weir is shutting down");
    if (ingress_pub && ingress_pub->pending() > 0) ingress_pub->fail_pending("weir is shutting down");
  }

  void drain() {
    auto started = std::chrono::steady_clock::now();
    service::notify("STOPPING=1\nSTATUS=draining");  // before the listeners stop (ADR 0304)
    host->begin_drain();
    router.set_draining();
    if (ingress_server) ingress_server->stop_accepting();
    host->stop_sources();
    auto deadline = started + config.drain_timeout;
    finish_publishes(deadline);
    host->stop_stages(deadline);
    // After the stages: until then this instance still handles events and a promoter
    // must keep waiting for it (ADR 0042).
    if (clustered()) cluster->stop();
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
    log::info("drained", {{"ms", std::to_string(ms.count())}});
    host->end_drain();
  }

  ~Impl() {
    connecting.reset();  // start-up ended early (a flow error, a signal): its threads end first
    // Publish callbacks capture sources, ingest and stages: fail what is pending while
    // they exist, and every later publish at once (tests/integration/shutdown_test.cc).
    if (bus) bus->shutdown();
    if (ingress_pub) ingress_pub->shutdown();
    metrics.set_nats_probe(nullptr);  // before the connections it reads go
    ingress_server.reset();
    host->stop_all();
    if (clustered()) cluster->stop();  // its watches call into the running flows
    admin_server.reset();
    ingress_pub.reset();  // its connection runs on the io thread
    io.stop();
    admin.reset();
    host->clear();
    state.reset();  // before the connection it borrows
    backlog.reset();
    kv_tables.reset();
    bus.reset();
    if (nats) nats->stop();
  }
};

Runtime::Runtime(RuntimeConfig config, ConnectorFactory& connectors, ClusterHooks* cluster)
    : impl_(std::make_unique<Impl>(std::move(config), connectors, cluster)) {}
Runtime::~Runtime() = default;
int Runtime::run() { return impl_->run(); }

}  // namespace weir

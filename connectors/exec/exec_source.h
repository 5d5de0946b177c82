// ExecSource: the `exec` source, a cluster singleton. Runs a command (argv, no shell) and
// turns each line it prints on stdout into an event; its stderr goes to the log.
//
// Events: with `format: json` a line that is a JSON object is the event as it is; any other
// JSON value is wrapped as {"line": <value>}, and a line that is not JSON at all is kept as
// {"line": "<text>"} with a warning. With `format: text` every line is {"line": "<text>"}.
// Empty lines are skipped. Event id: "<flow>-exec-<run>-<line number>", `run` naming one
// start of the command, so a retried write of a line is stored once. Under a lease the
// header Weir-Fence carries the fencing token.
//
// Backpressure and guarantees: a line is read only while fewer than `window` writes await
// their PubAck; past that the pipe fills and the command blocks on its next write. A failed
// write is retried (same id) until it is stored or the source stops. A line longer than
// `max_line` bytes is an error in the log (with its number and length), counted, and
// dropped; the lines after it are delivered.
//
// Lifecycle: the command starts in start(), under a guard process that leads a process
// group of its own (ADR 0285); when it exits (or cannot be run) it is started again after a
// backoff that doubles from `restart_min` to `restart_max` and resets once a run lasted a
// minute. stop(): SIGTERM to the process group, SIGKILL after `stop_grace`, the guard
// reaped, then SIGKILL to whatever is left of the group (what the command started: a
// shell's background job); writes still in flight get a short grace. If weir dies without
// stopping (SIGKILL, a crash), the kernel tells the guard (PR_SET_PDEATHSIG), which kills
// the whole group. The command gets PATH, HOME, LANG and the variables its
// spec's `env:` names from weir's environment (nothing else), stdin from /dev/null,
// default signal dispositions and an empty signal mask.
//
// Threading: start/stop from the owner's thread; one thread per source ("exec-src") runs,
// reads and restarts the command and submits writes; publish callbacks (bus threads) only
// queue a completion and wake it, and may outlive the source.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flows/flow.h"
#include "runtime/ports/source.h"

namespace weir::connectors {

struct ExecSourceOptions {
  std::chrono::milliseconds publish_timeout{5000};
  std::chrono::milliseconds restart_min{1000};
  std::chrono::milliseconds restart_max{60000};
  std::chrono::milliseconds stop_grace{3000};
  size_t window = 256;
};

struct ExecSourceCounters {
  std::atomic<uint64_t> runs{0};       // times the command was started
  std::atomic<uint64_t> lines{0};      // stdout lines read (oversized included)
  std::atomic<uint64_t> published{0};  // events stored (PubAck ok)
  std::atomic<uint64_t> oversized{0};  // lines over max_line, dropped
  std::atomic<uint64_t> not_json{0};   // format json: lines kept as text
  std::atomic<uint64_t> retries{0};    // writes retried after a failure
};

class ExecSource final : public Source {
 public:
  // Validates the spec: a non-empty command whose program exists and is executable (looked
  // up in PATH when it has no '/'), format json|text, max_line >= 1.
  static Result<std::unique_ptr<ExecSource>> create(const flows::ExecSourceSpec& spec, ExecSourceOptions options = {});
  ~ExecSource() override;
  ExecSource(const ExecSource&) = delete;
  ExecSource& operator=(const ExecSource&) = delete;

  Status start(SourceContext& context) override;
  void stop() override;  // idempotent; the command is gone and no publish starts after it returns
  bool singleton() const override { return true; }
  const ExecSourceCounters& counters() const;

  struct Impl;

 private:
  explicit ExecSource(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

Result<std::unique_ptr<Source>> make_exec_source(const flows::ExecSourceSpec& spec, ExecSourceOptions options = {});

// The event body a stdout line becomes (exposed for tests); *was_json is false when format
// is json and the line is not JSON.
// `max_depth` bounds the stored event's nesting: a JSON payload that would
// make it deeper returns "" and sets *too_deep to the reason (the caller dead-letters it).
std::string exec_event_body(const std::string& line, bool json_format, bool* was_json, int max_depth = 128,
                            std::string* too_deep = nullptr);

// `program` as execve wants it: itself when it has a '/', else the first executable match
// in PATH. Empty when none.
std::string resolve_program(const std::string& program);

}  // namespace weir::connectors

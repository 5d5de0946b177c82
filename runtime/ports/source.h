// Source: the interface every input connector implements (http, mqtt, timer, poll, ...).
//
// A source turns outside events into `IngestEvent`s and hands them to `Ingest::publish`,
// which writes them to the flow's input stream in JetStream. `done` reports the PubAck:
// only after an ok may the source acknowledge upstream (answer 2xx, PUBACK, advance a
// cursor). Lifecycle: `start()` once with a context that outlives the source, `stop()`
// once; after stop returns no more publishes are made. Which thread calls what is the
// source's own business; `Ingest` is thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status.h"

namespace weir {

struct IngestEvent {
  std::string id;    // stable event id (idempotency key); empty = the runtime assigns one
  std::string body;  // JSON text
  std::vector<std::pair<std::string, std::string>> headers;  // extra metadata (e.g. Weir-Topic)
};

class Ingest {
 public:
  virtual ~Ingest() = default;
  // Writes one event; `done(status, id)` is called exactly once, on a bus thread, with ok
  // after the PubAck, unavailable when JetStream is down, timeout past `timeout`.
  virtual void publish(IngestEvent event, std::chrono::milliseconds timeout,
                       std::function<void(const Status&, const std::string& id)> done) = 0;
  virtual bool ready() const = 0;  // connected and the flow's stream exists
  // Writes an event that must not enter the flow (a broker source's payload nested deeper
  // than the limit, an MQTT message too big to store) to the dead-letter stream with
  // `reason`; `done` as for publish. Its body is kept as given: the payload as received,
  // or the mqtt source's stand-in for one it cannot keep (ADR 0291).
  // The default (test fakes) refuses. By value like publish(): implementations keep them.
  // NOLINTBEGIN(performance-unnecessary-value-param)
  virtual void reject(IngestEvent event, std::string reason, std::chrono::milliseconds /*timeout*/,
                      std::function<void(const Status&, const std::string& id)> done) {
    done(Status::internal("cannot dead-letter (" + reason + ")"), event.id);
  }
  // NOLINTEND(performance-unnecessary-value-param)
};

class HttpRouter;  // runtime/http/http_router.h: shared http-in routes

// SourceState (poll): small durable state for sources (a poll cursor, ETags), shared by
// every instance of a cluster, so a singleton's next lease holder resumes where the last
// one stopped. Implemented on the JetStream KV bucket `weir_state` (runtime/flow/state_store.h).
// Keys: [A-Za-z0-9_=/.-]+ without leading, trailing or double dots; a source prefixes its
// keys with its kind and flow. Reads see the latest write of any instance. A put is
// conditional on the revision this process last saw for the key (get or put; a key never
// read is only created when absent): when another instance wrote it since, put answers
// conflict and writes nothing, so a deposed holder cannot rewind its successor. A new
// owner reads before it writes. Thread-safe; calls block for at most a few seconds.
// docs/adr/0071-source-state.md.
class SourceState {
 public:
  virtual ~SourceState() = default;
  // nullopt when the key was never written (or was deleted).
  virtual Result<std::optional<std::string>> get(const std::string& key) = 0;
  virtual Status put(const std::string& key, const std::string& value) = 0;
};

struct SourceContext {
  std::string flow;
  Ingest* ingest = nullptr;
  HttpRouter* http = nullptr;  // for http sources
  // Set by cluster::Singleton for the source it runs: the lease's fencing token while the
  // lease is held, nullopt when it is not (then emit nothing). Empty outside a cluster.
  std::function<std::optional<uint64_t>()> fence;
  // Durable state for sources (poll); null when the runtime has none (tests, no NATS).
  SourceState* state = nullptr;
  // JSON nesting limit for what a source parses (http.max_depth).
  int max_depth = 128;
};

class Source {
 public:
  virtual ~Source() = default;
  virtual Status start(SourceContext& context) = 0;
  virtual void stop() = 0;
  // True for sources that must run on exactly one instance of a cluster (timer, poll, exec).
  virtual bool singleton() const { return false; }
};

}  // namespace weir

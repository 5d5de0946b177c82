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

#include "runtime/status.h"

namespace weir {

struct IngestEvent {
  std::string id;     // stable event id (idempotency key); empty = the runtime assigns one
  std::string body;   // JSON text
  std::vector<std::pair<std::string, std::string>> headers;  // extra metadata (e.g. Weir-Topic)
};

class Ingest {
 public:
  virtual ~Ingest() = default;
  // Writes one event; `done(status, id)` is called exactly once, on a bus thread, with ok
  // after the PubAck, unavailable when JetStream is down, timeout past `timeout`.
  virtual void publish(IngestEvent event, std::chrono::milliseconds timeout,
                       std::function<void(const Status&, const std::string& id)> done) = 0;
  virtual bool ready() const = 0;   // connected and the flow's stream exists
};

class HttpRouter;   // runtime/ingress_router.h: shared http-in routes

struct SourceContext {
  std::string flow;
  Ingest* ingest = nullptr;
  HttpRouter* http = nullptr;       // for http sources
  // Set by cluster::Singleton for the source it runs: the lease's fencing token while the
  // lease is held, nullopt when it is not (then emit nothing). Empty outside a cluster.
  std::function<std::optional<uint64_t>()> fence;
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

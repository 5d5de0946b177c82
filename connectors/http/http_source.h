// HttpSource: the `http` source (http-in). Registers the flow's path in the shared
// HttpRouter; each POST is checked (signature or bearer token), validated as JSON,
// written to JetStream, and answered 202 only after the PubAck (docs/admin-api.md,
// Ingress answers).
//
// Threading: the handler runs on the io thread and never blocks: the answer is sent
// from the bus callback. Secrets are read from the environment once, at start.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "flows/flow.h"
#include "runtime/ports/source.h"

namespace weir::connectors {

struct HttpSourceOptions {
  std::chrono::milliseconds ack_timeout{5000};  // PubAck wait before answering 503
  int retry_after_seconds = 1;
  int max_depth = 128;  // JSON nesting limit (http.max_depth)
};

std::unique_ptr<Source> make_http_source(const flows::HttpSourceSpec& spec, HttpSourceOptions options);

}  // namespace weir::connectors

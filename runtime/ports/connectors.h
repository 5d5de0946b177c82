// ConnectorFactory: how the runtime turns validated flow specs into sources and sinks.
// The built-ins are registered explicitly in connectors/registry.cc (no static
// self-registration); the runtime depends only on this interface.
#pragma once

#include <memory>

#include "flows/flow.h"
#include "runtime/base/config.h"
#include "runtime/ports/sink.h"
#include "runtime/ports/source.h"

namespace weir {

class ConnectorFactory {
 public:
  virtual ~ConnectorFactory() = default;
  virtual Result<std::unique_ptr<Source>> make_source(const flows::Flow& flow, const RuntimeConfig& config) = 0;
  virtual Result<std::unique_ptr<Sink>> make_sink(const flows::Flow& flow, const flows::SinkSpec& sink,
                                                  const RuntimeConfig& config) = 0;
};

}  // namespace weir

// The built-in connectors, wired explicitly: one place that maps each spec kind of
// flows/flow.h to its implementation. A kind without an implementation yet is a clear
// start-up error naming the flow and the kind.
#pragma once

#include "runtime/ports/connectors.h"

namespace weir::connectors {

class BuiltinConnectors final : public ConnectorFactory {
 public:
  Result<std::unique_ptr<Source>> make_source(const flows::Flow& flow, const RuntimeConfig& config) override;
  Result<std::unique_ptr<Sink>> make_sink(const flows::Flow& flow, const flows::SinkSpec& sink,
                                          const RuntimeConfig& config) override;
};

}  // namespace weir::connectors

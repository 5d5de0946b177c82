// Cross-flow checks: what must hold between the flows one process runs, apart from each
// flow file on its own (flows/ checks that). Pure functions over compiled flows — no NATS,
// no files, no threads — used at start (check_flow_set) and before a flow joins the
// running ones (check_new_flow: a deploy, a flow the cluster registry activates).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "flows/flow.h"
#include "runtime/base/status.h"

namespace weir {

using FlowList = std::vector<std::shared_ptr<const flows::Flow>>;

// The flows of a flows dir, in file order: unique names, unique http-in paths, and each
// chained source (`from: {flow: other.sink}`) reads a `flow` sink of a flow in the set
// (when that flow is in it) that no other flow reads. `kept` (optional) receives the
// flows left once a second flow of a name or path is dropped. invalid, one line
// "file: key: why" per problem, or ok.
Status check_flow_set(const FlowList& flows, FlowList* kept = nullptr);

// Whether `flow`, not running yet, can start beside `running`: its http path is free
// (else conflict), and a chained source reads a running flow's `flow` sink (else invalid)
// that no running flow reads (else conflict).
Status check_new_flow(const flows::Flow& flow, const FlowList& running);

}  // namespace weir

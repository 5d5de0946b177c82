// The ready banner for a person at a terminal: where weir listens and where to POST. Only
// with text logs (with JSON logs the "weir ready" line says the same). Lifecycle thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace weir {

// `routes`: http-in paths and the flow each feeds.
void print_ready_banner(const std::string& ingress, const std::string& admin, const std::string& nats,
                        const std::vector<std::pair<std::string, std::string>>& routes);

}  // namespace weir

#include "runtime/banner.h"

#include <cstdio>

namespace weir {

void print_ready_banner(const std::string& ingress, const std::string& admin, const std::string& nats,
                        const std::vector<std::pair<std::string, std::string>>& routes) {
  std::printf("weir ready — ingress http://%s  admin http://%s  nats %s\n", ingress.c_str(), admin.c_str(),
              nats.c_str());
  for (const auto& [path, flow] : routes) {
    std::printf("  POST http://%s%s  → flow %s\n", ingress.c_str(), path.c_str(), flow.c_str());
  }
}

}  // namespace weir

// wall_ms(): milliseconds since the Unix epoch, from the system clock — for stamps that
// leave the process (event ids, audit records, event bodies). Never for measuring a
// duration: the system clock may step; std::chrono::steady_clock measures. Header-only,
// any thread. The one copy for runtime/, connectors/ and cluster/ (flows/, the leaf, keeps
// its own in flows/tables.cc).
#pragma once

#include <chrono>
#include <cstdint>

namespace weir {

inline int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace weir

#pragma once
// Storage another process only borrows: Bus::plan_stream_sizes learns what it may reserve
// by creating a probe stream as big as the server accepts, for a round trip or two.
// Creations that find no room meanwhile (this process's state bucket, another instance's
// streams, buckets and probe) wait a little and try again before "no storage" counts: for
// kBorrowedStorageGrace, 50-250 ms apart (the jitter keeps two instances' probes from
// meeting again). docs/adr/0110-startup-on-any-nats.md.

#include <chrono>
#include <cstdint>
#include <random>
#include <thread>

namespace weir {

inline constexpr auto kBorrowedStorageGrace = std::chrono::seconds(3);

inline void borrowed_storage_pause() {
  static thread_local std::minstd_rand rng(
      static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count() ^
                            static_cast<int64_t>(std::hash<std::thread::id>{}(std::this_thread::get_id()))));
  std::this_thread::sleep_for(std::chrono::milliseconds(50 + rng() % 201));
}

}  // namespace weir

// FaultProxy: a TCP proxy on 127.0.0.1:<free port> in front of a nats-server that, once
// told to, cuts connections at random byte offsets of the server→client stream — the
// fault behind docs/adr/0286-body-checksums.md and docs/adr/0287-rebuilt-loop-connections.md
// (a message half read when its connection dropped).
//
// Contract:
// - Every accepted connection is forwarded to 127.0.0.1:<target_port>, bytes unchanged, in
//   both directions, until either side closes (then the other side gets what was already
//   read, and is closed).
// - start_cutting(n, max_offset): every connection open then, and every one accepted later,
//   draws a cut offset k, uniform in [1, max_offset], counted from that moment (open ones)
//   or from its first byte (new ones). When k bytes of the server→client stream have been
//   read from the server, exactly those k bytes are forwarded to the client, the server's
//   side is closed at once and the client's is shut down for writing after them (a FIN, so
//   the client gets all k bytes and then end of stream); what the client still sends is
//   read and dropped until it closes (at most 2 s). A connection is cut once; the
//   connection the client opens next draws its own offset. After n cuts (of this call),
//   or stop_cutting(), no connection is cut any more.
// - Offsets come from a std::mt19937_64 with a printed seed: `FaultProxy(port, seed)` or
//   WEIR_FAULT_SEED in the environment replays the same sequence of offsets (which
//   connection draws which one still depends on timing).
// - Each cut is classified by where it fell in the NATS protocol stream the server sent
//   (a small tracker follows it, using the sizes in MSG/HMSG lines): between two protocol
//   elements, inside another protocol line (INFO, PING, PONG, +OK, -ERR), inside a MSG/HMSG
//   control line, inside an HMSG header block, inside a message's payload, or inside the
//   CRLF after a payload.
// - Threads: one pump thread (poll() over non-blocking sockets, a bounded buffer per
//   direction and connection: no thread per connection, no blocking send). Public
//   members are thread-safe. The destructor stops the thread and closes every socket.
// - Tests only: errors in the constructor throw std::runtime_error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace weir::testing {

// What a FaultProxy did so far (cumulative over start_cutting calls).
struct FaultProxyCounts {
  int64_t accepted = 0;                // connections accepted
  int64_t cuts = 0;                    // the sum of the six classes below
  int64_t between = 0;                 // at a boundary between two protocol elements
  int64_t protocol_line = 0;           // inside INFO / PING / PONG / +OK / -ERR
  int64_t control_line = 0;            // inside a MSG or HMSG line
  int64_t header = 0;                  // inside an HMSG header block (after its control line)
  int64_t payload = 0;                 // inside a message's payload (after its control line and headers)
  int64_t trailer = 0;                 // inside the CRLF that ends a message
  int64_t server_to_client_bytes = 0;  // forwarded to clients
  int64_t client_to_server_bytes = 0;  // forwarded to the server

  // "cuts 200 (between 3, protocol line 1, control line 9, header 4, payload 181, trailer 2), ..."
  std::string describe() const;
};

class FaultProxy {
 public:
  // Listens on 127.0.0.1:0 and forwards to 127.0.0.1:target_port. seed 0: WEIR_FAULT_SEED
  // when set, otherwise a random one. Prints the listening port and the seed to stdout.
  explicit FaultProxy(int target_port, uint64_t seed = 0);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  int port() const;
  std::string url() const;  // nats://127.0.0.1:<port>
  uint64_t seed() const;

  // Arms every open connection and every new one (see the contract); stops after n cuts.
  void start_cutting(int n, int64_t max_offset);
  // Disarms every connection; no further cut until start_cutting again.
  void stop_cutting();
  FaultProxyCounts counts() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::testing

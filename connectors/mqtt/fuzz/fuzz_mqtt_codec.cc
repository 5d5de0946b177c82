// libFuzzer target: the MQTT 3.1.1 decoder of the mqtt source (connectors/mqtt/mqtt_codec.cc),
// which reads whatever a broker (or anything listening where the broker should be) sends.
// Input: byte 0 picks max_payload (0 to 255 bytes), byte 1 seeds the chunk sizes, the rest
// is the byte stream from the broker.
// Invariants beyond "no crash, no sanitizer report":
//   - the stream fed whole and fed in chunks (1 to 64 bytes, as reads may cut it) yields
//     the same packets and the same error, after the same packets;
//   - a payload kept is at most max_payload; an oversized PUBLISH keeps none and says how
//     big it was (over max_payload);
//   - a PUBLISH decoded, encoded again (encode_publish) and decoded is the same packet.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "connectors/mqtt/mqtt_codec.h"

namespace {

using weir::connectors::mqtt::Decoder;
using weir::connectors::mqtt::Packet;
using weir::connectors::mqtt::PacketType;

struct Outcome {
  std::vector<Packet> packets;
  bool failed = false;
};

// Drains every whole packet the decoder has; false after an error.
bool drain(Decoder& d, Outcome& out) {
  for (;;) {
    auto r = d.next();
    if (!r) {
      out.failed = true;
      return false;
    }
    if (!r.value()) return true;
    out.packets.push_back(std::move(*r.value()));
  }
}

bool same(const Packet& a, const Packet& b) {
  return a.type == b.type && a.flags == b.flags && a.session_present == b.session_present &&
         a.return_code == b.return_code && a.packet_id == b.packet_id && a.topic == b.topic && a.payload == b.payload &&
         a.qos == b.qos && a.dup == b.dup && a.retain == b.retain && a.oversized == b.oversized &&
         a.payload_size == b.payload_size && a.granted == b.granted;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t max_payload = data[0];
  uint32_t seed = data[1];
  std::string_view stream(reinterpret_cast<const char*>(data + 2), size - 2);

  Outcome whole;
  {
    Decoder d(max_payload);
    d.feed(stream.data(), stream.size());
    drain(d, whole);
  }

  Outcome chunked;
  {
    Decoder d(max_payload);
    size_t at = 0;
    while (at < stream.size()) {
      seed = seed * 1103515245u + 12345u;
      const size_t n = std::min<size_t>(1 + (seed >> 16) % 64, stream.size() - at);
      d.feed(stream.data() + at, n);
      at += n;
      if (!drain(d, chunked)) break;
    }
  }

  if (whole.failed != chunked.failed) std::abort();
  if (whole.packets.size() != chunked.packets.size()) std::abort();
  for (size_t i = 0; i < whole.packets.size(); ++i) {
    const Packet& p = whole.packets[i];
    if (!same(p, chunked.packets[i])) std::abort();
    if (p.type != PacketType::kPublish) continue;
    if (p.qos < 0 || p.qos > 2) std::abort();
    if (p.oversized) {
      if (!p.payload.empty() || p.payload_size <= max_payload) std::abort();
      continue;
    }
    if (p.payload.size() > max_payload || p.payload.size() != p.payload_size) std::abort();
    // Round trip: what the codec decoded, it encodes to bytes it decodes the same.
    const std::string again = weir::connectors::mqtt::encode_publish(p.topic, p.payload, p.qos, p.retain, p.dup,
                                                                     p.packet_id);
    Decoder d(max_payload);
    d.feed(again.data(), again.size());
    auto r = d.next();
    if (!r || !r.value() || !same(*r.value(), p) || d.buffered() != 0) std::abort();
  }
  return 0;
}

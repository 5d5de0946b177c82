// MQTT 3.1.1 packet encoding and an incremental decoder: the wire format only, no I/O.
//
// Used by the mqtt source's own subscriber session (docs/adr/0060-mqtt-source-session.md),
// which must decide itself when a QoS 1 PUBACK is sent. Pure functions and one value type
// (Decoder) that a single thread owns; nothing here is shared between threads.
//
// The decoder takes bytes as they arrive and yields whole packets. A PUBLISH whose
// payload is over `max_payload` is not buffered: once its topic and packet id are known
// it is yielded with `oversized = true` and `payload_size`, and its remaining bytes are
// skipped as they arrive, so a huge message costs no memory and can still be acknowledged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/base/status.h"

namespace weir::connectors::mqtt {

enum class PacketType : uint8_t {
  kConnect = 1,
  kConnack = 2,
  kPublish = 3,
  kPuback = 4,
  kPubrec = 5,
  kPubrel = 6,
  kPubcomp = 7,
  kSubscribe = 8,
  kSuback = 9,
  kUnsubscribe = 10,
  kUnsuback = 11,
  kPingreq = 12,
  kPingresp = 13,
  kDisconnect = 14,
};

// Largest remaining length the protocol can express (4 varint bytes).
inline constexpr size_t kMaxRemainingLength = 268'435'455;

struct ConnectFields {
  std::string client_id;
  bool clean_session = true;
  uint16_t keep_alive_s = 30;
  std::optional<std::string> username;
  std::optional<std::string> password;
};

std::string encode_connect(const ConnectFields& fields);
// `filters`: (topic filter, requested QoS 0..2). packet_id must not be 0.
std::string encode_subscribe(uint16_t packet_id, const std::vector<std::pair<std::string, int>>& filters);
std::string encode_publish(std::string_view topic, std::string_view payload, int qos, bool retain, bool dup,
                           uint16_t packet_id);
std::string encode_puback(uint16_t packet_id);
std::string encode_pingreq();
std::string encode_disconnect();

// True when s is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool valid_utf8(std::string_view s);

// Text for a CONNACK return code, e.g. "bad user name or password".
std::string connack_reason(uint8_t code);

struct Packet {
  PacketType type = PacketType::kDisconnect;
  uint8_t flags = 0;  // low nibble of the first byte
  // CONNACK
  bool session_present = false;
  uint8_t return_code = 0;
  // PUBLISH, PUBACK, SUBACK
  uint16_t packet_id = 0;
  // PUBLISH
  std::string topic;
  std::string payload;
  int qos = 0;
  bool dup = false;
  bool retain = false;
  bool oversized = false;  // payload not kept (over max_payload); payload_size says how big
  size_t payload_size = 0;
  // SUBACK: one granted QoS (0..2) or 0x80 (failure) per filter
  std::vector<uint8_t> granted;
};

class Decoder {
 public:
  explicit Decoder(size_t max_payload) : max_payload_(max_payload) {}

  void feed(const char* data, size_t size);
  // The next whole packet; nullopt when more bytes are needed. An error (malformed
  // packet) leaves the decoder unusable: the connection must be dropped.
  Result<std::optional<Packet>> next();
  void reset();  // for a new connection
  size_t buffered() const { return buffer_.size() - read_; }

 private:
  std::string buffer_;
  size_t read_ = 0;
  size_t skip_ = 0;  // bytes of an oversized PUBLISH still to discard
  size_t max_payload_;
  bool failed_ = false;
};

}  // namespace weir::connectors::mqtt

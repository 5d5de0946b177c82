#include "connectors/mqtt/mqtt_codec.h"

#include <algorithm>

namespace weir::connectors::mqtt {
namespace {

// A PUBLISH's variable header is at most a 2-byte length, a 65,535-byte topic and a packet
// id; a remaining length above max_payload plus this can only be an oversized message.
constexpr size_t kMaxPublishOverhead = 2 + 65535 + 2;
// Every other packet the server sends is tiny; this bounds a malformed length.
constexpr size_t kMaxControlPacket = 64 * 1024;

void put_u16(std::string& out, uint16_t v) {
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v & 0xff));
}

void put_string(std::string& out, std::string_view s) {
  put_u16(out, static_cast<uint16_t>(s.size()));
  out.append(s);
}

void put_remaining_length(std::string& out, size_t n) {
  do {
    uint8_t b = n % 128;
    n /= 128;
    if (n > 0) b |= 0x80;
    out.push_back(static_cast<char>(b));
  } while (n > 0);
}

std::string frame(uint8_t first, const std::string& body) {
  std::string out;
  out.reserve(body.size() + 5);
  out.push_back(static_cast<char>(first));
  put_remaining_length(out, body.size());
  out += body;
  return out;
}

uint16_t get_u16(const char* p) {
  return static_cast<uint16_t>((static_cast<uint8_t>(p[0]) << 8) | static_cast<uint8_t>(p[1]));
}

}  // namespace

std::string encode_connect(const ConnectFields& f) {
  std::string body;
  put_string(body, "MQTT");
  body.push_back(4);  // protocol level 3.1.1
  uint8_t flags = 0;
  if (f.clean_session) flags |= 0x02;
  if (f.username) flags |= 0x80;
  if (f.password) flags |= 0x40;
  body.push_back(static_cast<char>(flags));
  put_u16(body, f.keep_alive_s);
  put_string(body, f.client_id);
  if (f.username) put_string(body, *f.username);
  if (f.password) put_string(body, *f.password);
  return frame(0x10, body);
}

std::string encode_subscribe(uint16_t packet_id, const std::vector<std::pair<std::string, int>>& filters) {
  std::string body;
  put_u16(body, packet_id);
  for (const auto& [filter, qos] : filters) {
    put_string(body, filter);
    body.push_back(static_cast<char>(qos & 3));
  }
  return frame(0x82, body);
}

std::string encode_publish(std::string_view topic, std::string_view payload, int qos, bool retain, bool dup,
                           uint16_t packet_id) {
  std::string body;
  put_string(body, topic);
  if (qos > 0) put_u16(body, packet_id);
  body.append(payload);
  uint8_t first = 0x30 | static_cast<uint8_t>((qos & 3) << 1);
  if (retain) first |= 0x01;
  if (dup) first |= 0x08;
  return frame(first, body);
}

std::string encode_puback(uint16_t packet_id) {
  std::string out = {static_cast<char>(0x40), 0x02};
  put_u16(out, packet_id);
  return out;
}

std::string encode_pingreq() { return std::string{static_cast<char>(0xc0), 0x00}; }
std::string encode_disconnect() { return std::string{static_cast<char>(0xe0), 0x00}; }

std::string connack_reason(uint8_t code) {
  switch (code) {
    case 0: return "accepted";
    case 1: return "unacceptable protocol version (the broker does not speak MQTT 3.1.1)";
    case 2: return "client identifier rejected";
    case 3: return "server unavailable";
    case 4: return "bad user name or password";
    case 5: return "not authorized";
    default: return "unknown return code " + std::to_string(code);
  }
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // the sequence runs past the end
    for (size_t k = 1; k <= n; ++k) {
      unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

void Decoder::feed(const char* data, size_t size) {
  if (skip_ > 0) {
    size_t n = std::min(skip_, size);
    skip_ -= n;
    data += n;
    size -= n;
  }
  if (size == 0) return;
  // Compact before growing so the buffer holds about one packet, not the whole stream.
  if (read_ > 0 && read_ == buffer_.size()) {
    buffer_.clear();
    read_ = 0;
  } else if (read_ > 64 * 1024 && read_ * 2 > buffer_.size()) {
    buffer_.erase(0, read_);
    read_ = 0;
  }
  buffer_.append(data, size);
}

void Decoder::reset() {
  buffer_.clear();
  read_ = 0;
  skip_ = 0;
  failed_ = false;
}

Result<std::optional<Packet>> Decoder::next() {
  auto fail = [this](const std::string& why) -> Result<std::optional<Packet>> {
    failed_ = true;
    return Status::invalid("malformed MQTT packet: " + why);
  };
  if (failed_) return Status::invalid("malformed MQTT packet earlier on this connection");
  if (skip_ > 0) return std::optional<Packet>{};
  const size_t avail = buffer_.size() - read_;
  if (avail < 2) return std::optional<Packet>{};
  const char* p = buffer_.data() + read_;
  const uint8_t first = static_cast<uint8_t>(p[0]);
  size_t remaining = 0;
  size_t multiplier = 1;
  size_t header = 1;
  for (;;) {
    if (header >= avail) return std::optional<Packet>{};
    uint8_t b = static_cast<uint8_t>(p[header]);
    remaining += (b & 0x7f) * multiplier;
    ++header;
    if ((b & 0x80) == 0) break;
    if (header == 5) return fail("remaining length longer than 4 bytes");
    multiplier *= 128;
  }
  const uint8_t type_bits = first >> 4;
  if (type_bits == 0 || type_bits == 15) return fail("reserved packet type " + std::to_string(type_bits));
  Packet pk;
  pk.type = static_cast<PacketType>(type_bits);
  pk.flags = first & 0x0f;
  const size_t total = header + remaining;

  if (pk.type != PacketType::kPublish) {
    if (remaining > kMaxControlPacket) return fail("control packet of " + std::to_string(remaining) + " bytes");
    if (avail < total) return std::optional<Packet>{};
    const char* b = p + header;
    switch (pk.type) {
      case PacketType::kConnack:
        if (remaining != 2) return fail("CONNACK of length " + std::to_string(remaining));
        pk.session_present = (static_cast<uint8_t>(b[0]) & 0x01) != 0;
        pk.return_code = static_cast<uint8_t>(b[1]);
        break;
      case PacketType::kPuback:
      case PacketType::kPubrec:
      case PacketType::kPubrel:
      case PacketType::kPubcomp:
      case PacketType::kUnsuback:
        if (remaining != 2) return fail("acknowledgement of length " + std::to_string(remaining));
        pk.packet_id = get_u16(b);
        break;
      case PacketType::kSuback:
        if (remaining < 3) return fail("SUBACK of length " + std::to_string(remaining));
        pk.packet_id = get_u16(b);
        pk.granted.assign(reinterpret_cast<const uint8_t*>(b + 2), reinterpret_cast<const uint8_t*>(b + remaining));
        break;
      case PacketType::kPingreq:
      case PacketType::kPingresp:
      case PacketType::kDisconnect:
        if (remaining != 0) return fail("PING/DISCONNECT with a body");
        break;
      default: break;  // CONNECT, SUBSCRIBE, UNSUBSCRIBE: passed up as they are; the session rejects them
    }
    read_ += total;
    return std::optional<Packet>(std::move(pk));
  }

  // PUBLISH
  pk.qos = (pk.flags >> 1) & 0x03;
  pk.dup = (pk.flags & 0x08) != 0;
  pk.retain = (pk.flags & 0x01) != 0;
  if (pk.qos == 3) return fail("PUBLISH with QoS 3");
  const size_t id_len = pk.qos > 0 ? 2 : 0;
  const bool huge = remaining > max_payload_ + kMaxPublishOverhead;
  if (!huge && avail < total) return std::optional<Packet>{};
  // Variable header: the topic and (QoS > 0) the packet id.
  if (remaining < 2) return fail("PUBLISH without a topic");
  if (avail < header + 2) return std::optional<Packet>{};
  const size_t topic_len = get_u16(p + header);
  const size_t var_len = 2 + topic_len + id_len;
  if (var_len > remaining) return fail("PUBLISH topic longer than the packet");
  if (avail < header + var_len) return std::optional<Packet>{};
  pk.topic.assign(p + header + 2, topic_len);
  if (pk.qos > 0) {
    pk.packet_id = get_u16(p + header + 2 + topic_len);
    if (pk.packet_id == 0) return fail("PUBLISH with packet id 0");
  }
  pk.payload_size = remaining - var_len;
  if (huge) {
    // Yield what is known and discard the rest as it arrives.
    pk.oversized = true;
    const size_t have = std::min(avail, total);
    read_ += have;
    skip_ = total - have;
    return std::optional<Packet>(std::move(pk));
  }
  if (pk.payload_size > max_payload_) {
    pk.oversized = true;
  } else {
    pk.payload.assign(p + header + var_len, pk.payload_size);
  }
  read_ += total;
  return std::optional<Packet>(std::move(pk));
}

}  // namespace weir::connectors::mqtt

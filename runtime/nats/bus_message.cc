// BusMessage: one JetStream message handed to a stage, with its ack, nak and metadata.
#include <nats/nats.h>

#include <cstdlib>
#include <cstring>

#include "runtime/base/log.h"
#include "runtime/loop/io_loop.h"
#include "runtime/nats/bus.h"
#include "runtime/nats/delivery_ledger.h"
#include "runtime/nats/nats_loop.h"
#include "runtime/nats/nats_msg.h"
#include "runtime/nats/nats_status.h"

namespace weir {

BusMessage::~BusMessage() { free_nats_msg(msg_); }

std::string_view BusMessage::data() const {
  return {natsMsg_GetData(msg_), static_cast<size_t>(natsMsg_GetDataLength(msg_))};
}
std::string_view BusMessage::subject() const { return natsMsg_GetSubject(msg_); }
std::string_view BusMessage::header(const char* name) const {
  const char* v = nullptr;
  if (natsMsgHeader_Get(msg_, name, &v) != NATS_OK || v == nullptr) return {};
  return v;
}
// The reply subject of a JetStream delivery: $JS.ACK.<stream>.<consumer>.<delivered>.
// <stream seq>.<consumer seq>.<time>.<pending> (v1), or with <domain>.<account hash>
// before the stream and a random token after pending (v2, newer servers).
void BusMessage::load_meta() const {
  if (meta_loaded_) return;
  meta_loaded_ = true;
  const char* r = natsMsg_GetReply(msg_);
  if (r == nullptr) return;
  std::string_view reply(r);
  constexpr std::string_view kPrefix = "$JS.ACK.";
  if (reply.substr(0, kPrefix.size()) != kPrefix) return;
  reply.remove_prefix(kPrefix.size());
  std::string_view tokens[12];
  size_t n = 0;
  while (n < 12) {
    size_t dot = reply.find('.');
    tokens[n++] = reply.substr(0, dot);
    if (dot == std::string_view::npos) break;
    reply.remove_prefix(dot + 1);
  }
  size_t at = n == 7 ? 2 : n >= 9 ? 4 : 12;  // index of <delivered>
  if (at + 4 >= n) return;
  auto number = [](std::string_view t) {
    uint64_t v = 0;
    for (char c : t) {
      if (c < '0' || c > '9') return v;
      v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    return v;
  };
  deliveries_ = number(tokens[at]);
  sequence_ = number(tokens[at + 1]);
  stored_ns_ = number(tokens[at + 3]);
  pending_ = number(tokens[at + 4]);
}
uint64_t BusMessage::stored_ns() const {
  load_meta();
  return stored_ns_;
}
uint64_t BusMessage::deliveries() const {
  load_meta();
  return deliveries_ > uncounted_ ? deliveries_ - uncounted_ : 1;
}
uint64_t BusMessage::stream_sequence() const {
  load_meta();
  return sequence_;
}
uint64_t BusMessage::pending() const {
  load_meta();
  return pending_;
}
// Acks are fire-and-forget: a lost ack means a redelivery, which the next hop's
// Nats-Msg-Id deduplicates (docs/adr/0002-bus-layout.md).
bool BusMessage::reply(const char* body) {
  const char* r = natsMsg_GetReply(msg_);
  if (r == nullptr || *r == '\0') return false;
  return natsConnection_PublishString(nc_, r, body) == NATS_OK;
}
bool BusMessage::ack(std::atomic<uint64_t>* failed_later) {
  if (ledger_) ledger_->forget(stream_sequence());
  if (held_by_ != nullptr && held_by_->in_loop_thread()) {
    const char* r = natsMsg_GetReply(msg_);
    if (r == nullptr || *r == '\0') return false;
    if (held_by_->hold_ack(r, failed_later)) return true;
  }
  return reply("+ACK");
}
bool BusMessage::nak(std::chrono::milliseconds delay) {
  if (delay.count() <= 0) return reply("-NAK");
  char body[64];
  std::snprintf(body, sizeof body, "-NAK {\"delay\":%lld}",
                static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(delay).count()));
  return reply(body);
}
bool BusMessage::in_progress() { return reply("+WPI"); }
bool BusMessage::term() {
  if (ledger_) ledger_->forget(stream_sequence());
  return reply("+TERM");
}

}  // namespace weir

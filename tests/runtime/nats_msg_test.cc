// free_nats_msg (runtime/nats/nats_msg.h): cnats messages freed on the calling thread instead
// of by cnats' collector thread (docs/adr/0257-free-nats-messages-inline.md). The layout
// assumption is what these pin: if a cnats upgrade moves the free callback, they fail here
// (and weir falls back to natsMsg_Destroy's usual path) instead of corrupting memory.
#include <catch2/catch.hpp>

#include <nats/nats.h>

#include <string>

#include "runtime/nats/nats_msg.h"
#include "tests/support/support.h"

using namespace weir;
using namespace weir::testing;

TEST_CASE("free_nats_msg frees a message weir created on the calling thread", "[nats_msg]") {
  natsMsg* m = nullptr;
  REQUIRE(natsMsg_Create(&m, "a.b", "reply", "data", 4) == NATS_OK);
  REQUIRE(natsMsgHeader_Set(m, "Nats-Msg-Id", "x") == NATS_OK);  // headers are freed with it
  CHECK(free_nats_msg(m));
  CHECK_FALSE(free_nats_msg(nullptr));
}

TEST_CASE("free_nats_msg frees a message cnats received on the calling thread", "[nats_msg]") {
  NatsServer nats;
  natsConnection* nc = nullptr;
  REQUIRE(natsConnection_ConnectTo(&nc, nats.url().c_str()) == NATS_OK);
  natsSubscription* sub = nullptr;
  REQUIRE(natsConnection_SubscribeSync(&sub, nc, "nats-msg-test") == NATS_OK);
  natsMsg* out = nullptr;
  REQUIRE(natsMsg_Create(&out, "nats-msg-test", nullptr, "payload", 7) == NATS_OK);
  REQUIRE(natsMsgHeader_Set(out, "K", "v") == NATS_OK);
  REQUIRE(natsConnection_PublishMsg(nc, out) == NATS_OK);
  CHECK(free_nats_msg(out));
  natsMsg* in = nullptr;
  REQUIRE(natsSubscription_NextMsg(&in, sub, 5000) == NATS_OK);
  CHECK(std::string(natsMsg_GetData(in), natsMsg_GetDataLength(in)) == "payload");
  const char* v = nullptr;
  REQUIRE(natsMsgHeader_Get(in, "K", &v) == NATS_OK);
  CHECK(std::string(v) == "v");
  CHECK(free_nats_msg(in));
  natsSubscription_Destroy(sub);
  natsConnection_Destroy(nc);
}

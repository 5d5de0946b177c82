// Body checksums (runtime/base/crc32c.h, runtime/nats/body_sum.h; docs/adr/0286-body-checksums.md):
// the CRC-32C itself, the Weir-Sum header a publish carries and how a received message is
// judged, and the delivery count a refused copy leaves uncounted.
#include <catch2/catch.hpp>

#include <nats/nats.h>

#include <random>
#include <string>

#include "runtime/base/crc32c.h"
#include "runtime/nats/body_sum.h"
#include "runtime/nats/bus.h"
#include "runtime/nats/nats_msg.h"

using namespace weir;

namespace {

natsMsg* plain_msg(const std::string& body, const char* reply = nullptr) {
  natsMsg* m = nullptr;
  REQUIRE(natsMsg_Create(&m, "weir.x.in", reply, body.data(), static_cast<int>(body.size())) == NATS_OK);
  return m;
}

}  // namespace

TEST_CASE("crc32c: the standard check value, the CPU's instruction agrees with Boost.CRC, hex both ways",
          "[body_sum]") {
  CHECK(crc32c("123456789") == 0xE3069283u);
  CHECK(crc32c_portable("123456789") == 0xE3069283u);
  CHECK(crc32c("") == 0u);
  std::mt19937 rng(7);
  for (size_t n : {1, 3, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 4096, 65537}) {
    std::string s(n, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    INFO(n);
    CHECK(crc32c(s) == crc32c_portable(s));
  }
  CHECK(crc32c_hex("123456789") == "e3069283");
  uint32_t v = 0;
  CHECK(parse_crc32c_hex("E3069283", &v));
  CHECK(v == 0xE3069283u);
  CHECK_FALSE(parse_crc32c_hex("e306928", &v));
  CHECK_FALSE(parse_crc32c_hex("e306928g", &v));
  CHECK_FALSE(parse_crc32c_hex("e30692830", &v));
}

TEST_CASE("body sum: a stamped message is intact, a changed body or a bad value is broken, none is absent",
          "[body_sum]") {
  const std::string body = R"({"order":42,"items":[1,2,3]})";
  natsMsg* stamped = nullptr;
  REQUIRE(make_stamped_msg(&stamped, "weir.x.in", nullptr, body, {{layout::kHeaderId, "e1"}}) == NATS_OK);
  const char* id = nullptr;
  REQUIRE(natsMsgHeader_Get(stamped, layout::kHeaderId, &id) == NATS_OK);
  CHECK(std::string(id) == "e1");
  CHECK(check_body_sum(stamped) == BodySum::kIntact);
  free_nats_msg(stamped);

  // The header of one body on another: what a message completed with the next
  // connection's bytes looks like.
  natsMsg* hybrid = plain_msg(body.substr(0, 10) + "PONG\r\nHMSG weir.x.in 3 $JS.ACK.x");
  REQUIRE(natsMsgHeader_Set(hybrid, layout::kHeaderSum, crc32c_hex(body).c_str()) == NATS_OK);
  CHECK(check_body_sum(hybrid) == BodySum::kBroken);
  free_nats_msg(hybrid);

  natsMsg* garbled = plain_msg(body);
  REQUIRE(natsMsgHeader_Set(garbled, layout::kHeaderSum, "PONG") == NATS_OK);
  CHECK(check_body_sum(garbled) == BodySum::kBroken);
  free_nats_msg(garbled);

  natsMsg* none = plain_msg(body);
  CHECK(check_body_sum(none) == BodySum::kAbsent);
  REQUIRE(natsMsgHeader_Set(none, layout::kHeaderId, "e2") == NATS_OK);
  CHECK(check_body_sum(none) == BodySum::kAbsent);
  free_nats_msg(none);
}

TEST_CASE("body sum: redeliveries a consumer caused by refusing copies are not counted", "[body_sum]") {
  // $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>
  BusMessage m(plain_msg("{}", "$JS.ACK.s.c.3.10.12.1700000000.0"), nullptr);
  CHECK(m.deliveries() == 3);
  CHECK(m.stream_sequence() == 10);
  m.set_uncounted(2);
  CHECK(m.deliveries() == 1);
  m.set_uncounted(7);  // more than JetStream counted: still the delivery in hand
  CHECK(m.deliveries() == 1);
}

// Pass-through: a flow without steps delivers the body bytes it stored,
// unchanged; a flow with steps delivers its result as compact JSON.
#include <catch2/catch.hpp>

#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

// The raw body weir-sink recorded for the event whose "id" is `id`; "" when none.
std::string raw_body(const SinkProcess& sink, const std::string& id) {
  for (const auto& r : sink.requests(100)) {
    if (body_of(r).value("id", "") == id) return r.at("body").get<std::string>();
  }
  return "";
}

}  // namespace

TEST_CASE("a flow without steps delivers the stored bytes unchanged, one with steps compact JSON",
          "[integration][delivery]") {
  NatsServer nats;
  SinkProcess sink({"--record", "100"});
  std::string with_steps =
      "flow: shaped\nfrom: { http: { path: /in/shaped } }\nsteps:\n  - set: { seen: true }\n"
      "to: { out: { http: { url: \"" +
      sink.url("/out") + "\", retries: 2, timeout: 2s } } }\n";
  WeirProcess weir(
      {.nats_url = nats.url(),
       .flows = {{"plain.yaml", http_flow("plain", "/in/plain", sink.url("/out"))}, {"shaped.yaml", with_steps}}});
  weir.start();
  INFO(weir.describe());

  // Spacing, key order, number spelling and escapes a re-serialisation would change.
  const std::string plain =
      "{ \"id\" : \"pt-1\",\n  \"n\": 1.50, \"big\": 1e3, \"s\": \"caf\\u00e9 \\/\", \"z\": [ ] , \"a\": {} }";
  REQUIRE(weir.post("/in/plain", plain).status == 202);
  const std::string shaped = "{ \"id\" : \"sh-1\", \"n\": 1.50 }";
  REQUIRE(weir.post("/in/shaped", shaped).status == 202);

  REQUIRE(wait_until([&] { return sink.ids().count("pt-1") && sink.ids().count("sh-1"); }, 20s, 50ms));
  CHECK(raw_body(sink, "pt-1") == plain);
  CHECK(raw_body(sink, "sh-1") == "{\"id\":\"sh-1\",\"n\":1.5,\"seen\":true}");
}

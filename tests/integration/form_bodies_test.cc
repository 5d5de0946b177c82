// http-in decodes application/x-www-form-urlencoded bodies into an object (docs/connectors.md,
// http; docs/adr/0308-form-bodies.md): through real weir, nats-server and weir-sink.
#include <catch2/catch.hpp>
#include <set>

#include "tests/integration/form_encoding.h"
#include "tests/support/harness.h"

using namespace weir::itest;
using weir::testing::NatsServer;
using weir::testing::wait_until;

namespace {

const std::string kSecret = "It's a Secret to Everybody";
const std::vector<std::string> kForm{"Content-Type: application/x-www-form-urlencoded"};

// The delivered body whose "id" is `id` (null when none arrived).
json delivered(const SinkProcess& sink, const std::string& id) {
  for (const auto& r : sink.requests(100)) {
    json b = body_of(r);
    if (b.is_object() && b.value("id", "") == id) return b;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("form bodies: a flow reads the fields like JSON, GitHub's payload as JSON, bad forms refused",
          "[integration][form]") {
  NatsServer nats;
  SinkProcess sink;
  // The flow reads a plain form's fields, and the GitHub form's payload as an object.
  const std::string flow =
      "flow: forms\nfrom: { http: { path: /in/forms } }\n"
      "steps:\n"
      "  - set: { id: \"this.id ?? this.payload.delivery\" }\n"
      "to: { out: { http: { url: \"" +
      sink.url("/forms") + "\", timeout: 2s } } }\n";
  WeirProcess weir({.nats_url = nats.url(),
                    .flows = {{"forms.yaml", flow},
                              {"hook.yaml", http_flow("hook", "/in/hook", sink.url("/hook"), "timeout: 2s",
                                                      "hmac: { secret_env: HOOK_SECRET }")}},
                    .config = "http: { max_depth: 8 }\n",
                    .env = {{"HOOK_SECRET", kSecret}}});
  weir.start();
  INFO(weir.describe());

  // A plain form: `+` and %XX decoded, a repeated name an array.
  auto r = weir.post("/in/forms", "id=f1&name=a+b%21&tag=x&tag=y&empty=", kForm);
  CHECK(r.status == 202);
  // GitHub's form delivery: payload=<url-encoded JSON>.
  const std::string payload = R"({"action":"opened","delivery":"f2","pull_request":{"number":7}})";
  r = weir.post("/in/forms", "payload=" + form_encode(payload), kForm);
  CHECK(r.status == 202);
  // curl -d '{...}' labels JSON as a form: stored as the JSON it is.
  r = weir.post("/in/forms", R"({"id":"f3","name":"from curl"})", kForm);
  CHECK(r.status == 202);
  // A signed form delivery: the signature is over the raw form body, the event decoded.
  const std::string signed_body = "id=f4&payload=" + form_encode(R"({"zen":"Keep it logically awesome."})");
  r = weir.post("/in/hook", signed_body,
                {kForm[0], "X-Hub-Signature-256: sha256=" + hmac_sha256_hex(kSecret, signed_body),
                 "X-GitHub-Delivery: 0b9f1c2e-form-f4"});
  CHECK(r.status == 202);
  r = weir.post("/in/hook", signed_body + "x",
                {kForm[0], "X-Hub-Signature-256: sha256=" + hmac_sha256_hex(kSecret, signed_body)});
  CHECK(r.status == 401);

  // Refused before anything is stored, with the reason.
  r = weir.post("/in/forms", "id=bad&name=%G1", kForm);
  CHECK(r.status == 400);
  CHECK(r.body.find("body is not valid form data at byte 13: a '%' not followed by two hex digits") !=
        std::string::npos);
  r = weir.post("/in/forms", "id=bad2&name=%FF", kForm);
  CHECK(r.status == 400);
  CHECK(r.body.find("not UTF-8 once percent-decoded") != std::string::npos);
  r = weir.post("/in/forms", "payload=" + form_encode(std::string(8, '[') + std::string(8, ']')), kForm);
  CHECK(r.status == 400);
  CHECK(r.body.find("body's payload is JSON nested deeper than 7 levels inside the event (http.max_depth 8)") !=
        std::string::npos);

  REQUIRE(wait_until([&] { return sink.ids().size() >= 4; }, 20s, 50ms));
  CHECK(delivered(sink, "f1") == json::parse(R"({"id":"f1","name":"a b!","tag":["x","y"],"empty":""})"));
  json f2 = delivered(sink, "f2");
  CHECK(f2["payload"]["action"] == "opened");
  CHECK(f2["payload"]["pull_request"]["number"] == 7);
  CHECK(delivered(sink, "f3") == json::parse(R"({"id":"f3","name":"from curl"})"));
  CHECK(delivered(sink, "f4") == json::parse(R"({"id":"f4","payload":{"zen":"Keep it logically awesome."}})"));
  CHECK(sink.ids() == std::set<std::string>{"f1", "f2", "f3", "f4"});  // nothing refused was stored
}

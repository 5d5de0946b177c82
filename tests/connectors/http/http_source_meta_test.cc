// http-in's request metadata (docs/adr/0312-request-metadata.md): what the Weir-Meta header
// of a stored event holds, what is never stored, and the requests refused past the bounds,
// with their messages. A hand-built request through the real router and source; the
// ingest records what would be written to JetStream.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "connectors/http/http_source.h"
#include "runtime/http/http_router.h"
#include "runtime/nats/bus.h"
#include "tests/support/fake_request.h"
#include "tests/support/recording.h"

using weir::HttpRequest;
using weir::HttpResponse;
using weir::Responder;
using weir::cluster::testing::RecordingIngest;
using weir::test::FakeRequest;
using json = nlohmann::json;

namespace {

struct Ingress {
  weir::HttpRouter router;
  RecordingIngest ingest;
  weir::SourceContext ctx;
  std::unique_ptr<weir::Source> source;

  explicit Ingress(const std::string& source_yaml) {
    auto loaded = weir::flows::load_flow_text(
        "flow: f\nfrom: { http: " + source_yaml + " }\nto: { out: { nats: { subject: o } } }\n", "f.yaml");
    for (const auto& d : loaded.diagnostics) UNSCOPED_INFO(d.str());
    REQUIRE(loaded.flow);
    ctx.flow = "f";
    ctx.ingest = &ingest;
    ctx.http = &router;
    source = weir::connectors::make_http_source(std::get<weir::flows::HttpSourceSpec>(loaded.flow->source()), {});
    REQUIRE(source->start(ctx).is_ok());
  }
  ~Ingress() { source->stop(); }

  HttpResponse post(const std::string& target, std::map<std::string, std::string> headers,
                    std::string body = R"({"a":1})") {
    FakeRequest req("POST", target, std::move(headers), std::move(body));
    return weir::test::call([this](HttpRequest& r, Responder respond) { router.handle(r, std::move(respond)); }, req);
  }
};

}  // namespace

TEST_CASE("http-in stores method, path, query and the chosen headers beside the body, never credentials",
          "[meta][http_source]") {
  Ingress in("{ path: /in/x, meta_headers: [X-Tenant] }");
  const std::string body = R"({ "a" : 1.50 })";
  auto r = in.post("/in/x?tenant=acme&tag=a&tag=b+c&empty=",
                   {{"Content-Type", "application/json"},
                    {"X-GitHub-Event", "push"},
                    {"X-Tenant", "t-1"},
                    {"X-Other", "not listed"},
                    {"Authorization", "Bearer secret-token"},
                    {"Cookie", "session=s"},
                    {"X-Hub-Signature-256", "sha256=00"}},
                   body);
  CHECK(r.status == 202);
  REQUIRE(in.ingest.size() == 1);
  const auto ev = in.ingest.events()[0];
  CHECK(ev.event.body == body);  // the body is not touched
  const std::string meta = ev.header(weir::layout::kHeaderMeta);
  CHECK(json::parse(meta) == json::parse(R"({"method":"POST","path":"/in/x",
      "query":{"tenant":"acme","tag":["a","b c"],"empty":""},
      "headers":{"content-type":"application/json","x-github-event":"push","x-tenant":"t-1"}})"));
  CHECK(meta.find("secret-token") == std::string::npos);
  for (char c : meta) CHECK((c >= 0x20 && c < 0x7f));  // one line of ASCII: a NATS header value
}

TEST_CASE("http-in refuses a request whose metadata is past the bounds, with the reason, storing nothing",
          "[meta][http_source][errors]") {
  Ingress in("{ path: /in/x, meta_headers: [X-Tenant] }");
  auto bad = in.post("/in/x?a=%zz", {{"Content-Type", "application/json"}});
  CHECK(bad.status == 400);
  CHECK(json::parse(bad.body)["error"] ==
        "query is not valid form data at byte 3: a '%' not followed by two hex digits");
  std::string many = "/in/x?";
  for (int i = 0; i < 65; ++i) many += "p" + std::to_string(i) + "=&";
  auto count = in.post(many, {{"Content-Type", "application/json"}});
  CHECK(count.status == 400);
  CHECK(json::parse(count.body)["error"] == "query has 65 parameters, more than the 64 stored with an event");
  // {"headers":{"x-tenant":"<8200 t>"},"method":"POST","path":"/in/x","query":{}}: 8269 bytes.
  auto big = in.post("/in/x", {{"X-Tenant", std::string(8200, 't')}});
  CHECK(big.status == 400);
  CHECK(json::parse(big.body)["error"] ==
        "request metadata (method, path, query and stored headers) is 8269 bytes as JSON, more than the 8192 stored "
        "with an event");
  CHECK(in.ingest.size() == 0);
  // At the bounds it is stored.
  std::string sixty_four = "/in/x?";
  for (int i = 0; i < 64; ++i) sixty_four += "p" + std::to_string(i) + "=&";
  CHECK(in.post(sixty_four, {{"Content-Type", "application/json"}}).status == 202);
  CHECK(in.ingest.size() == 1);
}

#include "connectors/http/http_source.h"

#include <cstdlib>
#include <ctime>

#include <nlohmann/json.hpp>

#include "connectors/http/signature.h"
#include "flows/json_limits.h"
#include "flows/request_meta.h"
#include "flows/text.h"
#include "runtime/http/http_router.h"
#include "runtime/base/log.h"
#include "runtime/nats/bus.h"

namespace weir::connectors {
namespace {

// The media type without parameters, lower case.
std::string media_type(std::string_view ct) {
  std::string base(ct.substr(0, ct.find(';')));
  for (char& c : base) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  while (!base.empty() && base.back() == ' ') base.pop_back();
  return base;
}

// The request's metadata as Weir-Meta's value (docs/adr/0312-request-metadata.md): compact
// JSON, ASCII only (a NATS header value is one line of text). False with *why when it is
// past the bounds of flows/request_meta.h or its query does not decode.
bool request_meta(const HttpRequest& req, const std::vector<std::string>& extra, std::string* out, std::string* why) {
  std::string_view target = req.target();
  const size_t q = target.find('?');
  std::string query_json = "{}";
  if (q != std::string_view::npos) {
    flows::JsonError err;
    std::optional<nlohmann::json> query = flows::parse_query(target.substr(q + 1), &err);
    if (!query) {
      *why = "query is not valid form data at byte " + std::to_string(err.byte) + ": " + err.message;
      return false;
    }
    if (query->size() > flows::kMaxMetaQueryParams) {
      *why = "query has " + std::to_string(query->size()) + " parameters, more than the " +
             std::to_string(flows::kMaxMetaQueryParams) + " stored with an event";
      return false;
    }
    query_json = query->dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  }
  std::vector<flows::MetaHeader> headers;
  auto keep = [&](const std::string& name) {
    if (std::string_view v = req.header(name); !v.empty()) headers.push_back({name, v});
  };
  for (const std::string& name : flows::default_meta_headers()) keep(name);
  for (const std::string& name : extra) keep(name);
  *out = flows::write_request_meta(req.method(), req.path(), query_json, std::move(headers));
  if (out->size() > flows::kMaxMetaBytes) {
    *why = "request metadata (method, path, query and stored headers) is " + std::to_string(out->size()) +
           " bytes as JSON, more than the " + std::to_string(flows::kMaxMetaBytes) + " stored with an event";
    return false;
  }
  return true;
}

bool content_type_is_json(std::string_view ct) {
  if (ct.empty()) return true;  // most webhook senders omit nothing, but curl -d does
  auto semi = ct.find(';');
  std::string base(ct.substr(0, semi));
  for (char& c : base) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  while (!base.empty() && base.back() == ' ') base.pop_back();
  return base == "application/json" || (base.size() > 5 && base.compare(base.size() - 5, 5, "+json") == 0) ||
         base == "text/json";
}

class HttpSource final : public Source {
 public:
  HttpSource(flows::HttpSourceSpec spec, HttpSourceOptions options) : spec_(std::move(spec)), options_(options) {}

  Status start(SourceContext& ctx) override {
    if (!ctx.http || !ctx.ingest) return Status::internal("http source needs the ingress router");
    ctx_ = &ctx;
    if (spec_.hmac) {
      const char* v = std::getenv(spec_.hmac->secret_env.c_str());
      if (!v || !*v)
        return Status::invalid("flow " + ctx.flow + ": environment variable " + spec_.hmac->secret_env +
                               " (hmac.secret_env) is not set");
      secret_ = v;
      std::string why;
      if (spec_.hmac->scheme == flows::HmacSpec::Scheme::kStandard && !valid_standard_webhook_secret(secret_, &why)) {
        return Status::invalid("flow " + ctx.flow + ": environment variable " + spec_.hmac->secret_env +
                               " (hmac.secret_env, scheme standard) is no Standard Webhooks secret: " + why);
      }
    }
    if (spec_.bearer_token_env) {
      const char* v = std::getenv(spec_.bearer_token_env->c_str());
      if (!v || !*v)
        return Status::invalid("flow " + ctx.flow + ": environment variable " + *spec_.bearer_token_env +
                               " (bearer.token_env) is not set");
      token_ = v;
    }
    return ctx.http->add_route(spec_.path,
                               [this](HttpRequest& req, Responder respond) { handle(req, std::move(respond)); });
  }

  void stop() override {
    if (ctx_ && ctx_->http) ctx_->http->remove_route(spec_.path);
  }

 private:
  bool authorized(HttpRequest& req, std::string* why) const {
    if (spec_.bearer_token_env) {
      std::string_view auth = req.header("Authorization");
      constexpr std::string_view kPrefix = "Bearer ";
      if (auth.size() <= kPrefix.size() || auth.substr(0, kPrefix.size()) != kPrefix ||
          !flows::constant_time_equals(auth.substr(kPrefix.size()), token_)) {
        *why = "missing or wrong bearer token";
        return false;
      }
    }
    if (spec_.hmac) {
      if (spec_.hmac->scheme == flows::HmacSpec::Scheme::kStandard) {
        std::string_view id = req.header("webhook-id");
        std::string_view ts = req.header("webhook-timestamp");
        std::string_view sig = req.header("webhook-signature");
        if (id.empty() || ts.empty() || sig.empty()) {
          *why = "missing webhook-id, webhook-timestamp or webhook-signature";
          return false;
        }
        if (!verify_standard_webhook(secret_, id, ts, req.body(), sig, static_cast<int64_t>(std::time(nullptr)), why)) {
          if (why->empty()) *why = "wrong signature";
          return false;
        }
      } else if (spec_.hmac->scheme != flows::HmacSpec::Scheme::kGithub) {
        if (!verify_preset(req, why)) return false;
      } else {
        std::string_view sig = req.header(spec_.hmac->header);
        if (sig.empty()) {
          *why = "missing " + spec_.hmac->header + " header";
          return false;
        }
        if (!verify_github_signature(secret_, req.body(), sig)) {
          *why = "wrong signature in " + spec_.hmac->header;
          return false;
        }
      }
    }
    return true;
  }

  // Stripe, Slack and Shopify (connectors/http/signature.h; docs/connectors.md).
  bool verify_preset(HttpRequest& req, std::string* why) const {
    const auto now = static_cast<int64_t>(std::time(nullptr));
    auto missing = [&](const char* header) {
      *why = std::string("missing ") + header + " header";
      return false;
    };
    switch (spec_.hmac->scheme) {
      case flows::HmacSpec::Scheme::kStripe: {
        std::string_view sig = req.header("Stripe-Signature");
        if (sig.empty()) return missing("Stripe-Signature");
        return verify_stripe_signature(secret_, req.body(), sig, now, why);
      }
      case flows::HmacSpec::Scheme::kSlack: {
        std::string_view sig = req.header("X-Slack-Signature");
        std::string_view ts = req.header("X-Slack-Request-Timestamp");
        if (sig.empty()) return missing("X-Slack-Signature");
        if (ts.empty()) return missing("X-Slack-Request-Timestamp");
        return verify_slack_signature(secret_, ts, req.body(), sig, now, why);
      }
      case flows::HmacSpec::Scheme::kShopify: {
        std::string_view sig = req.header("X-Shopify-Hmac-Sha256");
        if (sig.empty()) return missing("X-Shopify-Hmac-Sha256");
        if (!verify_shopify_signature(secret_, req.body(), sig)) {
          *why = "wrong signature in X-Shopify-Hmac-Sha256";
          return false;
        }
        return true;
      }
      default: *why = "unknown signature scheme"; return false;
    }
  }

  void handle(HttpRequest& req, Responder respond) {
    std::string why;
    if (!authorized(req, &why)) {
      respond(HttpResponse::error(401, why));
      return;
    }
    IngestEvent ev;
    std::string meta;
    if (!request_meta(req, spec_.meta_headers, &meta, &why)) {
      respond(HttpResponse::error(400, why));
      return;
    }
    ev.headers.emplace_back(layout::kHeaderMeta, std::move(meta));
    std::string& body = req.mutable_body();
    const std::string type = media_type(req.header("Content-Type"));
    const bool form = type == "application/x-www-form-urlencoded";
    // `curl -d '{"a":1}'` labels JSON as a form: a form-typed body that opens an object or
    // an array and is valid JSON is taken as JSON (docs/adr/0308-form-bodies.md).
    if (content_type_is_json(req.header("Content-Type")) ||
        (form && !body.empty() && (body[0] == '{' || body[0] == '[') && flows::check_json(body, options_.max_depth))) {
      flows::JsonError err;
      if (!flows::check_json(body, options_.max_depth, &err)) {
        // Too deep is refused before anything is stored: nothing downstream may walk it.
        std::string msg = err.too_deep
                              ? "body is " + err.message + " (http.max_depth)"
                              : "body is not valid JSON at byte " + std::to_string(err.byte) + ": " + err.message;
        respond(HttpResponse::error(400, msg));
        return;
      }
      ev.body = std::move(body);
    } else if (form) {
      // A form (curl -d, GitHub's default): an object of its fields, `payload` as JSON when
      // it is JSON, within the same depth limit (flows/json_limits.h, parse_form).
      flows::JsonError err;
      auto form = flows::parse_form(body, options_.max_depth, &err);
      if (!form) {
        std::string msg = err.too_deep
                              ? "body's " + err.message
                              : "body is not valid form data at byte " + std::to_string(err.byte) + ": " + err.message;
        respond(HttpResponse::error(400, msg));
        return;
      }
      ev.body = flows::write_json(*form);
    } else {
      // Neither JSON nor a form: the event is the text, with its content type, as a JSON object.
      ev.body = nlohmann::json{{"body", body}, {"content_type", std::string(req.header("Content-Type"))}}.dump(
          -1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    // The event id is the JetStream dedup key, so a replay inside the dedup window
    // (ADR 0102) stores nothing new. Standard Webhooks: the signed webhook-id, always — an
    // unsigned Idempotency-Key must not let a captured request be stored again. GitHub:
    // X-GitHub-Delivery when sent (unsigned too: it only catches verbatim replays and
    // GitHub's own redeliveries; the scheme has no timestamp, see docs).
    std::string_view key_header = "Idempotency-Key";
    if (spec_.hmac && spec_.hmac->scheme == flows::HmacSpec::Scheme::kStandard) {
      key_header = "webhook-id";
    } else if (spec_.hmac && spec_.hmac->scheme == flows::HmacSpec::Scheme::kShopify &&
               !req.header("X-Shopify-Webhook-Id").empty()) {
      key_header = "X-Shopify-Webhook-Id";  // unsigned, as X-GitHub-Delivery: catches redeliveries
    } else if (spec_.hmac && !req.header("X-GitHub-Delivery").empty()) {
      key_header = "X-GitHub-Delivery";
    }
    std::string_view key = req.header(key_header);
    if (key.size() > 200) {
      respond(HttpResponse::error(400, std::string(key_header) + " longer than 200 characters"));
      return;
    }
    // The id travels on as a NATS header and the sinks' Idempotency-Key: printable ASCII
    // only, or the sink would dead-letter what we acknowledged.
    for (char c : key) {
      if (c < 0x20 || c > 0x7e) {
        respond(HttpResponse::error(400, std::string(key_header) + " must be printable ASCII"));
        return;
      }
    }
    ev.id = std::string(key);
    // Trace context (ADR 0140): validated by the ingest, which starts a new trace for bad ones.
    if (std::string_view tp = req.header("traceparent"); !tp.empty()) {
      ev.headers.emplace_back("traceparent", std::string(tp));
      if (std::string_view ts = req.header("tracestate"); !ts.empty())
        ev.headers.emplace_back("tracestate", std::string(ts));
    }
    if (!ctx_->ingest->ready()) {
      respond(unavailable("JetStream is unavailable"));
      return;
    }
    ctx_->ingest->publish(std::move(ev), options_.ack_timeout,
                          [this, respond = std::move(respond)](const Status& s, const std::string& id) {
                            if (s) {
                              respond(HttpResponse::json(202, nlohmann::json{{"id", id}}.dump()));
                            } else if (s.code() == Status::Code::kTooLarge) {
                              // Larger than the NATS server's max_payload: a resend can never be
                              // stored, so no 503 and no Retry-After (docs/reliability.md).
                              respond(HttpResponse::error(413, "event not stored: " + s.message()));
                            } else if (may_be_stored(s)) {
                              // Written, unconfirmed: the id weir gave it lets any sender resend it
                              // as Idempotency-Key, so JetStream keeps one copy either way.
                              HttpResponse r = unavailable("event perhaps stored: " + s.message());
                              r.body = nlohmann::json{{"error", "event perhaps stored: " + s.message()},
                                                      {"id", id},
                                                      {"stored", "unknown"},
                                                      {"hint", "resend it with the header Idempotency-Key: " + id +
                                                                   " (a signed webhook: resend the same delivery)"}}
                                           .dump();
                              respond(std::move(r));
                            } else {
                              respond(unavailable("event not stored: " + s.message()));
                            }
                          });
  }

  HttpResponse unavailable(const std::string& msg) const {
    HttpResponse r = HttpResponse::error(503, msg);
    r.headers.emplace_back("Retry-After", std::to_string(options_.retry_after_seconds));
    return r;
  }

  flows::HttpSourceSpec spec_;
  HttpSourceOptions options_;
  SourceContext* ctx_ = nullptr;
  std::string secret_, token_;  // never logged
};

}  // namespace

std::unique_ptr<Source> make_http_source(const flows::HttpSourceSpec& spec, HttpSourceOptions options) {
  return std::make_unique<HttpSource>(spec, options);
}

}  // namespace weir::connectors

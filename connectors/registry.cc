#include "connectors/registry.h"

#include "connectors/http/http_sink.h"
#include "connectors/http/http_source.h"
#include "connectors/poll/poll_source.h"
#include "connectors/timer/timer_source.h"
#include "connectors/exec/exec_source.h"
#include "connectors/mqtt/mqtt_sink.h"
#include "connectors/mqtt/mqtt_source.h"
#include "connectors/nats/nats_sink.h"
#include "connectors/nats/nats_source.h"

namespace weir::connectors {
namespace {
template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

Status not_yet(const flows::Flow& flow, const std::string& kind) {
  return Status::invalid("flow " + flow.name() + ": the " + kind + " connector is not available in this build");
}
}  // namespace

Result<std::unique_ptr<Source>> BuiltinConnectors::make_source(const flows::Flow& flow, const RuntimeConfig& config) {
  return std::visit(
      Overloaded{
          [&](const flows::HttpSourceSpec& s) -> Result<std::unique_ptr<Source>> {
            HttpSourceOptions o;
            o.ack_timeout = config.http.ack_timeout;
            o.max_depth = config.http.max_depth;
            return make_http_source(s, o);
          },
          [&](const flows::MqttSourceSpec& s) -> Result<std::unique_ptr<Source>> {
            auto m = make_mqtt_source(s);
            if (!m) return Status::invalid("flow " + flow.name() + ": " + m.status().message());
            return m;
          },
          [&](const flows::NatsSourceSpec& s) -> Result<std::unique_ptr<Source>> {
            // config.nats.url is the NATS the runtime connected to (embedded or not).
            return make_nats_source(s, {config.nats.url, config.nats.creds});
          },
          [&](const flows::TimerSourceSpec& s) -> Result<std::unique_ptr<Source>> {
            auto t = TimerSource::create(s);
            if (!t) return t.status();
            return std::unique_ptr<Source>(std::move(t.value()));
          },
          [&](const flows::PollSourceSpec& s) -> Result<std::unique_ptr<Source>> {
            auto p = PollSource::create(s, flow.name());
            if (!p) return Status::invalid("flow " + flow.name() + ": " + p.status().message());
            return std::unique_ptr<Source>(std::move(p.value()));
          },
          [&](const flows::ExecSourceSpec& s) -> Result<std::unique_ptr<Source>> {
            auto e = make_exec_source(s);
            if (!e) return Status::invalid("flow " + flow.name() + ": " + e.status().message());
            return e;
          },
          [&](const flows::FlowSourceSpec&) -> Result<std::unique_ptr<Source>> { return not_yet(flow, "flow"); },
      },
      flow.source());
}

Result<std::unique_ptr<Sink>> BuiltinConnectors::make_sink(const flows::Flow& flow, const flows::SinkSpec& sink,
                                                           const RuntimeConfig& config) {
  return std::visit(
      Overloaded{
          [&](const flows::HttpSinkSpec& s) -> Result<std::unique_ptr<Sink>> {
            return make_http_sink(s, flow.name(), sink.name);
          },
          [&](const flows::MqttSinkSpec& s) -> Result<std::unique_ptr<Sink>> {
            return make_mqtt_sink(s, flow.name(), sink.name);
          },
          [&](const flows::NatsSinkSpec& s) -> Result<std::unique_ptr<Sink>> {
            NatsSinkOptions o;
            o.url = config.nats.url;
            o.creds_file = config.nats.creds;
            return make_nats_sink(s, flow.name(), sink.name, o);
          },
          [&](const flows::FlowSinkSpec&) -> Result<std::unique_ptr<Sink>> { return not_yet(flow, "flow sink"); },
      },
      sink.kind);
}

}  // namespace weir::connectors

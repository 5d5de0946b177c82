#include "connectors/registry.h"

#include "connectors/http/http_sink.h"
#include "connectors/http/http_source.h"
#include "connectors/poll/poll_source.h"
#include "connectors/timer/timer_source.h"

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
            return make_http_source(s, o);
          },
          [&](const flows::MqttSourceSpec&) -> Result<std::unique_ptr<Source>> { return not_yet(flow, "mqtt"); },
          [&](const flows::NatsSourceSpec&) -> Result<std::unique_ptr<Source>> { return not_yet(flow, "nats"); },
          [&](const flows::TimerSourceSpec& s) -> Result<std::unique_ptr<Source>> {
            auto t = TimerSource::create(s);
            if (!t) return t.status();
            return std::unique_ptr<Source>(std::move(t.value()));
          },
          [&](const flows::PollSourceSpec& s) -> Result<std::unique_ptr<Source>> {  // poll
            auto p = PollSource::create(s, flow.name());
            if (!p) return Status::invalid("flow " + flow.name() + ": " + p.status().message());
            return std::unique_ptr<Source>(std::move(p.value()));
          },
          [&](const flows::ExecSourceSpec&) -> Result<std::unique_ptr<Source>> { return not_yet(flow, "exec"); },
          [&](const flows::FlowSourceSpec&) -> Result<std::unique_ptr<Source>> { return not_yet(flow, "flow"); },
      },
      flow.source());
}

Result<std::unique_ptr<Sink>> BuiltinConnectors::make_sink(const flows::Flow& flow, const flows::SinkSpec& sink,
                                                           const RuntimeConfig&) {
  return std::visit(
      Overloaded{
          [&](const flows::HttpSinkSpec& s) -> Result<std::unique_ptr<Sink>> {
            return make_http_sink(s, flow.name(), sink.name);
          },
          [&](const flows::MqttSinkSpec&) -> Result<std::unique_ptr<Sink>> { return not_yet(flow, "mqtt sink"); },
          [&](const flows::NatsSinkSpec&) -> Result<std::unique_ptr<Sink>> { return not_yet(flow, "nats sink"); },
          [&](const flows::FlowSinkSpec&) -> Result<std::unique_ptr<Sink>> { return not_yet(flow, "flow sink"); },
      },
      sink.kind);
}

}  // namespace weir::connectors

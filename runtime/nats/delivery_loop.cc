// The delivery loops (Bus::FlowLoop): one IoLoop thread and one event-loop NATS
// connection that run the flow consumers, the sink consumers, or both
// (docs/adr/0272-one-delivery-loop-on-small-machines.md).
#include <algorithm>

#include "runtime/nats/pull_consumer_impl.h"

namespace weir {

void Bus::FlowLoop::after_read() {
  // By index: a handler may stop a consumer (run inline on this thread).
  for (size_t i = 0; i < consumers.size(); ++i) {
    auto c = consumers[i];
    c->drain();
  }
}

void Bus::FlowLoop::tick() {
  auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < consumers.size(); ++i) {
    auto c = consumers[i];
    c->tick(now);
  }
}

void Bus::FlowLoop::remove(const PullConsumer::Impl* c) {
  auto it = std::find_if(consumers.begin(), consumers.end(), [&](const auto& p) { return p.get() == c; });
  if (it != consumers.end()) consumers.erase(it);
}

Bus::FlowLoop::~FlowLoop() {
  // Consumers still here (not stopped: a Bus destroyed before its stages) are stopped,
  // so nothing posted for them touches the publisher below.
  if (nl != nullptr) {
    nl->run_sync([&] {
      for (auto& c : consumers) {
        MutexLock lock(c->mu);
        c->stopped = true;
      }
      consumers.clear();
    });
  }
  // Closes the connection while the loop still runs (the publisher's last steps run on
  // it); work posted after that is dropped with the loop.
  pub.reset();
  io.stop();
  consumers.clear();
}

Result<Bus::FlowLoop*> Bus::flow_loop(ConsumerLoop which) {
  MutexLock lock(flow_loop_mu_);
  // One loop for both kinds (ADR 0272): the flows' slot, under its own name.
  const bool shared = options_.delivery_loops == 1;
  auto& slot = loops_[shared ? 0 : static_cast<int>(which)];
  if (slot) return slot.get();
  const bool sinks = which == ConsumerLoop::kSinks;
  auto fl = std::make_unique<FlowLoop>(shared ? "weir-delivery" : sinks ? "weir-sinks" : "weir-flows");
  fl->io.start();
  FlowLoop* raw = fl.get();
  LoopHooks hooks;
  hooks.after_read = [raw] { raw->after_read(); };
  hooks.on_connection = [raw](bool up) {
    // A cnats thread (down) or the io thread (up): the consumers learn it on their own
    // thread, in a post. Pull requests die with the connection; the server forgets them,
    // so they are sent again on the new one, after the consumer subscribed on it (ADR 0287).
    if (raw->nl == nullptr) return;  // connecting: nothing to tell yet
    raw->nl->post([raw, up] {
      for (size_t i = 0; i < raw->consumers.size(); ++i) {
        auto c = raw->consumers[i];
        c->connection(up);
      }
    });
  };
  auto lp = LoopPublisher::connect(fl->io, options_, shared ? "delivery" : sinks ? "sinks" : "flows", std::move(hooks));
  if (!lp) return lp.status();
  fl->pub = std::move(lp.value());
  fl->nl = &fl->pub->loop();
  fl->nl->set_ack_delay(options_.ack_delay);
  fl->pub->loop().every(PullConsumer::Impl::kTick, [raw] { raw->tick(); });
  slot = std::move(fl);
  return raw;
}

}  // namespace weir

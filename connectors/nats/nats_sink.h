// NatsSink: the `to: {x: {nats: {subject}}}` sink. Publishes each event (its JSON) to a
// core NATS subject with the headers `Nats-Msg-Id`, `Idempotency-Key` and `Weir-Id` set to
// the event id, so a JetStream stream that captures the subject stores a re-send once.
//
// Confirmation: core NATS has no per-message acknowledgement. The sink's thread flushes
// (PING/PONG) after each batch of publishes; `done(ok)` follows the PONG, which says the
// server has read every earlier publish on this connection. No PONG within `flush_timeout`,
// a publish cnats refuses, or a lost connection → retry. Subscribers are not waited for:
// a subject with no subscriber drops the message, as core NATS does.
//
// Threading: deliver() from any thread (the sink stage); one thread ("nats-sink") flushes
// and calls every `done`. start()/stop() once each from the owner's thread; stop()
// flushes what was published and completes the rest as retry.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "flows/flow.h"
#include "runtime/ports/sink.h"

namespace weir::connectors {

struct NatsSinkOptions {
  std::string url;  // the NATS the runtime uses (RuntimeConfig::nats.url)
  std::string creds_file;
  std::chrono::milliseconds flush_timeout{5000};
  int max_in_flight = 256;
  int retries = flows::kNoRetryCap;  // no attempt cap: the retry schedule (ADR 0295) governs
};

Result<std::unique_ptr<weir::Sink>> make_nats_sink(const flows::NatsSinkSpec& spec, std::string flow,
                                                   std::string sink_name, NatsSinkOptions options);

}  // namespace weir::connectors

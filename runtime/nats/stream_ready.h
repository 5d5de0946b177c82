// A stream that serves: its creation finished on the server, so consumers made on it work
// (docs/adr/0321-a-stream-that-serves.md).
#pragma once

#include <chrono>
#include <string>

#include "runtime/base/status.h"

struct __jsCtx;

namespace weir {

// Waits until `stream` answers a publish on `subject` (one of its subjects) that it must
// refuse: a publish that expects another stream is answered "expected stream does not
// match" (JetStream error 10060) by a stream whose set-up is complete, and stores nothing.
// Unavailable when no such answer came within `timeout`.
Status await_stream_serving(__jsCtx* js, const std::string& stream, const std::string& subject,
                            std::chrono::milliseconds timeout);

}  // namespace weir

// docs/adr/0321-a-stream-that-serves.md: nats-server 2.9.10 lists a stream it is creating
// before the stream can send anything; a consumer made on it then never delivers.
#include "runtime/nats/stream_ready.h"

#include <nats/nats.h>

#include <algorithm>
#include <thread>

#include "runtime/nats/nats_status.h"

namespace weir {

Status await_stream_serving(jsCtx* js, const std::string& stream, const std::string& subject,
                            std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // Stream names cannot hold '.', so no stream is named this.
  const std::string other = stream + ".serving";
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.ExpectStream = other.c_str();
  po.MaxWait = std::clamp<int64_t>(timeout.count(), 1, 1000);
  natsStatus s = NATS_OK;
  int jerr = 0;
  for (int attempt = 1;; ++attempt) {
    jsErrCode code = static_cast<jsErrCode>(0);
    jsPubAck* ack = nullptr;
    s = js_Publish(&ack, js, subject.c_str(), nullptr, 0, &po, &code);
    if (ack != nullptr) jsPubAck_Destroy(ack);
    jerr = code;
    if (code == JSStreamNotMatchErr) return Status::ok();
    if (s == NATS_OK) {
      // A server that stores what expects another stream: nothing here can tell readiness.
      return Status::internal("stream " + stream + " stored a publish that expected another stream (on " + subject +
                              "); the server ignores Nats-Expected-Stream");
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(5 * attempt, 100)));
  }
  return Status::unavailable("stream " + stream +
                             " does not serve yet: " + nats_status(s, "publish to " + subject, jerr).message());
}

}  // namespace weir

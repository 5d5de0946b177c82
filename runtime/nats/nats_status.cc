#include "runtime/nats/nats_status.h"

#include <nats/nats.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace weir {

std::string nats_disconnect_reason(natsConnection* nc) {
  const char* text = nullptr;
  const natsStatus s = natsConnection_GetLastError(nc, &text);
  if (s == NATS_OK) return "not recorded by cnats";  // a close, or a socket error it keeps no text of
  std::string why = natsStatus_GetText(s);
  if (text != nullptr && *text != '\0' && why != text) why += std::string(": ") + text;
  return why;
}

Status nats_publish_status(int status, natsConnection* nc, size_t body_bytes) {
  const auto s = static_cast<natsStatus>(status);
  if (s != NATS_MAX_PAYLOAD) return nats_status(status, "publish");
  const int64_t limit = nc != nullptr ? natsConnection_GetMaxPayload(nc) : 0;
  return Status::too_large("the event (" + std::to_string(body_bytes) +
                           " bytes and its headers) is larger than the NATS server accepts (max_payload " +
                           std::to_string(limit) + " bytes)");
}

bool nats_storage_refused(int status, int js_error) {
  if (js_error == JSStorageResourcesExceededErr || js_error == JSInsufficientResourcesErr ||
      js_error == JSMemoryResourcesExceededErr) {
    return true;
  }
  const auto s = static_cast<natsStatus>(status);
  if (s == NATS_OK) return false;
  natsStatus last = NATS_OK;
  const char* text = nats_GetLastError(&last);
  // "insufficient storage resources available", "insufficient resources", "insufficient
  // memory resources available": the server's descriptions of the three codes.
  return text != nullptr && last == s && std::string_view(text).find("insufficient") != std::string_view::npos;
}

std::chrono::milliseconds borrowed_storage_pause(int attempt) {
  return std::chrono::milliseconds(std::min(500, 50 << std::min(std::max(attempt, 1) - 1, 4)));
}

Status nats_status(int status, std::string_view what, int js_error) {
  const auto s = static_cast<natsStatus>(status);
  if (s == NATS_OK) return Status::ok();
  natsStatus last = NATS_OK;
  const char* text = nats_GetLastError(&last);
  std::string message(what);
  message += ": ";
  message += natsStatus_GetText(s);
  // The thread-local last error may belong to an earlier call; only use it when it
  // describes this failure.
  std::string detail = (text != nullptr && last == s) ? std::string(text) : std::string();
  if (!detail.empty() && detail != natsStatus_GetText(s)) {
    message += " (";
    message += detail;
    message += ")";
  }
  if (js_error == JSStreamWrongLastSequenceErr || detail.find("wrong last sequence") != std::string::npos) {
    return Status::conflict(message);
  }
  // No suitable peers for placement: a replicated stream (a KV bucket: cnats gives no error
  // code there, only the text) asked of a cluster whose peers have not all reported in yet,
  // or are down. "Not now" rather than "never": start-up retries it.
  if (js_error == JSClusterNoPeersErr || detail.find("no suitable peers") != std::string::npos) {
    if (js_error != 0) message += " (JetStream error " + std::to_string(js_error) + ")";
    return Status::unavailable(message);
  }
  switch (s) {
    case NATS_NOT_FOUND: return Status::not_found(message);
    case NATS_TIMEOUT: return Status::timeout(message);
    case NATS_NO_SERVER:
    case NATS_NO_RESPONDERS:
    case NATS_CONNECTION_CLOSED:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_STALE_CONNECTION:
    case NATS_IO_ERROR:
    case NATS_NOT_YET_CONNECTED:
    case NATS_DRAINING:
    case NATS_INSUFFICIENT_BUFFER:  // the reconnect buffer is full: publishing while disconnected
      return Status::unavailable(message);
    case NATS_INVALID_ARG:
    case NATS_INVALID_SUBJECT: return Status::invalid(message);
    case NATS_MAX_PAYLOAD: return Status::too_large(message);
    default:
      if (js_error != 0) message += " (JetStream error " + std::to_string(js_error) + ")";
      return Status::internal(message);
  }
}

}  // namespace weir

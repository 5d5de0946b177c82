#include "cluster/nats_status.h"

#include <string>

namespace weir::cluster {

Status nats_status(natsStatus s, std::string_view what, jsErrCode js_error) {
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
  if (js_error == JSStreamWrongLastSequenceErr ||
      detail.find("wrong last sequence") != std::string::npos) {
    return Status::conflict(message);
  }
  switch (s) {
    case NATS_NOT_FOUND:
      return Status::not_found(message);
    case NATS_TIMEOUT:
      return Status::timeout(message);
    case NATS_NO_SERVER:
    case NATS_NO_RESPONDERS:
    case NATS_CONNECTION_CLOSED:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_STALE_CONNECTION:
    case NATS_IO_ERROR:
    case NATS_NOT_YET_CONNECTED:
    case NATS_DRAINING:
      return Status::unavailable(message);
    case NATS_INVALID_ARG:
    case NATS_INVALID_SUBJECT:
    case NATS_MAX_PAYLOAD:
      return Status::invalid(message);
    default:
      return Status::internal(message);
  }
}

}  // namespace weir::cluster

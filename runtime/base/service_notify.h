// Notifications to a service manager that started weir with $NOTIFY_SOCKET set (systemd's
// Type=notify, packaging/weir.service): "READY=1" once /readyz answers 200, "STOPPING=1"
// when the drain begins (docs/adr/0304-readiness-notification.md). The documented datagram
// protocol of sd_notify(3): one AF_UNIX datagram per call, to a path or, with a leading
// '@', an abstract socket name. Without $NOTIFY_SOCKET every call does nothing.
// Thread-safe: each call opens, sends on and closes its own socket.
#pragma once

#include <string_view>

namespace weir::service {

// Sends `state` (newline-separated KEY=VALUE assignments). A failed send is logged once as a
// warning and otherwise ignored: the service manager's own timeout then speaks for it.
void notify(std::string_view state);

}  // namespace weir::service

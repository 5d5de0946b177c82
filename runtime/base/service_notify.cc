#include "runtime/base/service_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/base/log.h"

namespace weir::service {

namespace {
std::atomic<bool> warned{false};

void warn_once(const std::string& why) {
  if (!warned.exchange(true)) log::warn("service manager notification failed", {{"error", why}});
}
}  // namespace

void notify(std::string_view state) {
  const char* name = std::getenv("NOTIFY_SOCKET");
  if (name == nullptr || name[0] == '\0') return;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t len = std::strlen(name);
  // sd_notify(3): an absolute path, or '@' for a name in the abstract namespace.
  if ((name[0] != '/' && name[0] != '@') || len >= sizeof addr.sun_path) {
    warn_once(std::string("NOTIFY_SOCKET is not an absolute path or an @abstract name: ") + name);
    return;
  }
  std::memcpy(addr.sun_path, name, len);
  if (name[0] == '@') addr.sun_path[0] = '\0';
  // An abstract name is exactly its bytes (no terminating NUL counts); a path may carry one.
  const auto addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len + (name[0] == '/' ? 1 : 0));
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    warn_once(std::string("socket: ") + std::strerror(errno));
    return;
  }
  const ssize_t sent = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&addr),
                                addr_len);
  if (sent < 0) warn_once(std::string("send to ") + name + ": " + std::strerror(errno));
  ::close(fd);
}

}  // namespace weir::service

// AdminClient: the CLI's side of the admin API (`weir deploy|promote|rollback|status|dlq`).
// Synchronous libcurl calls; the token comes from WEIR_ADMIN_TOKEN when set.
#pragma once

#include <string>

namespace weir {

struct AdminReply {
  int status = 0;        // HTTP status, 0 when the server could not be reached
  std::string body;
  std::string error;     // transport error
};

AdminReply admin_call(const std::string& server, const std::string& method, const std::string& path,
                      const std::string& body = "");

// Runs one CLI client command; prints the answer; returns the exit code.
int admin_command(const std::string& server, const std::string& method, const std::string& path,
                  const std::string& body = "");

}  // namespace weir

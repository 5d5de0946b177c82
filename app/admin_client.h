// AdminClient: the CLI's side of the admin API (`weir deploy|promote|rollback|status|dlq`).
// Synchronous libcurl calls on the calling thread. The bearer token is set once by the
// CLI (from --token-env, the config's admin.token_env, or WEIR_ADMIN_TOKEN) and never
// printed.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace weir {

struct AdminReply {
  int status = 0;  // HTTP status, 0 when the server could not be reached
  std::string body;
  std::string error;                                         // transport error
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string header(const std::string& lower_name) const;   // "" when absent
};

// The token sent as `Authorization: Bearer` by every later call ("" = none).
void set_admin_token(std::string token);

AdminReply admin_call(const std::string& server, const std::string& method, const std::string& path,
                      const std::string& body = "");

// Exit code for an answer: 0 for 2xx, 2 for a 4xx (the request was wrong: an
// invalid flow, a missing token, an unknown flow or id, a conflict), 1 otherwise
// (unreachable, 5xx).
int admin_exit_code(const AdminReply& reply);

// Runs one CLI client command; prints the answer; returns admin_exit_code.
int admin_command(const std::string& server, const std::string& method, const std::string& path,
                  const std::string& body = "");

}  // namespace weir

// ScriptedHttpServer: a small HTTP/1.1 responder on 127.0.0.1:<free port> for sink tests.
//
// Every request is handed to the test's script, which says how to answer it: a status
// with headers and body, after a delay, or by closing the connection without an answer.
// The server records each request and counts connections, so tests can check what
// arrived and how many connections a client opened.
//
// Threads: one io thread (Boost.Asio coroutines) owned by the server; the script runs on
// it and may block only for trivial work (use `delay` rather than sleeping). Accessors are
// thread-safe. The destructor stops the io thread and closes every connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weir::testing {

struct ScriptedRequest {
  std::string method;
  std::string target;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  int connection = 0;  // 0-based index of the accepted connection it came on

  bool has_header(std::string_view name) const;
  std::string header(std::string_view name) const;  // first match, case-insensitive; "" if none
};

struct ScriptedReply {
  int status = 204;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::chrono::milliseconds delay{0};
  bool close_without_answer = false;
  bool close_after_answer = false;  // the connection is closed once the answer is written
  // When set: written as the answer, byte for byte, instead of status, headers and body
  // (interim answers, chunked or unframed bodies, broken answers).
  std::string raw;

  static ScriptedReply with_status(int status, std::string body = {}) {
    ScriptedReply r;
    r.status = status;
    r.body = std::move(body);
    return r;
  }
};

class ScriptedHttpServer {
 public:
  using Script = std::function<ScriptedReply(const ScriptedRequest&)>;

  explicit ScriptedHttpServer(Script script);
  ~ScriptedHttpServer();
  ScriptedHttpServer(const ScriptedHttpServer&) = delete;
  ScriptedHttpServer& operator=(const ScriptedHttpServer&) = delete;

  uint16_t port() const;
  std::string url(std::string_view path) const;  // http://127.0.0.1:<port><path>

  int accepted() const;                 // connections accepted so far
  int max_open() const;                 // most connections open at the same time
  int open_now() const;                 // connections open at this moment
  int max_concurrent_requests() const;  // most requests read but not yet answered at once
  size_t request_count() const;
  std::vector<ScriptedRequest> requests() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::testing

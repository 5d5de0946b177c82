// A hand-built HttpRequest for handler tests (router, admin) that need no socket.
// Header names are matched case-insensitively, as Beast does. One thread.
#pragma once

#include <algorithm>
#include <cctype>
#include <future>
#include <map>
#include <string>

#include "runtime/http/http_server.h"

namespace weir::test {

class FakeRequest final : public HttpRequest {
 public:
  FakeRequest(std::string method, std::string target, std::map<std::string, std::string> headers = {},
              std::string body = "")
      : method_(std::move(method)), target_(std::move(target)), body_(std::move(body)) {
    path_ = target_.substr(0, target_.find('?'));
    for (auto& [k, v] : headers) headers_[lower(k)] = v;
  }
  std::string_view method() const override { return method_; }
  std::string_view target() const override { return target_; }
  std::string_view path() const override { return path_; }
  std::string_view header(std::string_view name) const override {
    auto it = headers_.find(lower(std::string(name)));
    return it == headers_.end() ? std::string_view() : std::string_view(it->second);
  }
  const std::string& body() const override { return body_; }
  std::string& mutable_body() override { return body_; }

 private:
  static std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
  }
  std::string method_, target_, path_, body_;
  std::map<std::string, std::string> headers_;
};

// Calls `handler` and waits (up to 10 s) for its answer, which may come from another thread.
inline HttpResponse call(const Handler& handler, HttpRequest& request) {
  auto promise = std::make_shared<std::promise<HttpResponse>>();
  auto answer = promise->get_future();
  handler(request, [promise](HttpResponse r) { promise->set_value(std::move(r)); });
  if (answer.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    throw std::runtime_error("the handler did not answer within 10 s");
  }
  return answer.get();
}

}  // namespace weir::test

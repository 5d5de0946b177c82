#include "tests/support/scripted_http_server.h"

#include <utility>  // before Asio (Boost 1.74 with -std=c++20)

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <stdexcept>
#include <thread>

#include <boost/asio.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "runtime/base/thread_annotations.h"

namespace weir::testing {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 408: return "Request Timeout";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

// Parses the request head (up to and including the blank line). False when malformed.
bool parse_head(std::string_view head, ScriptedRequest* req, size_t* content_length) {
  size_t eol = head.find("\r\n");
  if (eol == std::string_view::npos) return false;
  const std::string_view line = head.substr(0, eol);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1) return false;
  req->method = std::string(line.substr(0, sp1));
  req->target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  *content_length = 0;
  size_t pos = eol + 2;
  while (pos < head.size()) {
    eol = head.find("\r\n", pos);
    if (eol == std::string_view::npos || eol == pos) break;
    const std::string_view h = head.substr(pos, eol - pos);
    pos = eol + 2;
    const size_t colon = h.find(':');
    if (colon == std::string_view::npos) return false;
    const std::string_view name = h.substr(0, colon);
    const std::string_view value = trim(h.substr(colon + 1));
    req->headers.emplace_back(std::string(name), std::string(value));
    if (iequals(name, "Content-Length")) {
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), *content_length);
      if (ec != std::errc() || end != value.data() + value.size()) return false;
    }
    if (iequals(name, "Transfer-Encoding")) return false;  // the sink never sends chunked
  }
  return true;
}

}  // namespace

bool ScriptedRequest::has_header(std::string_view name) const {
  return std::any_of(headers.begin(), headers.end(), [&](const auto& h) { return iequals(h.first, name); });
}

std::string ScriptedRequest::header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (iequals(n, name)) return v;
  }
  return {};
}

struct ScriptedHttpServer::Impl {
  Script script;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread thread;
  uint16_t port = 0;

  std::atomic<int> accepted{0};
  std::atomic<int> open{0};
  std::atomic<int> max_open{0};
  std::atomic<int> in_request{0};
  std::atomic<int> max_in_request{0};
  mutable Mutex mu;
  std::vector<ScriptedRequest> requests GUARDED_BY(mu);

  static void raise_max(std::atomic<int>& max, int value) {
    int seen = max.load();
    while (value > seen && !max.compare_exchange_weak(seen, value)) {
    }
  }

  asio::awaitable<void> session(tcp::socket socket, int index) {
    boost::system::error_code ec;
    std::string buffer;
    for (;;) {
      const size_t head_size = co_await asio::async_read_until(socket, asio::dynamic_buffer(buffer), "\r\n\r\n",
                                                               asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
      ScriptedRequest req;
      req.connection = index;
      size_t content_length = 0;
      if (!parse_head(std::string_view(buffer).substr(0, head_size), &req, &content_length)) break;
      if (buffer.size() < head_size + content_length) {
        co_await asio::async_read(socket, asio::dynamic_buffer(buffer),
                                  asio::transfer_exactly(head_size + content_length - buffer.size()),
                                  asio::redirect_error(asio::use_awaitable, ec));
        if (ec) break;
      }
      req.body = buffer.substr(head_size, content_length);
      buffer.erase(0, head_size + content_length);

      raise_max(max_in_request, ++in_request);
      ScriptedReply reply = script(req);
      {
        MutexLock lock(mu);
        requests.push_back(std::move(req));
      }
      if (reply.delay.count() > 0) {
        asio::steady_timer timer(socket.get_executor(), reply.delay);
        co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      --in_request;
      if (reply.close_without_answer) break;

      std::string out = reply.raw;
      if (out.empty()) {
        out = "HTTP/1.1 " + std::to_string(reply.status) + " " + reason_phrase(reply.status) + "\r\n";
        out += "Content-Length: " + std::to_string(reply.body.size()) + "\r\n";
        for (const auto& [name, value] : reply.headers) out += name + ": " + value + "\r\n";
        out += "\r\n";
        out += reply.body;
      }
      co_await asio::async_write(socket, asio::buffer(out), asio::redirect_error(asio::use_awaitable, ec));
      if (ec || reply.close_after_answer) break;
    }
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
    --open;
  }

  asio::awaitable<void> listen() {
    for (;;) {
      boost::system::error_code ec;
      tcp::socket socket = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
        continue;
      }
      socket.set_option(tcp::no_delay(true), ec);
      const int index = accepted++;
      raise_max(max_open, ++open);
      asio::co_spawn(io, session(std::move(socket), index), asio::detached);
    }
  }
};

ScriptedHttpServer::ScriptedHttpServer(Script script) : impl_(std::make_unique<Impl>()) {
  impl_->script = std::move(script);
  const tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"), 0);
  impl_->acceptor.open(endpoint.protocol());
  impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  impl_->acceptor.bind(endpoint);
  impl_->acceptor.listen();
  impl_->port = impl_->acceptor.local_endpoint().port();
  asio::co_spawn(impl_->io, impl_->listen(), asio::detached);
  impl_->thread = std::thread([this] { impl_->io.run(); });
}

ScriptedHttpServer::~ScriptedHttpServer() {
  impl_->io.stop();
  impl_->thread.join();
}

uint16_t ScriptedHttpServer::port() const { return impl_->port; }

std::string ScriptedHttpServer::url(std::string_view path) const {
  return "http://127.0.0.1:" + std::to_string(impl_->port) + std::string(path);
}

int ScriptedHttpServer::accepted() const { return impl_->accepted.load(); }
int ScriptedHttpServer::max_open() const { return impl_->max_open.load(); }
int ScriptedHttpServer::open_now() const { return impl_->open.load(); }
int ScriptedHttpServer::max_concurrent_requests() const { return impl_->max_in_request.load(); }

size_t ScriptedHttpServer::request_count() const {
  MutexLock lock(impl_->mu);
  return impl_->requests.size();
}

std::vector<ScriptedRequest> ScriptedHttpServer::requests() const {
  MutexLock lock(impl_->mu);
  return impl_->requests;
}

}  // namespace weir::testing

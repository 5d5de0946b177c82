#include "connectors/http/http1_connection.h"

#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/read.hpp>

namespace weir::connectors::http1 {
namespace asio = boost::asio;
namespace http = boost::beast::http;

namespace {
constexpr size_t kMaxRetryAfter = 64;          // as the curl client keeps (a date is 29 bytes)
constexpr std::uint32_t kHeaderLimit = 65536;  // an answer's status line and headers
}  // namespace

Connection::Connection(asio::io_context& io, asio::ip::tcp::endpoint to, size_t body_head_limit)
    : io_(io), socket_(io), to_(std::move(to)), body_head_limit_(body_head_limit) {}

void Connection::send(Owner* owner, std::string_view head, std::string_view body) {
  owner_ = owner;
  head_ = head;
  body_ = body;
  answer_ = Answer{};
  if (socket_.is_open()) {
    answer_.reused = true;  // an open connection has carried an earlier request
    write();
  } else {
    connect();
  }
}

void Connection::abort() {
  aborted_ = true;
  owner_ = nullptr;
  close();
}

void Connection::close() {
  boost::system::error_code ignored;
  socket_.close(ignored);  // pending operations end with operation_aborted
}

void Connection::connect() {
  // Opened here, not by Asio: close-on-exec, so an exec source's child gets no sink socket.
  const int fd = ::socket(to_.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, IPPROTO_TCP);
  boost::system::error_code ec;
  if (fd < 0) {
    ec.assign(errno, boost::system::system_category());
  } else {
    socket_.assign(to_.protocol(), fd, ec);
    if (ec) ::close(fd);
  }
  if (!ec) socket_.non_blocking(true, ec);  // write() sends without waiting
  if (!ec) socket_.set_option(asio::ip::tcp::no_delay(true), ec);
  if (!ec) socket_.set_option(asio::socket_base::keep_alive(true), ec);
  if (ec) {
    fail_later(ec);
    return;
  }
  socket_.async_connect(to_, [self = shared_from_this()](const boost::system::error_code& e) {
    if (self->waited_for_writing(e)) self->write();
  });
}

bool Connection::waited_for_writing(const boost::system::error_code& e) {
  if (aborted_) return false;
  boost::system::error_code ec = e;
  if (!ec) register_again(ec);
  if (ec) {
    answer_.error = ec;
    finish(false);
    return false;
  }
  return true;
}

void Connection::fail_later(const boost::system::error_code& ec) {
  answer_.error = ec;
  // Never from within send(): the owner is in the middle of launching this request.
  asio::post(io_, [self = shared_from_this()] {
    if (!self->aborted_) self->finish(false);
  });
}

// A wait for writability (a connect, a send that filled the socket buffer) leaves EPOLLOUT
// in Asio's epoll registration of the descriptor for good, and every acknowledgement that
// frees send buffer would then wake the loop. Registered afresh, once per connection and
// after each such send: two epoll_ctl calls (the curl client does the same, Loop::on_socket).
void Connection::register_again(boost::system::error_code& ec) {
  const auto protocol = to_.protocol();
  const int fd = socket_.release(ec);
  if (ec) return;
  socket_.assign(protocol, fd, ec);
  if (ec) {
    ::close(fd);
    return;
  }
  socket_.non_blocking(true, ec);
}

void Connection::write() {
  std::array<asio::const_buffer, 2> out{asio::buffer(head_.data(), head_.size()),
                                        asio::buffer(body_.data(), body_.size())};
  // Sent at once (one sendmsg): an asynchronous write that completes at once still costs a
  // posted handler, and the loop a zero-timeout epoll_wait to run it.
  boost::system::error_code ec;
  size_t sent = socket_.write_some(out, ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    sent = 0;
    ec = {};
  }
  if (ec) {
    // An idle connection the receiver closed meanwhile shows here (EPIPE, ECONNRESET) or
    // as an empty read (below): answer_.reused tells the owner it may send again.
    fail_later(ec);
    return;
  }
  if (sent == head_.size() + body_.size()) {
    read();
    return;
  }
  // The rest once the socket takes it (a body larger than the socket buffer).
  const size_t from_head = std::min(sent, head_.size());
  out[0] = asio::buffer(head_.data() + from_head, head_.size() - from_head);
  out[1] = asio::buffer(body_.data() + (sent - from_head), body_.size() - (sent - from_head));
  asio::async_write(socket_, out, [self = shared_from_this()](const boost::system::error_code& e, size_t /*n*/) {
    if (self->waited_for_writing(e)) self->read();
  });
}

void Connection::read() {
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  parser_->body_limit(boost::none);  // HeadBody keeps only the start
  parser_->get().body().limit = body_head_limit_;
  http::async_read(socket_, buffer_, *parser_, [self = shared_from_this()](const boost::system::error_code& e, size_t) {
    if (self->aborted_) return;
    Parser& p = *self->parser_;
    if (e) {
      self->answer_.error = e;
      self->answer_.nothing_read = self->answer_.nothing_read && !p.got_some() && self->buffer_.size() == 0;
      self->finish(false);
      return;
    }
    self->answer_.nothing_read = false;
    const unsigned status = p.get().result_int();
    if (status >= 100 && status < 200 && status != 101) {
      self->read();  // an interim answer (100 Continue, 103 Early Hints): the final one follows
      return;
    }
    self->answer_.status = static_cast<int>(status);
    const auto retry_after = p.get()[http::field::retry_after];
    self->answer_.retry_after.assign(retry_after.data(), std::min(retry_after.size(), kMaxRetryAfter));
    self->answer_.body_head = std::move(p.get().body().head);
    // Bytes past the answer were never asked for: such a connection is not used again.
    self->finish(p.keep_alive() && self->buffer_.size() == 0);
  });
}

void Connection::finish(bool keep_open) {
  if (!keep_open) {
    close();
    buffer_.clear();
  }
  Owner* owner = owner_;
  owner_ = nullptr;
  Answer answer = std::move(answer_);  // the owner may send() again from on_answer()
  if (owner != nullptr) owner->on_answer(*this, answer);
}

}  // namespace weir::connectors::http1

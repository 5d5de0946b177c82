// http1::Connection: one HTTP/1.1 keep-alive connection to a numeric address, carrying
// one request at a time on an Asio io_context. The HTTP sink's own client for plain
// http:// URLs (ADR 0270): it writes a request the sink has laid out (head and body, one
// gathered send), reads the answer with Beast's parser keeping only the status, the
// Retry-After header and the first bytes of the body, and keeps the connection for the
// next request when the answer allows it.
//
// Threads: every call and every answer on the io_context's thread. The owner's
// on_answer() runs from a completion handler, never from within send().
// Lifetime: held by a shared_ptr; pending operations hold it too, so abort() may be
// followed at once by the owner letting go of it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>

namespace weir::connectors::http1 {

// What came back for one request.
struct Answer {
  boost::system::error_code error;  // set: no complete answer (connect, send, read or parse)
  bool nothing_read = true;         // not one byte of an answer arrived
  bool reused = false;              // sent on a connection an earlier request opened
  int status = 0;                   // 0 unless a complete answer arrived
  std::string retry_after;          // the answer's Retry-After, at most 64 bytes
  std::string body_head;            // the first bytes of the answer's body (body_head_limit)
};

// A Beast body that keeps the first `limit` bytes and drops the rest: the sink needs the
// start of an answer's body for a dead reason, never the whole of a large one.
struct HeadBody {
  // The names Beast's Body concept requires.
  struct value_type {  // NOLINT(readability-identifier-naming)
    std::string head;
    size_t limit = 0;
  };
  class reader {  // NOLINT(readability-identifier-naming)
   public:
    template <bool isRequest, class Fields>
    reader(boost::beast::http::header<isRequest, Fields>& /*h*/, value_type& body) : body_(body) {}
    void init(const boost::optional<std::uint64_t>& /*length*/, boost::system::error_code& ec) { ec = {}; }
    template <class ConstBufferSequence>
    size_t put(const ConstBufferSequence& buffers, boost::system::error_code& ec);
    void finish(boost::system::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  class Owner {
   public:
    virtual void on_answer(Connection& connection, Answer& answer) = 0;

   protected:
    ~Owner() = default;
  };

  Connection(boost::asio::io_context& io, boost::asio::ip::tcp::endpoint to, size_t body_head_limit);
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sends `head` then `body` (both stay valid until the answer or abort()), opening the
  // connection first when it is closed, and reads the answer; then owner->on_answer() once.
  // Not while a request is out.
  void send(Owner* owner, std::string_view head, std::string_view body);
  // Ends the request that is out, if any, without an answer, and closes the connection
  // for good: the owner lets go of this object and opens a new one for later requests.
  void abort();
  bool is_open() const { return socket_.is_open(); }

 private:
  using Parser = boost::beast::http::response_parser<HeadBody>;
  void connect();
  void write();
  void read();
  void close();
  void fail_later(const boost::system::error_code& ec);
  void register_again(boost::system::error_code& ec);
  // After a connect or a send that waited for writability: registers the socket again and
  // says whether the request goes on (false: aborted, or failed and answered).
  bool waited_for_writing(const boost::system::error_code& e);
  // Hands `answer_` to the owner; closes the connection unless it may carry another request.
  void finish(bool keep_open);

  boost::asio::io_context& io_;
  boost::asio::ip::tcp::socket socket_;
  boost::asio::ip::tcp::endpoint to_;
  size_t body_head_limit_;
  boost::beast::flat_buffer buffer_;
  std::optional<Parser> parser_;
  Owner* owner_ = nullptr;  // set while a request is out
  bool aborted_ = false;    // by abort(): handlers still pending do nothing
  std::string_view head_;
  std::string_view body_;
  Answer answer_;
};

template <class ConstBufferSequence>
size_t HeadBody::reader::put(const ConstBufferSequence& buffers, boost::system::error_code& ec) {
  ec = {};
  size_t n = 0;
  for (auto it = boost::asio::buffer_sequence_begin(buffers); it != boost::asio::buffer_sequence_end(buffers); ++it) {
    const boost::asio::const_buffer b = *it;
    n += b.size();
    if (body_.head.size() < body_.limit) {
      const size_t take = std::min(b.size(), body_.limit - body_.head.size());
      body_.head.append(static_cast<const char*>(b.data()), take);
    }
  }
  return n;
}

}  // namespace weir::connectors::http1

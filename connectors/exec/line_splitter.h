// LineSplitter: cuts a byte stream into lines ('\n', with a '\r' before it dropped) with a
// bound on line length. A line longer than `max_line` is not buffered: its bytes are
// counted and dropped until its newline, and it comes out once as an `oversized` line
// with its full length, so one runaway line costs no memory and the next line is intact.
//
// A value type owned by one thread (the exec source's reader); no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace weir::connectors {

struct Line {
  std::string text;  // without the newline; empty when oversized
  bool oversized = false;
  size_t length = 0;    // bytes in the line (without the newline), also when oversized
  uint64_t number = 0;  // 1-based, counting every line including oversized ones
};

class LineSplitter {
 public:
  explicit LineSplitter(size_t max_line) : max_line_(max_line) {}

  // Appends the complete lines found in `data` to *out.
  void feed(std::string_view data, std::vector<Line>* out);
  // At end of stream: the unterminated last line, if any (as a line of its own).
  void finish(std::vector<Line>* out);
  uint64_t lines() const { return number_; }

 private:
  void emit(std::vector<Line>* out);

  size_t max_line_;
  std::string partial_;
  size_t partial_length_ = 0;  // bytes of the current line seen so far
  bool overflow_ = false;      // the current line passed max_line: its bytes are dropped
  uint64_t number_ = 0;
};

}  // namespace weir::connectors

#include "connectors/exec/line_splitter.h"

namespace weir::connectors {

void LineSplitter::emit(std::vector<Line>* out) {
  Line line;
  line.number = ++number_;
  // A '\r' before the newline belongs to the line ending, not the text.
  if (!overflow_ && !partial_.empty() && partial_.back() == '\r') {
    partial_.pop_back();
    --partial_length_;
  }
  line.length = partial_length_;
  line.oversized = overflow_;
  if (!overflow_) line.text = std::move(partial_);
  out->push_back(std::move(line));
  partial_.clear();
  partial_length_ = 0;
  overflow_ = false;
}

void LineSplitter::feed(std::string_view data, std::vector<Line>* out) {
  while (!data.empty()) {
    size_t nl = data.find('\n');
    std::string_view piece = data.substr(0, nl);
    partial_length_ += piece.size();
    if (!overflow_) {
      // One byte of slack: a '\r' right before the newline does not count against the limit.
      if (partial_length_ > max_line_ + 1) {
        overflow_ = true;
        partial_.clear();
        partial_.shrink_to_fit();
      } else {
        partial_.append(piece);
      }
    }
    if (nl == std::string_view::npos) return;
    if (!overflow_ && partial_length_ == max_line_ + 1 && partial_.back() != '\r') overflow_ = true;
    emit(out);
    data.remove_prefix(nl + 1);
  }
}

void LineSplitter::finish(std::vector<Line>* out) {
  if (partial_length_ > 0 || overflow_) {
    if (!overflow_ && partial_length_ == max_line_ + 1 && partial_.back() != '\r') overflow_ = true;
    emit(out);
  }
}

}  // namespace weir::connectors

#include "flows/source_tree.h"

#include <charconv>
#include <cmath>
#include <map>
#include <sstream>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include "flows/value.h"

namespace weir::flows {

const SrcNode* SrcNode::get(std::string_view key) const {
  if (kind != Kind::kMap) return nullptr;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].text == key) return &items[i];
  }
  return nullptr;
}

const SrcNode* SrcNode::key_node(std::string_view key) const {
  if (kind != Kind::kMap) return nullptr;
  for (const auto& k : keys) {
    if (k.text == key) return &k;
  }
  return nullptr;
}

std::string SrcNode::describe() const {
  switch (kind) {
    case Kind::kNull: return "null";
    case Kind::kSeq: return "a list";
    case Kind::kMap: return "a mapping";
    case Kind::kScalar: break;
  }
  if (quoted) return "a string";
  Json v = resolve_plain_scalar(text);
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_null()) return "null";
  return "a string";
}

namespace {

// Line and column (1-based, columns count code points) of a byte offset.
void position_of(std::string_view text, size_t offset, int* line, int* column) {
  int l = 1, c = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++l;
      c = 1;
    } else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      ++c;
    }
  }
  *line = l;
  *column = c;
}

Diagnostic diag_at(const std::string& file, int line, int column, std::string message) {
  return Diagnostic{Location{file, line, column}, std::move(message)};
}

// Checks done before any parser sees the bytes: size and UTF-8.
bool precheck(std::string_view text, const std::string& file, SourceDoc* doc) {
  if (text.size() > kMaxSourceBytes) {
    doc->diagnostics.push_back(diag_at(file, 1, 1, "file is larger than 8 MiB"));
    return false;
  }
  size_t bad = 0;
  if (!valid_utf8(text, &bad)) {
    int line, column;
    position_of(text, bad, &line, &column);
    doc->diagnostics.push_back(diag_at(file, line, column, "invalid UTF-8"));
    return false;
  }
  return true;
}

struct Abort {};  // unwinds the event handler on a fatal limit

class TreeBuilder : public YAML::EventHandler {
 public:
  TreeBuilder(std::string_view text, const std::string& file, SourceDoc* doc) : text_(text), file_(file), doc_(doc) {}

  bool has_root() const { return has_root_; }
  SrcNode take_root() { return std::move(root_); }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    SrcNode n = make(mark, SrcNode::Kind::kNull);
    attach(std::move(n), anchor, 1);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = anchors_.find(anchor);
    if (it == anchors_.end()) {
      fail(mark, "alias refers to a node that is not finished yet");
    }
    SrcNode copy = it->second.node;
    copy.line = mark.line + 1;
    copy.column = mark.column + 1;
    attach(std::move(copy), 0, it->second.size);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    SrcNode n = make(mark, SrcNode::Kind::kScalar);
    n.quoted = tag != "?";
    if (mark.pos >= 0 && static_cast<size_t>(mark.pos) < text_.size()) {
      char c = text_[mark.pos];
      n.block = c == '|' || c == '>';
    }
    n.text = value;
    attach(std::move(n), anchor, 1);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(make(mark, SrcNode::Kind::kSeq), anchor, mark);
  }
  void OnSequenceEnd() override { close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(make(mark, SrcNode::Kind::kMap), anchor, mark);
  }
  void OnMapEnd() override { close(); }

 private:
  struct Frame {
    SrcNode node;
    YAML::anchor_t anchor;
    size_t size;  // nodes in the subtree so far
  };
  struct Anchored {
    SrcNode node;
    size_t size;
  };

  SrcNode make(const YAML::Mark& mark, SrcNode::Kind kind) const {
    SrcNode n;
    n.kind = kind;
    n.line = mark.line + 1;
    n.column = mark.column + 1;
    n.offset = mark.pos;
    return n;
  }

  [[noreturn]] void fail(const YAML::Mark& mark, std::string message) {
    doc_->diagnostics.push_back(diag_at(file_, mark.line + 1, mark.column + 1, std::move(message)));
    throw Abort{};
  }

  void open(SrcNode n, YAML::anchor_t anchor, const YAML::Mark& mark) {
    if (static_cast<int>(stack_.size()) >= kMaxSourceDepth) {
      fail(mark, "nesting deeper than " + std::to_string(kMaxSourceDepth) + " levels");
    }
    stack_.push_back(Frame{std::move(n), anchor, 1});
  }

  void close() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    attach(std::move(f.node), f.anchor, f.size);
  }

  void attach(SrcNode n, YAML::anchor_t anchor, size_t size) {
    total_ += size;
    if (total_ > kMaxSourceNodes) {
      doc_->diagnostics.push_back(diag_at(file_, n.line, n.column, "document too large after expanding aliases"));
      throw Abort{};
    }
    if (anchor != 0) anchors_[anchor] = Anchored{n, size};
    if (stack_.empty()) {
      root_ = std::move(n);
      has_root_ = true;
      return;
    }
    Frame& parent = stack_.back();
    parent.size += size;
    SrcNode& p = parent.node;
    if (p.kind == SrcNode::Kind::kSeq) {
      p.items.push_back(std::move(n));
      return;
    }
    // Map: keys and values alternate.
    if (p.keys.size() == p.items.size()) {
      if (n.kind != SrcNode::Kind::kScalar) {
        doc_->diagnostics.push_back(
            diag_at(file_, n.line, n.column, "mapping keys must be plain strings, not " + n.describe()));
        n.kind = SrcNode::Kind::kScalar;
        n.items.clear();
        n.keys.clear();
        n.text = "?";
      } else {
        for (const auto& k : p.keys) {
          if (k.text == n.text) {
            doc_->diagnostics.push_back(diag_at(file_, n.line, n.column, "duplicate key \"" + n.text + "\""));
            break;
          }
        }
      }
      p.keys.push_back(std::move(n));
    } else {
      p.items.push_back(std::move(n));
    }
  }

  std::string_view text_;
  const std::string& file_;
  SourceDoc* doc_;
  std::vector<Frame> stack_;
  std::map<YAML::anchor_t, Anchored> anchors_;
  size_t total_ = 0;
  SrcNode root_;
  bool has_root_ = false;
};

}  // namespace

SourceDoc parse_yaml(std::string_view text, const std::string& file) {
  SourceDoc doc;
  if (!precheck(text, file, &doc)) return doc;
  std::istringstream in{std::string(text)};
  TreeBuilder builder(text, file, &doc);
  try {
    YAML::Parser parser(in);
    if (!parser.HandleNextDocument(builder) || !builder.has_root()) {
      doc.diagnostics.push_back(diag_at(file, 1, 1, "file is empty"));
      return doc;
    }
    SrcNode root = builder.take_root();
    TreeBuilder rest(text, file, &doc);
    if (parser.HandleNextDocument(rest)) {
      doc.diagnostics.push_back(diag_at(file, 1, 1, "expected one YAML document, found several"));
    }
    doc.root = std::move(root);
    doc.has_root = true;
  } catch (const Abort&) {
    return doc;
  } catch (const YAML::Exception& e) {
    int line = e.mark.is_null() ? 1 : e.mark.line + 1;
    int column = e.mark.is_null() ? 1 : e.mark.column + 1;
    doc.diagnostics.push_back(diag_at(file, line, column, "YAML syntax error: " + e.msg));
    return doc;
  } catch (const std::exception& e) {
    doc.diagnostics.push_back(diag_at(file, 1, 1, std::string("YAML error: ") + e.what()));
    return doc;
  }
  doc.ok = doc.diagnostics.empty();
  return doc;
}

// ---- JSON --------------------------------------------------------------------------

namespace {

class JsonSourceParser {
 public:
  JsonSourceParser(std::string_view text, const std::string& file, SourceDoc* doc) : s_(text), file_(file), doc_(doc) {}

  bool parse(SrcNode* out) {
    if (s_.size() >= 3 && s_.substr(0, 3) == "\xEF\xBB\xBF") advance(3);
    skip_ws();
    if (i_ >= s_.size()) return error("file is empty");
    if (!value(out, 0)) return false;
    skip_ws();
    if (i_ < s_.size()) return error("unexpected text after the JSON value");
    return true;
  }

 private:
  bool error(std::string message) {
    doc_->diagnostics.push_back(diag_at(file_, line_, column_, "JSON syntax error: " + std::move(message)));
    return false;
  }

  void advance(size_t n = 1) {
    for (size_t k = 0; k < n && i_ < s_.size(); ++k, ++i_) {
      if (s_[i_] == '\n') {
        ++line_;
        column_ = 1;
      } else if ((static_cast<unsigned char>(s_[i_]) & 0xC0) != 0x80) {
        ++column_;
      }
    }
  }

  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) {
      advance();
    }
  }

  SrcNode start(SrcNode::Kind kind) const {
    SrcNode n;
    n.kind = kind;
    n.line = line_;
    n.column = column_;
    n.offset = static_cast<int>(i_);
    return n;
  }

  bool value(SrcNode* out, int depth) {
    if (depth >= kMaxSourceDepth) {
      return error("nesting deeper than " + std::to_string(kMaxSourceDepth) + " levels");
    }
    if (++nodes_ > kMaxSourceNodes) return error("document too large");
    if (i_ >= s_.size()) return error("unexpected end of input");
    char c = s_[i_];
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') {
      *out = start(SrcNode::Kind::kScalar);
      out->quoted = true;
      return string(&out->text);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number(out);
    for (const char* word : {"true", "false", "null"}) {
      std::string_view w(word);
      if (s_.substr(i_, w.size()) == w) {
        *out = start(w == "null" ? SrcNode::Kind::kNull : SrcNode::Kind::kScalar);
        out->text = std::string(w);
        advance(w.size());
        return true;
      }
    }
    return error("unexpected character '" + std::string(1, c) + "'");
  }

  bool object(SrcNode* out, int depth) {
    *out = start(SrcNode::Kind::kMap);
    advance();  // {
    skip_ws();
    if (i_ < s_.size() && s_[i_] == '}') {
      advance();
      return true;
    }
    while (true) {
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != '"') return error("expected a string key");
      SrcNode key = start(SrcNode::Kind::kScalar);
      key.quoted = true;
      if (!string(&key.text)) return false;
      for (const auto& k : out->keys) {
        if (k.text == key.text) {
          doc_->diagnostics.push_back(diag_at(file_, key.line, key.column, "duplicate key \"" + key.text + "\""));
          break;
        }
      }
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != ':') return error("expected ':' after the key");
      advance();
      skip_ws();
      SrcNode v;
      if (!value(&v, depth + 1)) return false;
      out->keys.push_back(std::move(key));
      out->items.push_back(std::move(v));
      skip_ws();
      if (i_ < s_.size() && s_[i_] == ',') {
        advance();
        continue;
      }
      if (i_ < s_.size() && s_[i_] == '}') {
        advance();
        return true;
      }
      return error("expected ',' or '}'");
    }
  }

  bool array(SrcNode* out, int depth) {
    *out = start(SrcNode::Kind::kSeq);
    advance();  // [
    skip_ws();
    if (i_ < s_.size() && s_[i_] == ']') {
      advance();
      return true;
    }
    while (true) {
      skip_ws();
      SrcNode v;
      if (!value(&v, depth + 1)) return false;
      out->items.push_back(std::move(v));
      skip_ws();
      if (i_ < s_.size() && s_[i_] == ',') {
        advance();
        continue;
      }
      if (i_ < s_.size() && s_[i_] == ']') {
        advance();
        return true;
      }
      return error("expected ',' or ']'");
    }
  }

  bool hex4(uint32_t* out) {
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      if (i_ >= s_.size()) return error("unterminated \\u escape");
      char h = s_[i_];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f') v |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= static_cast<uint32_t>(h - 'A' + 10);
      else return error("invalid \\u escape");
      advance();
    }
    *out = v;
    return true;
  }

  bool string(std::string* out) {
    advance();  // opening quote
    while (true) {
      if (i_ >= s_.size()) return error("unterminated string");
      auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        advance();
        return true;
      }
      if (c < 0x20) return error("control character in string (escape it)");
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        advance();
        continue;
      }
      advance();
      if (i_ >= s_.size()) return error("unterminated string");
      char e = s_[i_];
      advance();
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(&cp)) return false;
          if (cp >= 0xDC00 && cp <= 0xDFFF) return error("lone low surrogate in \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.substr(i_, 2) != "\\u") return error("high surrogate without a low surrogate");
            advance(2);
            uint32_t lo = 0;
            if (!hex4(&lo)) return false;
            if (lo < 0xDC00 || lo > 0xDFFF) return error("high surrogate without a low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: return error(std::string("invalid escape \\") + e);
      }
    }
  }

  bool number(SrcNode* out) {
    *out = start(SrcNode::Kind::kScalar);
    size_t b = i_;
    size_t j = i_;
    auto digit = [&](size_t k) { return k < s_.size() && s_[k] >= '0' && s_[k] <= '9'; };
    if (j < s_.size() && s_[j] == '-') ++j;
    if (!digit(j)) return error("invalid number");
    if (s_[j] == '0') {
      ++j;
      if (digit(j)) return error("leading zeros are not allowed in JSON numbers");
    } else {
      while (digit(j)) ++j;
    }
    if (j < s_.size() && s_[j] == '.') {
      ++j;
      if (!digit(j)) return error("invalid number");
      while (digit(j)) ++j;
    }
    if (j < s_.size() && (s_[j] == 'e' || s_[j] == 'E')) {
      ++j;
      if (j < s_.size() && (s_[j] == '+' || s_[j] == '-')) ++j;
      if (!digit(j)) return error("invalid number");
      while (digit(j)) ++j;
    }
    out->text = std::string(s_.substr(b, j - b));
    advance(j - b);
    return true;
  }

  std::string_view s_;
  const std::string& file_;
  SourceDoc* doc_;
  size_t i_ = 0;
  int line_ = 1, column_ = 1;
  size_t nodes_ = 0;
};

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

SourceDoc parse_json_source(std::string_view text, const std::string& file) {
  SourceDoc doc;
  if (!precheck(text, file, &doc)) return doc;
  JsonSourceParser p(text, file, &doc);
  SrcNode root;
  if (p.parse(&root)) {
    doc.root = std::move(root);
    doc.has_root = true;
  }
  doc.ok = doc.diagnostics.empty();
  return doc;
}

SourceDoc parse_source(std::string_view text, const std::string& file) {
  if (ends_with(file, ".json") || ends_with(file, ".JSON")) return parse_json_source(text, file);
  return parse_yaml(text, file);
}

void substitute_tree(SrcNode* n, const EnvLookup& env, const std::string& file, std::vector<Diagnostic>* diagnostics) {
  if (n->kind == SrcNode::Kind::kScalar) {
    if (n->text.find('$') == std::string::npos) return;
    std::string error;
    auto v = substitute_env(n->text, env, &error);
    if (v) {
      if (*v != n->text && n->text.find("${") != std::string::npos) n->written = n->text;
      n->text = std::move(*v);
    } else {
      diagnostics->push_back(diag_at(file, n->line, n->column, error));
      n->bad = true;
    }
    return;
  }
  for (auto& item : n->items) substitute_tree(&item, env, file, diagnostics);
}

// ---- plain values --------------------------------------------------------------------

namespace {

enum class PlainKind { kString, kValue, kOutOfRange };

PlainKind resolve(const std::string& t, Json* out) {
  if (t.empty() || t == "~" || t == "null" || t == "Null" || t == "NULL") {
    *out = nullptr;
    return PlainKind::kValue;
  }
  if (t == "true" || t == "True" || t == "TRUE") {
    *out = true;
    return PlainKind::kValue;
  }
  if (t == "false" || t == "False" || t == "FALSE") {
    *out = false;
    return PlainKind::kValue;
  }
  const char* b = t.data();
  const char* e = b + t.size();
  // Octal and hex ints (core schema).
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'o' || t[1] == 'x')) {
    int base = t[1] == 'o' ? 8 : 16;
    int64_t v = 0;
    auto r = std::from_chars(b + 2, e, v, base);
    if (r.ptr == e && r.ec == std::errc()) {
      *out = v;
      return PlainKind::kValue;
    }
    if (r.ptr == e && r.ec == std::errc::result_out_of_range) return PlainKind::kOutOfRange;
    *out = t;
    return PlainKind::kString;
  }
  // [-+]?[0-9]+  |  [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
  size_t i = 0;
  if (i < t.size() && (t[i] == '-' || t[i] == '+')) ++i;
  size_t int_digits = 0;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i, ++int_digits;
  bool is_float = false;
  size_t frac_digits = 0;
  if (i < t.size() && t[i] == '.') {
    is_float = true;
    ++i;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i, ++frac_digits;
  }
  if (int_digits + frac_digits == 0) {
    std::string_view rest(t);
    size_t sign = (t[0] == '-' || t[0] == '+') ? 1 : 0;
    rest.remove_prefix(sign);
    if (rest == ".inf" || rest == ".Inf" || rest == ".INF" || rest == ".nan" || rest == ".NaN" || rest == ".NAN") {
      return PlainKind::kOutOfRange;  // JSON has no infinity or NaN
    }
    *out = t;
    return PlainKind::kString;
  }
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    size_t j = i + 1;
    if (j < t.size() && (t[j] == '-' || t[j] == '+')) ++j;
    size_t exp_digits = 0;
    while (j < t.size() && t[j] >= '0' && t[j] <= '9') ++j, ++exp_digits;
    if (exp_digits == 0) {
      *out = t;
      return PlainKind::kString;
    }
    is_float = true;
    i = j;
  }
  if (i != t.size()) {
    *out = t;
    return PlainKind::kString;
  }
  const char* nb = b + (t[0] == '+' ? 1 : 0);
  if (!is_float) {
    int64_t v = 0;
    auto r = std::from_chars(nb, e, v);
    if (r.ec == std::errc() && r.ptr == e) {
      *out = v;
      return PlainKind::kValue;
    }
    // Too big for int64: fall through to double, as JSON parsers do.
  }
  double d = 0;
  auto r = std::from_chars(nb, e, d);
  if (r.ec != std::errc() || r.ptr != e || !std::isfinite(d)) return PlainKind::kOutOfRange;
  *out = d;
  return PlainKind::kValue;
}

}  // namespace

Json resolve_plain_scalar(const std::string& text) {
  Json v;
  if (resolve(text, &v) == PlainKind::kOutOfRange) return Json(text);
  return v;
}

bool to_plain_json(const SrcNode& n, Json* out, std::string* error, const SrcNode** where) {
  switch (n.kind) {
    case SrcNode::Kind::kNull: *out = nullptr; return true;
    case SrcNode::Kind::kScalar:
      if (n.quoted) {
        *out = n.text;
        return true;
      }
      if (resolve(n.text, out) == PlainKind::kOutOfRange) {
        if (error) *error = "number " + n.text + " is out of range (JSON numbers are finite)";
        if (where) *where = &n;
        return false;
      }
      return true;
    case SrcNode::Kind::kSeq: {
      Json arr = Json::array();
      for (const auto& item : n.items) {
        Json v;
        if (!to_plain_json(item, &v, error, where)) return false;
        arr.push_back(std::move(v));
      }
      *out = std::move(arr);
      return true;
    }
    case SrcNode::Kind::kMap: {
      Json obj = Json::object();
      for (size_t i = 0; i < n.keys.size(); ++i) {
        Json v;
        if (!to_plain_json(n.items[i], &v, error, where)) return false;
        obj[n.keys[i].text] = std::move(v);
      }
      *out = std::move(obj);
      return true;
    }
  }
  return false;
}

}  // namespace weir::flows

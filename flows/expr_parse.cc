// Lexer, parser and compiler of the expression language: text → flat AST.
#include <charconv>
#include <cmath>

#include "flows/expr_impl.h"
#include "flows/tables.h"
#include "flows/text.h"
#include "flows/value.h"

namespace weir::flows {

namespace {

enum class Tok : uint8_t {
  kEnd,
  kNumber,
  kString,
  kIdent,
  kLParen,
  kRParen,
  kLBracket,
  kRBracket,
  kLBrace,
  kRBrace,
  kComma,
  kColon,
  kDot,
  kQuestion,
  kQQ,
  kArrow,
  kPlus,
  kMinus,
  kStar,
  kSlash,
  kPercent,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kAnd,
  kOr,
  kNot,
};

struct Token {
  Tok kind = Tok::kEnd;
  uint32_t pos = 0, end = 0;
  std::string text;  // identifier name or decoded string literal
  Json number;       // kNumber
};

const char* tok_name(Tok t) {
  switch (t) {
    case Tok::kEnd: return "end of expression";
    case Tok::kNumber: return "number";
    case Tok::kString: return "string";
    case Tok::kIdent: return "name";
    case Tok::kLParen: return "'('";
    case Tok::kRParen: return "')'";
    case Tok::kLBracket: return "'['";
    case Tok::kRBracket: return "']'";
    case Tok::kLBrace: return "'{'";
    case Tok::kRBrace: return "'}'";
    case Tok::kComma: return "','";
    case Tok::kColon: return "':'";
    case Tok::kDot: return "'.'";
    case Tok::kQuestion: return "'?'";
    case Tok::kQQ: return "'?\?'";
    case Tok::kArrow: return "'=>'";
    case Tok::kPlus: return "'+'";
    case Tok::kMinus: return "'-'";
    case Tok::kStar: return "'*'";
    case Tok::kSlash: return "'/'";
    case Tok::kPercent: return "'%'";
    case Tok::kEq: return "'=='";
    case Tok::kNe: return "'!='";
    case Tok::kLt: return "'<'";
    case Tok::kLe: return "'<='";
    case Tok::kGt: return "'>'";
    case Tok::kGe: return "'>='";
    case Tok::kAnd: return "'&&'";
    case Tok::kOr: return "'||'";
    case Tok::kNot: return "'!'";
  }
  return "token";
}

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }

struct Failure {
  size_t offset;
  std::string message;
};

class Lexer {
 public:
  explicit Lexer(std::string_view s) : s_(s) {}

  bool run(std::vector<Token>* out, Failure* f) {
    while (true) {
      while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
      Token t;
      t.pos = static_cast<uint32_t>(i_);
      if (i_ >= s_.size()) {
        t.kind = Tok::kEnd;
        t.end = t.pos;
        out->push_back(std::move(t));
        return true;
      }
      char c = s_[i_];
      if (c >= '0' && c <= '9') {
        if (!number(&t, f)) return false;
      } else if (c == '"' || c == '\'') {
        if (!string(&t, f)) return false;
      } else if (is_ident_start(c)) {
        size_t b = i_;
        while (i_ < s_.size() && is_ident_char(s_[i_])) ++i_;
        t.kind = Tok::kIdent;
        t.text = std::string(s_.substr(b, i_ - b));
      } else if (!punct(&t, f)) {
        return false;
      }
      t.end = static_cast<uint32_t>(i_);
      out->push_back(std::move(t));
    }
  }

 private:
  bool punct(Token* t, Failure* f) {
    char c = s_[i_];
    char n = i_ + 1 < s_.size() ? s_[i_ + 1] : '\0';
    auto two = [&](Tok k) {
      t->kind = k;
      i_ += 2;
      return true;
    };
    auto one = [&](Tok k) {
      t->kind = k;
      i_ += 1;
      return true;
    };
    switch (c) {
      case '(': return one(Tok::kLParen);
      case ')': return one(Tok::kRParen);
      case '[': return one(Tok::kLBracket);
      case ']': return one(Tok::kRBracket);
      case '{': return one(Tok::kLBrace);
      case '}': return one(Tok::kRBrace);
      case ',': return one(Tok::kComma);
      case ':': return one(Tok::kColon);
      case '.': return one(Tok::kDot);
      case '+': return one(Tok::kPlus);
      case '-': return one(Tok::kMinus);
      case '*': return one(Tok::kStar);
      case '/': return one(Tok::kSlash);
      case '%': return one(Tok::kPercent);
      case '?': return n == '?' ? two(Tok::kQQ) : one(Tok::kQuestion);
      case '=':
        if (n == '=') return two(Tok::kEq);
        if (n == '>') return two(Tok::kArrow);
        *f = {i_, "unexpected '=' (compare with ==)"};
        return false;
      case '!': return n == '=' ? two(Tok::kNe) : one(Tok::kNot);
      case '<': return n == '=' ? two(Tok::kLe) : one(Tok::kLt);
      case '>': return n == '=' ? two(Tok::kGe) : one(Tok::kGt);
      case '&':
        if (n == '&') return two(Tok::kAnd);
        *f = {i_, "unexpected '&' (logical and is &&)"};
        return false;
      case '|':
        if (n == '|') return two(Tok::kOr);
        *f = {i_, "unexpected '|' (logical or is ||)"};
        return false;
      default: break;
    }
    auto uc = static_cast<unsigned char>(c);
    if (uc >= 0x80) {
      *f = {i_, "unexpected non-ASCII character (names are ASCII; quote strings)"};
    } else if (uc < 0x20 || uc == 0x7F) {
      *f = {i_, "unexpected control character"};
    } else {
      *f = {i_, std::string("unexpected character '") + c + "'"};
    }
    return false;
  }

  bool number(Token* t, Failure* f) {
    size_t b = i_;
    auto digit = [&](size_t k) { return k < s_.size() && s_[k] >= '0' && s_[k] <= '9'; };
    while (digit(i_)) ++i_;
    if (i_ < s_.size() && s_[i_] == '.' && digit(i_ + 1)) {
      ++i_;
      while (digit(i_)) ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      size_t j = i_ + 1;
      if (j < s_.size() && (s_[j] == '+' || s_[j] == '-')) ++j;
      if (!digit(j)) {
        *f = {i_, "malformed number: exponent without digits"};
        return false;
      }
      i_ = j;
      while (digit(i_)) ++i_;
    }
    if (i_ < s_.size() && is_ident_char(s_[i_])) {
      *f = {b, "malformed number"};
      return false;
    }
    t->kind = Tok::kNumber;
    t->text = std::string(s_.substr(b, i_ - b));
    return true;
  }

  bool hex4(uint32_t* out, Failure* f) {
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      if (i_ >= s_.size()) {
        *f = {i_, "unterminated \\u escape"};
        return false;
      }
      char h = s_[i_];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f') v |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= static_cast<uint32_t>(h - 'A' + 10);
      else {
        *f = {i_, "\\u needs four hex digits"};
        return false;
      }
      ++i_;
    }
    *out = v;
    return true;
  }

  bool string(Token* t, Failure* f) {
    char quote = s_[i_];
    size_t start = i_;
    ++i_;
    std::string out;
    while (true) {
      if (i_ >= s_.size()) {
        *f = {start, "unterminated string"};
        return false;
      }
      char c = s_[i_];
      if (c == quote) {
        ++i_;
        break;
      }
      if (c != '\\') {
        out.push_back(c);
        ++i_;
        continue;
      }
      size_t esc = i_;
      ++i_;
      if (i_ >= s_.size()) {
        *f = {start, "unterminated string"};
        return false;
      }
      char e = s_[i_++];
      switch (e) {
        case '"': out.push_back('"'); break;
        case '\'': out.push_back('\''); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case '0': out.push_back('\0'); break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(&cp, f)) return false;
          if (cp >= 0xDC00 && cp <= 0xDFFF) {
            *f = {esc, "lone low surrogate in \\u escape"};
            return false;
          }
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.substr(i_, 2) != "\\u") {
              *f = {esc, "high surrogate \\u escape without a low surrogate"};
              return false;
            }
            i_ += 2;
            uint32_t lo = 0;
            if (!hex4(&lo, f)) return false;
            if (lo < 0xDC00 || lo > 0xDFFF) {
              *f = {esc, "high surrogate \\u escape without a low surrogate"};
              return false;
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(&out, cp);
          break;
        }
        default: *f = {esc, std::string("unknown escape \\") + e}; return false;
      }
    }
    t->kind = Tok::kString;
    t->text = std::move(out);
    return true;
  }

  std::string_view s_;
  size_t i_ = 0;
};

class Parser {
 public:
  Parser(std::string_view src, std::vector<Token> toks, const CompileScope& scope, Expression::Impl* out)
      : src_(src), toks_(std::move(toks)), scope_(scope), x_(out) {}

  bool run(Failure* f) {
    uint32_t root;
    if (!expr(&root) || !expect(Tok::kEnd, "end of expression")) {
      *f = failure_;
      return false;
    }
    x_->root = root;
    return true;
  }

 private:
  using Ix = uint32_t;

  const Token& cur() const { return toks_[p_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(p_ + k, toks_.size() - 1)]; }
  bool at(Tok t) const { return cur().kind == t; }
  bool accept(Tok t) {
    if (!at(t)) return false;
    ++p_;
    return true;
  }
  bool fail(size_t offset, std::string message) {
    if (!failed_) {
      failed_ = true;
      failure_ = {offset, std::move(message)};
    }
    return false;
  }
  bool unexpected(const char* wanted) {
    const Token& t = cur();
    std::string got = t.kind == Tok::kIdent ? "'" + t.text + "'" : tok_name(t.kind);
    if (t.kind == Tok::kArrow) {
      return fail(t.pos, "unexpected '=>': a lambda (x => ...) is only allowed as the argument of map() or filter()");
    }
    return fail(t.pos, std::string("expected ") + wanted + ", found " + got);
  }
  bool expect(Tok t, const char* wanted) {
    if (accept(t)) return true;
    return unexpected(wanted);
  }

  // ---- node construction --------------------------------------------------------

  bool add(Op op, uint32_t pos, uint32_t end, std::initializer_list<Ix> kids, Ix* out) {
    return add_v(op, pos, end, std::vector<Ix>(kids), out);
  }

  bool add_v(Op op, uint32_t pos, uint32_t end, const std::vector<Ix>& kids, Ix* out, uint32_t aux = 0, uint16_t fn = 0,
             uint8_t slot = 0) {
    int d = 0;
    for (Ix k : kids) d = std::max(d, depth_[k]);
    if (d + 1 > kMaxExpressionDepth) return fail(pos, "expression is nested too deeply");
    Node n;
    n.op = op;
    n.pos = pos;
    n.end = end;
    n.first = static_cast<uint32_t>(x_->kids.size());
    n.count = static_cast<uint32_t>(kids.size());
    n.aux = aux;
    n.fn = fn;
    n.slot = slot;
    for (Ix k : kids) x_->kids.push_back(k);
    x_->nodes.push_back(n);
    depth_.push_back(d + 1);
    *out = static_cast<Ix>(x_->nodes.size() - 1);
    fold(*out);
    return true;
  }

  bool constant(Json v, uint32_t pos, uint32_t end, Ix* out) {
    x_->consts.push_back(std::move(v));
    Node n;
    n.op = Op::kConst;
    n.pos = pos;
    n.end = end;
    n.aux = static_cast<uint32_t>(x_->consts.size() - 1);
    x_->nodes.push_back(n);
    depth_.push_back(1);
    *out = static_cast<Ix>(x_->nodes.size() - 1);
    return true;
  }

  bool is_const(Ix i) const { return x_->nodes[i].op == Op::kConst; }

  // Evaluates a node whose children are all constants now, once, and turns it into a
  // constant. A failing evaluation is left for run time, where it becomes a flow error
  // for the events that reach it (a test case may want exactly that).
  void fold(Ix i) {
    Node& n = x_->nodes[i];
    switch (n.op) {
      case Op::kConst:
      case Op::kThis:
      case Op::kMeta:
      case Op::kVar:
      case Op::kMap:
      case Op::kFilter:
      case Op::kLookup: return;
      case Op::kCall:
        if (!builtin(n.fn).pure) return;
        break;
      default: break;
    }
    for (uint32_t k = 0; k < n.count; ++k) {
      if (!is_const(x_->kid(n, k))) return;
    }
    EvalContext ctx;
    Json null_self;
    ctx.self = &null_self;
    Json scratch;
    const Json* r = x_->eval(i, ctx, scratch);
    if (r == nullptr) return;
    x_->consts.push_back(r == &scratch ? std::move(scratch) : Json(*r));  // moves the computed one
    Node& m = x_->nodes[i];  // eval does not add nodes, but keep the reference honest
    m.op = Op::kConst;
    m.aux = static_cast<uint32_t>(x_->consts.size() - 1);
    m.count = 0;
    depth_[i] = 1;
  }

  // ---- grammar ------------------------------------------------------------------
  //   expr     := coalesce ('?' expr ':' expr)?
  //   coalesce := or ('??' or)*
  //   or       := and ('||' and)*
  //   and      := eq ('&&' eq)*
  //   eq       := rel (('=='|'!=') rel)*
  //   rel      := add (('<'|'<='|'>'|'>=') add)*
  //   add      := mul (('+'|'-') mul)*
  //   mul      := unary (('*'|'/'|'%') unary)*
  //   unary    := ('!'|'-') unary | postfix
  //   postfix  := primary ('.' name | '.' name '(' args ')' | '[' expr ']')*

  bool expr(Ix* out) {
    Ix c;
    uint32_t pos = cur().pos;
    if (!coalesce(&c)) return false;
    if (!accept(Tok::kQuestion)) {
      *out = c;
      return true;
    }
    Ix a, b;
    if (!expr(&a) || !expect(Tok::kColon, "':' of the ?: operator") || !expr(&b)) return false;
    return add(Op::kCond, pos, x_->nodes[b].end, {c, a, b}, out);
  }

  template <typename Next>
  bool binary_level(Ix* out, Next next, std::initializer_list<std::pair<Tok, Op>> ops) {
    uint32_t pos = cur().pos;
    Ix l;
    if (!(this->*next)(&l)) return false;
    while (true) {
      Op op = Op::kConst;
      bool found = false;
      for (auto [t, o] : ops) {
        if (at(t)) {
          op = o;
          found = true;
          break;
        }
      }
      if (!found) break;
      ++p_;
      Ix r;
      if (!(this->*next)(&r)) return false;
      Ix n;
      if (!add(op, pos, x_->nodes[r].end, {l, r}, &n)) return false;
      l = n;
    }
    *out = l;
    return true;
  }

  bool coalesce(Ix* out) { return binary_level(out, &Parser::disjunction, {{Tok::kQQ, Op::kCoalesce}}); }
  bool disjunction(Ix* out) { return binary_level(out, &Parser::conjunction, {{Tok::kOr, Op::kOr}}); }
  bool conjunction(Ix* out) { return binary_level(out, &Parser::eq, {{Tok::kAnd, Op::kAnd}}); }
  bool eq(Ix* out) { return binary_level(out, &Parser::rel, {{Tok::kEq, Op::kEq}, {Tok::kNe, Op::kNe}}); }
  bool rel(Ix* out) {
    return binary_level(out, &Parser::additive,
                        {{Tok::kLt, Op::kLt}, {Tok::kLe, Op::kLe}, {Tok::kGt, Op::kGt}, {Tok::kGe, Op::kGe}});
  }
  bool additive(Ix* out) { return binary_level(out, &Parser::mul, {{Tok::kPlus, Op::kAdd}, {Tok::kMinus, Op::kSub}}); }
  bool mul(Ix* out) {
    return binary_level(out, &Parser::unary,
                        {{Tok::kStar, Op::kMul}, {Tok::kSlash, Op::kDiv}, {Tok::kPercent, Op::kMod}});
  }

  bool unary(Ix* out) {
    // Every recursive path of the grammar passes through here: bound the C++ stack.
    if (++nesting_ > kMaxExpressionDepth) return fail(cur().pos, "expression is nested too deeply");
    bool ok = unary_inner(out);
    --nesting_;
    return ok;
  }

  bool unary_inner(Ix* out) {
    uint32_t pos = cur().pos;
    if (accept(Tok::kNot)) {
      Ix a;
      if (!unary(&a)) return false;
      return add(Op::kNot, pos, x_->nodes[a].end, {a}, out);
    }
    if (accept(Tok::kMinus)) {
      // -9223372036854775808 is an int64: read the sign with the literal.
      if (at(Tok::kNumber) && !(peek().kind == Tok::kDot || peek().kind == Tok::kLBracket)) {
        Token t = cur();
        ++p_;
        return number_literal("-" + t.text, pos, t.end, out);
      }
      Ix a;
      if (!unary(&a)) return false;
      return add(Op::kNeg, pos, x_->nodes[a].end, {a}, out);
    }
    return postfix(out);
  }

  bool number_literal(const std::string& text, uint32_t pos, uint32_t end, Ix* out) {
    const char* b = text.data();
    const char* e = b + text.size();
    bool is_float = text.find_first_of(".eE") != std::string::npos;
    if (!is_float) {
      int64_t v;
      auto r = std::from_chars(b, e, v);
      if (r.ec == std::errc() && r.ptr == e) return constant(Json(v), pos, end, out);
    }
    double d = 0;
    auto r = std::from_chars(b, e, d);
    bool underflow = r.ec == std::errc::result_out_of_range &&
                     (text.find("e-") != std::string::npos || text.find("E-") != std::string::npos);
    if (underflow) {
      d = text[0] == '-' ? -0.0 : 0.0;
    } else if (r.ec != std::errc() || r.ptr != e || !std::isfinite(d)) {
      return fail(pos, "number " + text + " is out of range");
    }
    return constant(Json(d), pos, end, out);
  }

  bool postfix(Ix* out) {
    uint32_t pos = cur().pos;
    Ix base;
    if (!primary(&base)) return false;
    while (true) {
      if (accept(Tok::kDot)) {
        if (!at(Tok::kIdent)) return unexpected("a name after '.'");
        Token name = cur();
        ++p_;
        if (at(Tok::kLParen)) {
          if (!method(base, pos, name, &base)) return false;
          continue;
        }
        PathSeg seg;
        seg.key = name.text;
        if (!extend_path(base, std::move(seg), pos, name.end, &base)) return false;
        continue;
      }
      if (accept(Tok::kLBracket)) {
        Ix idx;
        if (!expr(&idx)) return false;
        uint32_t end = cur().end;
        if (!expect(Tok::kRBracket, "']'")) return false;
        const Node& in = x_->nodes[idx];
        if (in.op == Op::kConst) {
          const Json& v = x_->consts[in.aux];
          int64_t i;
          PathSeg seg;
          if (v.is_string()) {
            seg.key = v.get<std::string>();
            if (!extend_path(base, std::move(seg), pos, end, &base)) return false;
            continue;
          }
          if (get_int(v, &i)) {
            seg.is_index = true;
            seg.index = i;
            if (!extend_path(base, std::move(seg), pos, end, &base)) return false;
            continue;
          }
          return fail(in.pos, std::string("an index must be an int or a string, not ") + type_name(v));
        }
        if (!add(Op::kIndex, pos, end, {base, idx}, &base)) return false;
        continue;
      }
      break;
    }
    *out = base;
    return true;
  }

  bool extend_path(Ix base, PathSeg seg, uint32_t pos, uint32_t end, Ix* out) {
    Node& b = x_->nodes[base];
    // A path on a path (this.a then .b) grows in place: one node walks all of it.
    if (b.op == Op::kPath && base == x_->nodes.size() - 1) {
      x_->paths[b.aux].push_back(std::move(seg));
      b.end = end;
      fold(base);
      *out = base;
      return true;
    }
    x_->paths.push_back({std::move(seg)});
    return add_v(Op::kPath, pos, end, {base}, out, static_cast<uint32_t>(x_->paths.size() - 1));
  }

  bool args(std::vector<Ix>* out) {
    // '(' already consumed.
    if (accept(Tok::kRParen)) return true;
    while (true) {
      Ix a;
      if (!expr(&a)) return false;
      out->push_back(a);
      if (accept(Tok::kComma)) {
        if (accept(Tok::kRParen)) return true;
        continue;
      }
      return expect(Tok::kRParen, "',' or ')'");
    }
  }

  bool lambda_param(std::string* name) {
    if (at(Tok::kIdent) && peek().kind == Tok::kArrow) {
      *name = cur().text;
      p_ += 2;
    } else if (at(Tok::kLParen) && peek().kind == Tok::kIdent && peek(2).kind == Tok::kRParen &&
               peek(3).kind == Tok::kArrow) {
      *name = peek().text;
      p_ += 4;
    } else {
      return fail(cur().pos, "expected a lambda such as x => x.price");
    }
    if (*name == "this" || *name == "true" || *name == "false" || *name == "null") {
      return fail(toks_[p_ - 2].pos, "'" + *name + "' cannot be a lambda parameter");
    }
    return true;
  }

  bool method(Ix recv, uint32_t pos, const Token& name, Ix* out) {
    ++p_;  // '('
    if (name.text == "map" || name.text == "filter") {
      std::string param;
      if (!lambda_param(&param)) return false;
      if (lambdas_.size() >= static_cast<size_t>(kMaxLambdaDepth)) {
        return fail(name.pos, "lambdas nested too deeply");
      }
      lambdas_.push_back(param);
      Ix body;
      bool ok = expr(&body);
      lambdas_.pop_back();
      if (!ok) return false;
      uint32_t end = cur().end;
      if (!expect(Tok::kRParen, "')' after the lambda")) return false;
      auto slot = static_cast<uint8_t>(lambdas_.size());
      return add_v(name.text == "map" ? Op::kMap : Op::kFilter, pos, end, {recv, body}, out, 0, 0, slot);
    }
    if (name.text == "lookup") return fail(name.pos, "lookup is a function: write lookup(table, key)");
    int fn = find_builtin(name.text);
    if (fn < 0) return fail(name.pos, "unknown method '" + name.text + "'");
    std::vector<Ix> a{recv};
    if (!args(&a)) return false;
    return call(fn, a, pos, toks_[p_ - 1].end, name, out);
  }

  bool call(int fn, const std::vector<Ix>& a, uint32_t pos, uint32_t end, const Token& name, Ix* out) {
    const Builtin& b = builtin(fn);
    int n = static_cast<int>(a.size());
    if (n < b.min_args || (b.max_args >= 0 && n > b.max_args)) {
      std::string want;
      if (b.max_args < 0) want = "at least " + std::to_string(b.min_args);
      else if (b.min_args == b.max_args) want = std::to_string(b.min_args);
      else want = std::to_string(b.min_args) + " to " + std::to_string(b.max_args);
      return fail(name.pos, std::string(b.name) + "() takes " + want + " argument" + (want == "1" ? "" : "s") +
                                ", got " + std::to_string(n));
    }
    return add_v(Op::kCall, pos, end, a, out, 0, static_cast<uint16_t>(fn));
  }

  bool lookup_call(const Token& name, uint32_t pos, Ix* out) {
    // lookup(table, key): the table is a bare name or a string; anything else is
    // resolved per event.
    Ix table_expr = 0;
    bool dynamic = false;
    std::string table_name;
    uint32_t table_pos = cur().pos;
    if (at(Tok::kIdent) && (peek().kind == Tok::kComma || peek().kind == Tok::kRParen) && !is_lambda_var(cur().text) &&
        cur().text != "this") {
      table_name = cur().text;
      ++p_;
    } else {
      if (!expr(&table_expr)) return false;
      const Node& tn = x_->nodes[table_expr];
      if (tn.op == Op::kConst && x_->consts[tn.aux].is_string()) {
        table_name = x_->consts[tn.aux].get<std::string>();
      } else {
        dynamic = true;
      }
    }
    if (!expect(Tok::kComma, "',' between lookup's table and key")) return false;
    Ix key;
    if (!expr(&key)) return false;
    accept(Tok::kComma);
    uint32_t end = cur().end;
    if (!expect(Tok::kRParen, "')'")) return false;
    if (dynamic) return add_v(Op::kLookup, pos, end, {table_expr, key}, out, kDynamicTable);
    const Table* t = nullptr;
    if (scope_.tables != nullptr) {
      t = scope_.tables->find(table_name);
      if (t == nullptr) {
        std::string known;
        for (const auto& n : scope_.tables->names()) known += (known.empty() ? "" : ", ") + n;
        return fail(table_pos, "unknown table '" + table_name + "'" +
                                   (known.empty() ? " (the flow has no tables)" : " (tables: " + known + ")"));
      }
    }
    (void)name;
    x_->tables.push_back(t);
    x_->table_names.push_back(table_name);
    if (t == nullptr) {
      // No tables known at compile time: resolve by name per event.
      Ix name_node;
      constant(Json(table_name), table_pos, table_pos, &name_node);
      x_->tables.pop_back();
      x_->table_names.pop_back();
      return add_v(Op::kLookup, pos, end, {name_node, key}, out, kDynamicTable);
    }
    return add_v(Op::kLookup, pos, end, {key}, out, static_cast<uint32_t>(x_->tables.size() - 1));
  }

  bool is_lambda_var(const std::string& name) const {
    for (const auto& l : lambdas_) {
      if (l == name) return true;
    }
    return false;
  }

  bool primary(Ix* out) {
    const Token t = cur();
    switch (t.kind) {
      case Tok::kNumber: ++p_; return number_literal(t.text, t.pos, t.end, out);
      case Tok::kString: ++p_; return constant(Json(t.text), t.pos, t.end, out);
      case Tok::kLParen: {
        ++p_;
        Ix e;
        if (!expr(&e) || !expect(Tok::kRParen, "')'")) return false;
        *out = e;
        return true;
      }
      case Tok::kLBracket: {
        ++p_;
        std::vector<Ix> items;
        if (!accept(Tok::kRBracket)) {
          while (true) {
            Ix e;
            if (!expr(&e)) return false;
            items.push_back(e);
            if (accept(Tok::kComma)) {
              if (accept(Tok::kRBracket)) break;
              continue;
            }
            if (!expect(Tok::kRBracket, "',' or ']'")) return false;
            break;
          }
        }
        return add_v(Op::kArray, t.pos, toks_[p_ - 1].end, items, out);
      }
      case Tok::kLBrace: return object(out);
      case Tok::kIdent: return name(out);
      default: return unexpected("a value");
    }
  }

  bool object(Ix* out) {
    uint32_t pos = cur().pos;
    ++p_;  // {
    std::vector<Ix> values;
    std::vector<std::string> seen;
    if (!accept(Tok::kRBrace)) {
      while (true) {
        const Token k = cur();
        if (k.kind != Tok::kIdent && k.kind != Tok::kString) return unexpected("a key (a name or a string)");
        ++p_;
        for (const auto& s : seen) {
          if (s == k.text) return fail(k.pos, "duplicate key \"" + k.text + "\"");
        }
        seen.push_back(k.text);
        if (!expect(Tok::kColon, "':' after the key")) return false;
        Ix v;
        if (!expr(&v)) return false;
        values.push_back(v);
        if (accept(Tok::kComma)) {
          if (accept(Tok::kRBrace)) break;
          continue;
        }
        if (!expect(Tok::kRBrace, "',' or '}'")) return false;
        break;
      }
    }
    // Keys go in after the values are parsed: nested objects add theirs first.
    auto first_key = static_cast<uint32_t>(x_->keys.size());
    for (auto& s : seen) x_->keys.push_back(std::move(s));
    return add_v(Op::kObject, pos, toks_[p_ - 1].end, values, out, first_key);
  }

  bool name(Ix* out) {
    const Token t = cur();
    ++p_;
    if (t.text == "this") {
      x_->reads_this = true;
      return add(Op::kThis, t.pos, t.end, {}, out);
    }
    if (t.text == "true" || t.text == "false") return constant(Json(t.text == "true"), t.pos, t.end, out);
    if (t.text == "null") return constant(Json(nullptr), t.pos, t.end, out);
    // Innermost lambda parameter wins.
    for (size_t i = lambdas_.size(); i-- > 0;) {
      if (lambdas_[i] == t.text) {
        return add_v(Op::kVar, t.pos, t.end, {}, out, 0, 0, static_cast<uint8_t>(i));
      }
    }
    if (t.text == "meta" && !at(Tok::kLParen)) {
      // The request metadata (docs/adr/0312-request-metadata.md): a root beside `this`, so an
      // event field named meta stays `this.meta`; a lambda parameter named meta wins (above).
      x_->reads_meta = true;
      return add(Op::kMeta, t.pos, t.end, {}, out);
    }
    if (at(Tok::kLParen)) {
      ++p_;
      if (t.text == "lookup") return lookup_call(t, t.pos, out);
      if (t.text == "map" || t.text == "filter") {
        return fail(t.pos, t.text + " is a method: write list." + t.text + "(x => ...)");
      }
      int fn = find_builtin(t.text);
      if (fn < 0) {
        std::string near = did_you_mean(t.text, builtin_function_names(), false);
        return fail(t.pos, "unknown function '" + t.text + "'" + (near.empty() ? "" : " (" + near + ")"));
      }
      std::vector<Ix> a;
      if (!args(&a)) return false;
      return call(fn, a, t.pos, toks_[p_ - 1].end, t, out);
    }
    if (at(Tok::kArrow)) {
      return fail(t.pos, "a lambda (x => ...) is only allowed as the argument of map() or filter()");
    }
    if (p_ == 1 && at(Tok::kEnd)) {
      // The whole expression is one bare word: most often a constant meant as text
      // (`label: fixed`), sometimes a field without `this.`; say how to write either.
      return fail(t.pos, "unknown name '" + t.text + "': for the text " + t.text +
                             " write a string literal, quoted once for YAML and once for the expression: \"'" + t.text +
                             "'\"; for the event's field write this." + t.text);
    }
    return fail(t.pos, "unknown name '" + t.text + "' (the event is this, as in this." + t.text + ")");
  }

  std::string_view src_;
  std::vector<Token> toks_;
  const CompileScope& scope_;
  Expression::Impl* x_;
  size_t p_ = 0;
  int nesting_ = 0;
  std::vector<int> depth_;
  std::vector<std::string> lambdas_;
  bool failed_ = false;
  Failure failure_;
};

}  // namespace

Expression::Expression() = default;
Expression::~Expression() = default;
Expression::Expression(Expression&&) noexcept = default;
Expression& Expression::operator=(Expression&&) noexcept = default;

const std::string& Expression::text() const {
  static const std::string kEmpty;
  return impl_ ? impl_->text : kEmpty;
}

const Json* Expression::constant_value() const {
  if (!impl_) return nullptr;
  const Node& n = impl_->nodes[impl_->root];
  return n.op == Op::kConst ? &impl_->consts[n.aux] : nullptr;
}

const std::vector<std::string>* Expression::this_path() const {
  return impl_ && impl_->has_this_path ? &impl_->this_path : nullptr;
}

bool Expression::reads_this() const { return impl_ && impl_->reads_this; }

bool Expression::reads_meta() const { return impl_ && impl_->reads_meta; }

Expression Expression::constant(Json value, std::string text) {
  auto impl = std::make_unique<Impl>();
  impl->text = std::move(text);
  impl->consts.push_back(std::move(value));
  Node n;
  n.op = Op::kConst;
  n.end = static_cast<uint32_t>(impl->text.size());
  impl->nodes.push_back(n);
  Expression e;
  e.impl_ = std::move(impl);
  return e;
}

bool Expression::compile(std::string_view text, const CompileScope& scope, Expression* out, CompileError* error) {
  auto fail = [&](size_t offset, std::string message) {
    if (error) *error = CompileError{offset, std::move(message)};
    return false;
  };
  if (text.size() > kMaxExpressionBytes) return fail(0, "expression longer than 64 KiB");
  size_t bad = 0;
  if (!valid_utf8(text, &bad)) return fail(bad, "invalid UTF-8 in expression");
  std::vector<Token> toks;
  Failure f;
  Lexer lexer(text);
  if (!lexer.run(&toks, &f)) return fail(f.offset, f.message);
  if (toks.size() == 1) return fail(0, "empty expression");
  auto impl = std::make_unique<Impl>();
  impl->text = std::string(text);
  Parser parser(text, std::move(toks), scope, impl.get());
  if (!parser.run(&f)) return fail(f.offset, f.message);
  // Remember plain `this.a.b` paths: the map step moves such values instead of copying.
  const Node& r = impl->nodes[impl->root];
  if (r.op == Op::kThis) {
    impl->has_this_path = true;
  } else if (r.op == Op::kPath && impl->nodes[impl->kid(r, 0)].op == Op::kThis) {
    bool names_only = true;
    for (const auto& s : impl->paths[r.aux]) names_only = names_only && !s.is_index;
    if (names_only) {
      impl->has_this_path = true;
      for (const auto& s : impl->paths[r.aux]) impl->this_path.push_back(s.key);
    }
  }
  out->impl_ = std::move(impl);
  return true;
}

bool Expression::evaluate(const Json& self, const TableSet* tables, Json* out, std::string* error,
                          std::string_view meta) const {
  if (!impl_) {
    if (error) *error = "empty expression";
    return false;
  }
  EvalContext ctx;
  ctx.self = &self;
  ctx.tables = tables;
  ctx.meta_text = meta;
  Json scratch;
  const Json* r = nullptr;
  try {
    r = eval(ctx, scratch);
  } catch (const std::exception& e) {
    if (error) *error = std::string("internal error: ") + e.what();
    return false;
  }
  if (r == nullptr) {
    if (error) *error = ctx.error;
    return false;
  }
  if (r == &scratch) {
    *out = std::move(scratch);
  } else {
    *out = *r;
  }
  return true;
}

const Json* Expression::eval(EvalContext& ctx, Json& scratch) const { return impl_->eval(impl_->root, ctx, scratch); }

}  // namespace weir::flows

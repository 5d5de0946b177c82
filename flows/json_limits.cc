#include "flows/json_limits.h"

#include <utility>
#include <vector>

namespace weir::flows {
namespace {

using Json = nlohmann::json;

std::string too_deep_message(int max_depth) {
  return "JSON nested deeper than " + std::to_string(max_depth) + " levels";
}

// Counts depth around another SAX handler; fails the parse past the limit.
template <typename Inner>
class DepthLimited {
 public:
  DepthLimited(Inner& inner, int max_depth, JsonError* error) : inner_(inner), max_(max_depth), error_(error) {}

  bool null() { return inner_.null(); }
  bool boolean(bool v) { return inner_.boolean(v); }
  bool number_integer(Json::number_integer_t v) { return inner_.number_integer(v); }
  bool number_unsigned(Json::number_unsigned_t v) { return inner_.number_unsigned(v); }
  bool number_float(Json::number_float_t v, const Json::string_t& s) { return inner_.number_float(v, s); }
  bool string(Json::string_t& v) { return inner_.string(v); }
  bool binary(Json::binary_t& v) { return inner_.binary(v); }
  bool start_object(std::size_t n) { return enter() && inner_.start_object(n); }
  bool key(Json::string_t& k) { return inner_.key(k); }
  bool end_object() {
    --depth_;
    return inner_.end_object();
  }
  bool start_array(std::size_t n) { return enter() && inner_.start_array(n); }
  bool end_array() {
    --depth_;
    return inner_.end_array();
  }
  bool parse_error(std::size_t position, const std::string& /*last_token*/, const nlohmann::detail::exception& ex) {
    if (error_) {
      error_->too_deep = false;
      error_->byte = position;
      error_->message = ex.what();
    }
    return false;
  }
  bool failed_deep() const { return deep_; }

 private:
  bool enter() {
    if (++depth_ > max_) {
      deep_ = true;
      if (error_) {
        error_->too_deep = true;
        error_->message = too_deep_message(max_);
      }
      return false;
    }
    return true;
  }

  Inner& inner_;
  int max_;
  JsonError* error_;
  int depth_ = 0;
  bool deep_ = false;
};

// Accepts everything: validation only.
struct NoDom {
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(Json::number_integer_t) { return true; }
  bool number_unsigned(Json::number_unsigned_t) { return true; }
  bool number_float(Json::number_float_t, const Json::string_t&) { return true; }
  bool string(Json::string_t&) { return true; }
  bool binary(Json::binary_t&) { return true; }
  bool start_object(std::size_t) { return true; }
  bool key(Json::string_t&) { return true; }
  bool end_object() { return true; }
  bool start_array(std::size_t) { return true; }
  bool end_array() { return true; }
};

template <typename Sax>
bool run(std::string_view text, Sax& sax, JsonError* error) {
  // nlohmann's lexer takes a NUL byte for the end of the input (a C-string habit), so
  // "123\0junk" would pass as "123". No JSON text holds a raw NUL (inside a string it must
  // be escaped): refuse it (JSONTestSuite n_multidigit_number_then_00).
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) {
    if (error) {
      error->too_deep = false;
      error->byte = nul + 1;
      error->message = "NUL byte in JSON text";
    }
    return false;
  }
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &sax, Json::input_format_t::json, /*strict=*/true);
  } catch (const std::exception& e) {  // the DOM builder may throw on allocation or errors
    if (error) {
      error->message = e.what();
      error->too_deep = false;
    }
    return false;
  }
  return ok;
}

}  // namespace

std::optional<Json> parse_json(std::string_view text, int max_depth, JsonError* error) {
  Json result;
  {
    nlohmann::detail::json_sax_dom_parser<Json> dom(result, /*allow_exceptions=*/false);
    DepthLimited<decltype(dom)> sax(dom, max_depth, error);
    if (!run(text, sax, error) || dom.is_errored() || sax.failed_deep()) {
      // A partial DOM past the limit is at most max_depth deep: destroying it is safe.
      return std::nullopt;
    }
  }
  return result;
}

bool check_json(std::string_view text, int max_depth, JsonError* error) {
  NoDom none;
  DepthLimited<NoDom> sax(none, max_depth, error);
  return run(text, sax, error) && !sax.failed_deep();
}

std::optional<Json> parse_payload(std::string_view payload, int max_depth, std::string* too_deep) {
  JsonError err;
  auto parsed = parse_json(payload, max_depth - 1, &err);
  if (!parsed && err.too_deep && too_deep) {
    *too_deep = "payload is " + err.message + " inside the event (http.max_depth " + std::to_string(max_depth) + ")";
  }
  return parsed;
}

int json_depth(const Json& value, int limit) {
  struct Frame {
    const Json* v;
    int depth;
  };
  std::vector<Frame> stack{{&value, 0}};
  int deepest = 0;
  while (!stack.empty()) {
    Frame f = stack.back();
    stack.pop_back();
    if (!f.v->is_structured()) continue;
    int d = f.depth + 1;
    if (d > deepest) deepest = d;
    if (deepest > limit) return limit + 1;
    for (const auto& child : *f.v) stack.push_back({&child, d});
  }
  return deepest;
}

}  // namespace weir::flows

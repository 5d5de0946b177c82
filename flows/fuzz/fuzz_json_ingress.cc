// libFuzzer target: event bodies through the bounded JSON parse every ingress uses
// (flows/json_limits: check_json is http-in's check before anything is stored,
// parse_json the flow stage's, parse_payload the broker sources'), at the default depth
// limit (128), with bodies up to the 2 MiB of -max_len.
// Invariants beyond "no crash, no sanitizer report": the three agree with a reference
// parse without a depth limit (nlohmann's iterative SAX parser, plus "no raw NUL byte"):
// a body is accepted exactly when it is valid JSON nested at most 128 deep; a refusal of
// valid JSON says "too deep"; parse_json's DOM (its quick scan's, most often) is the one
// nlohmann's parser builds; whatever is accepted re-serialises and parses back equal.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "flows/json_limits.h"

namespace {

using Json = nlohmann::json;
using weir::flows::kDefaultMaxDepth;

// Validity and nesting depth without any limit (no DOM, iterative).
struct DepthOnly : Json::json_sax_t {
  int depth = 0, deepest = 0;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return open(); }
  bool start_array(std::size_t) override { return open(); }
  bool end_object() override { return --depth >= 0; }
  bool end_array() override { return --depth >= 0; }
  bool key(string_t&) override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
  bool open() {
    deepest = std::max(deepest, ++depth);
    return true;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);

  DepthOnly ref;
  bool valid = body.find('\0') == std::string_view::npos &&
               Json::sax_parse(body.begin(), body.end(), &ref, Json::input_format_t::json, /*strict=*/true);

  weir::flows::JsonError err;
  const bool checked = weir::flows::check_json(body, kDefaultMaxDepth, &err);
  if (checked != (valid && ref.deepest <= kDefaultMaxDepth)) __builtin_trap();
  if (!checked && err.message.empty()) __builtin_trap();
  if (!checked && valid && !err.too_deep) __builtin_trap();  // refused valid JSON: only for depth

  std::optional<Json> parsed = weir::flows::parse_json(body, kDefaultMaxDepth);
  if (parsed.has_value() != checked) __builtin_trap();
  if (parsed) {
    if (weir::flows::json_depth(*parsed, kDefaultMaxDepth) > kDefaultMaxDepth) __builtin_trap();
    // The quick scan's DOM (when it built one) is nlohmann's: the same value, written the same.
    std::optional<Json> reference = weir::flows::detail::nlohmann_parse_json(body, kDefaultMaxDepth);
    if (!reference || *reference != *parsed || reference->dump() != parsed->dump()) __builtin_trap();
    // What a stage stores downstream: serialised, it parses back to the same value.
    std::string text = parsed->dump(-1, ' ', false, Json::error_handler_t::replace);
    if (weir::flows::write_json(*parsed) != text) __builtin_trap();  // the stage's own writer
    std::optional<Json> again = weir::flows::parse_json(text, kDefaultMaxDepth);
    if (!again || *again != *parsed) __builtin_trap();
  }

  // A broker payload becomes the event's `payload` member: one level less.
  std::string too_deep;
  std::optional<Json> payload = weir::flows::parse_payload(body, kDefaultMaxDepth, &too_deep);
  if (payload.has_value() != (valid && ref.deepest <= kDefaultMaxDepth - 1)) __builtin_trap();
  if (!payload && valid && too_deep.empty()) __builtin_trap();
  return 0;
}

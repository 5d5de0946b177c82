// libFuzzer target: the webhook signature verifiers (connectors/http/signature.cc).
// Input: secret, webhook-id, webhook-timestamp and a signature header, one per line, then
// the body (the rest, up to the 2 MiB -max_len of scripts/fuzz.sh).
// Invariants beyond "no crash, no sanitizer report": a signature made with the same
// secret verifies (GitHub; Standard Webhooks with `now` = the timestamp); a fuzzed header
// that verifies carries the right signature; and `why` is one of the fixed reasons (so it
// never carries the secret or anything else of the input).
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "connectors/http/signature.h"

namespace {
std::string_view next_line(std::string_view* rest) {
  size_t nl = rest->find('\n');
  std::string_view line = rest->substr(0, nl);
  *rest = nl == std::string_view::npos ? std::string_view() : rest->substr(nl + 1);
  return line;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weir::connectors;
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::string_view secret = next_line(&rest), id = next_line(&rest), ts = next_line(&rest), header = next_line(&rest),
                   body = rest;

  // GitHub.
  bool fuzzed_ok = verify_github_signature(secret, body, header);
  if (!secret.empty()) {
    std::string right = github_signature(secret, body);
    if (!verify_github_signature(secret, body, right)) std::abort();
    if (fuzzed_ok && header.find(right.substr(7)) == std::string_view::npos) {
      // Accepted a header that does not carry the right hex (case-insensitively it could).
      std::string lower(header);
      for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (lower.find(right.substr(7)) == std::string::npos) std::abort();
    }
  } else if (fuzzed_ok) {
    std::abort();  // an empty secret never verifies
  }

  // Standard Webhooks, `now` = the timestamp when it is a number.
  int64_t now = std::strtoll(std::string(ts).c_str(), nullptr, 10);  // strtoll skips leading blanks
  std::string why;
  bool ok = verify_standard_webhook(secret, id, ts, body, header, now, &why);
  // `why` is one of the fixed reasons: it can carry nothing of the input, secret included.
  static const std::set<std::string> kReasons = {"missing webhook-id",        "missing webhook-timestamp",
                                                 "missing webhook-signature", "malformed webhook-timestamp",
                                                 "webhook-timestamp too old", "webhook-timestamp too new",
                                                 "unusable secret",           "signature computation failed",
                                                 "no matching signature",     "no v1 signature in webhook-signature"};
  if (!ok && !kReasons.count(why)) std::abort();
  // The verifier trims blanks around the id and timestamp (HTTP header values); sign
  // what it will check.
  auto trim = [](std::string_view v) {
    size_t b = v.find_first_not_of(" \t");
    if (b == std::string_view::npos) return std::string_view();
    return v.substr(b, v.find_last_not_of(" \t") - b + 1);
  };
  std::string_view tid = trim(id), tts = trim(ts);
  std::string right = standard_webhook_signature(secret, tid, tts, body);
  if (!right.empty() && !tid.empty() && tts.find_first_not_of("0123456789") == std::string_view::npos && !tts.empty() &&
      tts.size() < 12) {
    std::string why2;
    if (!verify_standard_webhook(secret, id, ts, body, right, now, &why2)) std::abort();
  }
  return 0;
}

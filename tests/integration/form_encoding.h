// Form encoding for tests that post application/x-www-form-urlencoded bodies, as GitHub
// does (docs/adr/0308-form-bodies.md). The integration tests reach weir only as a process,
// so this is the tests' own copy of flows/text.h's url_encode.
#pragma once

#include <string>

namespace weir::itest {

// RFC 3986 unreserved characters kept, everything else %XX (as browsers and GitHub encode).
inline std::string form_encode(const std::string& s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    const bool alnum = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (alnum || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace weir::itest

#include "runtime/base/redact.h"

#include <algorithm>

namespace weir {

std::string redact_url(std::string_view url) {
  const size_t scheme = url.find("://");
  const size_t host = scheme == std::string_view::npos ? 0 : scheme + 3;
  // The authority ends at the first '/', '?' or '#'; an '@' after it belongs to the path.
  const size_t end = std::min(url.find_first_of("/?#", host), url.size());
  const std::string_view authority = url.substr(host, end - host);
  const size_t at = authority.rfind('@');
  std::string out(url.substr(0, host));
  if (at == std::string_view::npos) {
    out += authority;
  } else {
    out += "***";
    out += authority.substr(at);  // "@host:port"
  }
  std::string_view rest = url.substr(end);
  rest = rest.substr(0, rest.find('#'));  // never sent: nothing to show
  const size_t q = rest.find('?');
  out += rest.substr(0, q);
  if (q != std::string_view::npos && q + 1 < rest.size()) out += "?***";
  return out;
}

std::string redact_urls(std::string_view urls) {
  std::string out;
  size_t start = 0;
  for (;;) {
    const size_t comma = urls.find(',', start);
    out += redact_url(urls.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) return out;
    out += ',';
    start = comma + 1;
  }
}

}  // namespace weir

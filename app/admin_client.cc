#include "app/admin_client.h"

#include <curl/curl.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include <nlohmann/json.hpp>

namespace weir {
namespace {
std::string& token() {
  static std::string t;
  return t;
}
}  // namespace

void set_admin_token(std::string t) { token() = std::move(t); }

std::string AdminReply::header(const std::string& lower_name) const {
  for (const auto& [k, v] : headers) {
    if (k == lower_name) return v;
  }
  return {};
}

AdminReply admin_call(const std::string& server, const std::string& method, const std::string& path,
                      const std::string& body) {
  AdminReply out;
  static std::once_flag once;  // here, not at exec: `weir run` may never need curl (ADR 0161)
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  CURL* c = curl_easy_init();
  if (!c) {
    out.error = "cannot initialise libcurl";
    return out;
  }
  std::string url = server;
  if (url.find("://") == std::string::npos) url = "http://" + url;
  while (!url.empty() && url.back() == '/') url.pop_back();
  url += path;
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  std::string auth;
  if (!token().empty()) {
    auth = "Authorization: Bearer " + token();
    headers = curl_slist_append(headers, auth.c_str());
  }
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  if (method == "POST" || method == "PUT") {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  curl_easy_setopt(
      c, CURLOPT_WRITEFUNCTION, +[](char* p, size_t s, size_t n, void* ud) {
        static_cast<std::string*>(ud)->append(p, s * n);
        return s * n;
      });
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &out.body);
  curl_easy_setopt(
      c, CURLOPT_HEADERFUNCTION, +[](char* p, size_t s, size_t n, void* ud) {
        std::string line(p, s * n);
        auto colon = line.find(':');
        if (colon != std::string::npos) {
          std::string name = line.substr(0, colon);
          for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
          std::string value = line.substr(colon + 1);
          while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.erase(0, 1);
          while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' '))
            value.pop_back();
          static_cast<AdminReply*>(ud)->headers.emplace_back(std::move(name), std::move(value));
        }
        return s * n;
      });
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &out);
  CURLcode rc = curl_easy_perform(c);
  if (rc != CURLE_OK) {
    out.error = curl_easy_strerror(rc);
  } else {
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    out.status = static_cast<int>(code);
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(c);
  return out;
}

int admin_command(const std::string& server, const std::string& method, const std::string& path,
                  const std::string& body) {
  AdminReply r = admin_call(server, method, path, body);
  if (r.status == 0) {
    std::fprintf(stderr, "weir: cannot reach %s: %s\n", server.c_str(), r.error.c_str());
    return 1;
  }
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  std::string text = j.is_discarded() ? r.body : j.dump(2);
  std::fprintf(r.status < 300 ? stdout : stderr, "%s\n", text.c_str());
  return admin_exit_code(r);
}

int admin_exit_code(const AdminReply& r) {
  if (r.status >= 200 && r.status < 300) return 0;
  if (r.status >= 400 && r.status < 500) return 2;
  return 1;
}

}  // namespace weir

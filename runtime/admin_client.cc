#include "runtime/admin_client.h"

#include <curl/curl.h>

#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

namespace weir {

AdminReply admin_call(const std::string& server, const std::string& method, const std::string& path,
                      const std::string& body) {
  AdminReply out;
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
  if (const char* t = std::getenv("WEIR_ADMIN_TOKEN"); t && *t) {
    auth = std::string("Authorization: Bearer ") + t;
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
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, +[](char* p, size_t s, size_t n, void* ud) {
    static_cast<std::string*>(ud)->append(p, s * n);
    return s * n;
  });
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &out.body);
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
  return r.status < 300 ? 0 : 1;
}

}  // namespace weir

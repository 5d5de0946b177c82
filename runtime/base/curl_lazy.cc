// libcurl, loaded when weir first calls it (ADR 0161).
//
// weir does not link libcurl: this file defines the 24 curl functions weir calls, and the
// first call (on any thread) dlopen()s libcurl.so.4 and resolves them. Debian's libcurl
// pulls some twenty libraries (GnuTLS through librtmp, Kerberos, LDAP, SSH, …) whose pages
// and constructors cost ~4 MB resident at exec; a process whose HTTP sinks have not sent
// anything yet, and one with no HTTP sink or poll source at all, no longer pays that.
//
// If libcurl cannot be loaded, the reason is logged once and every call fails the way curl
// reports failure (NULL handles, CURLE_FAILED_INIT, CURLM_INTERNAL_ERROR, …), so an HTTP
// sink retries and dead-letters as it would on any other transport error.
//
// Thread-safety: loading happens once under std::call_once; after that the calls go
// straight to libcurl's own functions.
#define CURL_DISABLE_TYPECHECK 1  // the real prototypes, not the type-checking macros
#include <curl/curl.h>
#include <dlfcn.h>

#include <cstdarg>
#include <mutex>
#include <string>

#include "runtime/base/log.h"

namespace {

#define WEIR_CURL_FUNCTIONS(X)                                               \
  X(curl_global_init, CURLcode, (long))                                      \
  X(curl_free, void, (void*))                                                \
  X(curl_getdate, time_t, (const char*, const time_t*))                      \
  X(curl_slist_append, curl_slist*, (curl_slist*, const char*))              \
  X(curl_slist_free_all, void, (curl_slist*))                                \
  X(curl_easy_init, CURL*, (void))                                           \
  X(curl_easy_setopt, CURLcode, (CURL*, CURLoption, ...))                    \
  X(curl_easy_getinfo, CURLcode, (CURL*, CURLINFO, ...))                     \
  X(curl_easy_perform, CURLcode, (CURL*))                                    \
  X(curl_easy_reset, void, (CURL*))                                          \
  X(curl_easy_cleanup, void, (CURL*))                                        \
  X(curl_easy_strerror, const char*, (CURLcode))                             \
  X(curl_multi_init, CURLM*, (void))                                         \
  X(curl_multi_setopt, CURLMcode, (CURLM*, CURLMoption, ...))                \
  X(curl_multi_add_handle, CURLMcode, (CURLM*, CURL*))                       \
  X(curl_multi_remove_handle, CURLMcode, (CURLM*, CURL*))                    \
  X(curl_multi_socket_action, CURLMcode, (CURLM*, curl_socket_t, int, int*)) \
  X(curl_multi_info_read, CURLMsg*, (CURLM*, int*))                          \
  X(curl_multi_cleanup, CURLMcode, (CURLM*))                                 \
  X(curl_multi_strerror, const char*, (CURLMcode))                           \
  X(curl_url, CURLU*, (void))                                                \
  X(curl_url_cleanup, void, (CURLU*))                                        \
  X(curl_url_get, CURLUcode, (CURLU*, CURLUPart, char**, unsigned int))      \
  X(curl_url_set, CURLUcode, (CURLU*, CURLUPart, const char*, unsigned int))

struct Curl {
// `ret` and `args` are a type and a parameter list: they cannot take parentheses.
#define WEIR_CURL_POINTER(name, ret, args) ret(*name) args = nullptr;  // NOLINT(bugprone-macro-parentheses)
  WEIR_CURL_FUNCTIONS(WEIR_CURL_POINTER)
#undef WEIR_CURL_POINTER
  bool ok = false;
};

const Curl& curl() {
  static Curl c;
  static std::once_flag once;
  std::call_once(once, [] {
    // RTLD_LOCAL: libcurl's symbols stay out of the global scope, so nothing resolves to
    // them but the pointers taken here.
    void* h = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    std::string missing;
    if (h == nullptr) {
      const char* e = dlerror();
      missing = e != nullptr ? e : "dlopen failed";
    } else {
#define WEIR_CURL_RESOLVE(name, ret, args)                                                          \
  c.name = reinterpret_cast<ret(*) args>(dlsym(h, #name)); /* NOLINT(bugprone-macro-parentheses) */ \
  if (c.name == nullptr && missing.empty()) missing = "libcurl.so.4 has no " #name;
      WEIR_CURL_FUNCTIONS(WEIR_CURL_RESOLVE)
#undef WEIR_CURL_RESOLVE
    }
    c.ok = missing.empty();
    if (!c.ok)
      weir::log::error("cannot load libcurl: HTTP sinks, poll sources and span export fail", {{"error", missing}});
  });
  return c;
}

// curl's variadic setters take one argument whose type the option number encodes.
template <typename Fn, typename Handle, typename Option>
auto forward_option(Fn fn, Handle h, Option option, va_list ap) {
  const long kind = static_cast<long>(option) / 10000 * 10000;
  if (kind == CURLOPTTYPE_LONG) return fn(h, option, va_arg(ap, long));
  if (kind == CURLOPTTYPE_OFF_T) return fn(h, option, va_arg(ap, curl_off_t));
  if (kind == CURLOPTTYPE_FUNCTIONPOINT) return fn(h, option, va_arg(ap, void (*)()));
  return fn(h, option, va_arg(ap, void*));  // object pointers, strings, blobs
}

}  // namespace

extern "C" {

CURLcode curl_global_init(long flags) { return curl().ok ? curl().curl_global_init(flags) : CURLE_FAILED_INIT; }
void curl_free(void* p) {
  if (curl().ok) curl().curl_free(p);
}
time_t curl_getdate(const char* p, const time_t* unused) { return curl().ok ? curl().curl_getdate(p, unused) : -1; }
curl_slist* curl_slist_append(curl_slist* list, const char* s) {
  return curl().ok ? curl().curl_slist_append(list, s) : nullptr;
}
void curl_slist_free_all(curl_slist* list) {
  if (curl().ok) curl().curl_slist_free_all(list);
}

CURL* curl_easy_init(void) { return curl().ok ? curl().curl_easy_init() : nullptr; }
// The variadic entry points keep libcurl's own signatures: va_start after an enum
// parameter, which clang's -Wvarargs calls undefined (the enum is promoted to int); it is
// how libcurl itself declares them and passes them on every ABI weir builds for.
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wvarargs"
#endif
CURLcode curl_easy_setopt(CURL* h, CURLoption option, ...) {
  if (!curl().ok) return CURLE_FAILED_INIT;
  va_list ap;
  va_start(ap, option);
  const CURLcode rc = forward_option(curl().curl_easy_setopt, h, option, ap);
  va_end(ap);
  return rc;
}
CURLcode curl_easy_getinfo(CURL* h, CURLINFO info, ...) {
  if (!curl().ok) return CURLE_FAILED_INIT;
  va_list ap;
  va_start(ap, info);
  void* out = va_arg(ap, void*);  // every CURLINFO takes a pointer to where the answer goes
  va_end(ap);
  return curl().curl_easy_getinfo(h, info, out);
}
CURLcode curl_easy_perform(CURL* h) { return curl().ok ? curl().curl_easy_perform(h) : CURLE_FAILED_INIT; }
void curl_easy_reset(CURL* h) {
  if (curl().ok) curl().curl_easy_reset(h);
}
void curl_easy_cleanup(CURL* h) {
  if (curl().ok) curl().curl_easy_cleanup(h);
}
const char* curl_easy_strerror(CURLcode code) {
  return curl().ok ? curl().curl_easy_strerror(code) : "libcurl could not be loaded";
}

CURLM* curl_multi_init(void) { return curl().ok ? curl().curl_multi_init() : nullptr; }
CURLMcode curl_multi_setopt(CURLM* m, CURLMoption option, ...) {
  if (!curl().ok) return CURLM_INTERNAL_ERROR;
  va_list ap;
  va_start(ap, option);
  const CURLMcode rc = forward_option(curl().curl_multi_setopt, m, option, ap);
  va_end(ap);
  return rc;
}
#if defined(__clang__)
#pragma clang diagnostic pop
#endif
CURLMcode curl_multi_add_handle(CURLM* m, CURL* h) {
  return curl().ok ? curl().curl_multi_add_handle(m, h) : CURLM_INTERNAL_ERROR;
}
CURLMcode curl_multi_remove_handle(CURLM* m, CURL* h) {
  return curl().ok ? curl().curl_multi_remove_handle(m, h) : CURLM_INTERNAL_ERROR;
}
CURLMcode curl_multi_socket_action(CURLM* m, curl_socket_t s, int ev_bitmask, int* running) {
  return curl().ok ? curl().curl_multi_socket_action(m, s, ev_bitmask, running) : CURLM_INTERNAL_ERROR;
}
CURLMsg* curl_multi_info_read(CURLM* m, int* left) {
  return curl().ok ? curl().curl_multi_info_read(m, left) : nullptr;
}
CURLMcode curl_multi_cleanup(CURLM* m) { return curl().ok ? curl().curl_multi_cleanup(m) : CURLM_INTERNAL_ERROR; }
const char* curl_multi_strerror(CURLMcode code) {
  return curl().ok ? curl().curl_multi_strerror(code) : "libcurl could not be loaded";
}

CURLU* curl_url(void) { return curl().ok ? curl().curl_url() : nullptr; }
void curl_url_cleanup(CURLU* u) {
  if (curl().ok) curl().curl_url_cleanup(u);
}
CURLUcode curl_url_get(CURLU* u, CURLUPart what, char** part, unsigned int flags) {
  return curl().ok ? curl().curl_url_get(u, what, part, flags) : CURLUE_OUT_OF_MEMORY;
}
CURLUcode curl_url_set(CURLU* u, CURLUPart what, const char* part, unsigned int flags) {
  return curl().ok ? curl().curl_url_set(u, what, part, flags) : CURLUE_OUT_OF_MEMORY;
}

}  // extern "C"

#include "connectors/http/sink_auth.h"

#include <curl/curl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <pthread.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <utility>

#include "runtime/base/log.h"

namespace weir::connectors {
namespace {

// PEM files are a few KiB; a bound keeps a wrong path (a log file, a device) from being
// read whole.
constexpr std::streamsize kMaxPemBytes = 1 << 20;
// A token endpoint's answer is a small JSON object.
constexpr size_t kMaxTokenAnswer = 64 << 10;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct InfoFree {
  void operator()(STACK_OF(X509_INFO) * s) const { sk_X509_INFO_pop_free(s, X509_INFO_free); }
};

std::unique_ptr<BIO, BioFree> mem_bio(const std::string& text) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// An encrypted key would make OpenSSL ask for a passphrase on the terminal: refused.
int no_passphrase(char* /*buf*/, int /*size*/, int /*rwflag*/, void* /*u*/) { return -1; }

Status read_pem(const std::string& sink, const char* key, const std::string& path, std::string* out) {
  const std::string what = "http sink " + sink + ": tls." + key + " " + path;
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::invalid(what + ": cannot open it: " + std::strerror(errno));
  std::ostringstream text;
  char buf[4096];
  std::streamsize total = 0;
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    total += in.gcount();
    if (total > kMaxPemBytes) return Status::invalid(what + ": larger than 1 MiB, not a PEM file");
    text.write(buf, in.gcount());
  }
  if (in.bad()) return Status::invalid(what + ": cannot read it: " + std::strerror(errno));
  *out = text.str();
  if (out->empty()) return Status::invalid(what + ": the file is empty");
  return Status::ok();
}

}  // namespace

Result<SinkTls> load_sink_tls(const flows::HttpSinkSpec::Tls& tls, const std::string& sink) {
  SinkTls out;
  const std::string prefix = "http sink " + sink + ": tls.";
  if (!tls.ca_file.empty()) {
    if (Status st = read_pem(sink, "ca_file", tls.ca_file, &out.ca_pem); !st) return st;
    auto bio = mem_bio(out.ca_pem);
    std::unique_ptr<STACK_OF(X509_INFO), InfoFree> infos(PEM_X509_INFO_read_bio(bio.get(), nullptr, nullptr, nullptr));
    int certs = 0;
    for (int i = 0; infos && i < sk_X509_INFO_num(infos.get()); ++i) {
      if (sk_X509_INFO_value(infos.get(), i)->x509 != nullptr) ++certs;
    }
    ERR_clear_error();
    if (certs == 0) return Status::invalid(prefix + "ca_file " + tls.ca_file + ": holds no PEM certificate");
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return Status::invalid(prefix + "cert_file and tls.key_file go together");
  }
  if (!tls.cert_file.empty()) {
    if (Status st = read_pem(sink, "cert_file", tls.cert_file, &out.cert_pem); !st) return st;
    if (Status st = read_pem(sink, "key_file", tls.key_file, &out.key_pem); !st) return st;
    auto cert_bio = mem_bio(out.cert_pem);
    std::unique_ptr<X509, X509Free> cert(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
    ERR_clear_error();
    if (!cert) return Status::invalid(prefix + "cert_file " + tls.cert_file + ": holds no PEM certificate");
    auto key_bio = mem_bio(out.key_pem);
    std::unique_ptr<EVP_PKEY, KeyFree> key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, &no_passphrase, nullptr));
    ERR_clear_error();
    // The message names the file only: OpenSSL's own text is left out, nothing of the key
    // can reach a log.
    if (!key) {
      return Status::invalid(prefix + "key_file " + tls.key_file +
                             ": holds no unencrypted PEM private key (an encrypted key needs a passphrase weir "
                             "does not take)");
    }
    const int match = X509_check_private_key(cert.get(), key.get());
    ERR_clear_error();
    if (match != 1) {
      return Status::invalid(prefix + "key_file " + tls.key_file + " does not match tls.cert_file " + tls.cert_file);
    }
  }
  return out;
}

SinkToken::SinkToken(oauth2::Client client, std::chrono::milliseconds timeout, std::string flow, std::string sink)
    : client_(std::move(client)), timeout_(timeout), flow_(std::move(flow)), sink_(std::move(sink)) {}

SinkToken::~SinkToken() { stop(); }

void SinkToken::on_ready(std::function<void()> ready) { ready_ = std::move(ready); }

std::optional<std::string> SinkToken::take(Clock::time_point now) {
  MutexLock lock(mu_);
  std::optional<std::string> token = cache_.usable(now);
  if (token && !used_) {
    used_ = true;
    cv_.notify_one();  // the token thread now waits for the refresh time
  }
  // A refresh that failed is not tried again for a second while the old token still
  // works: requests keep going meanwhile, and the endpoint is not asked once per request.
  if ((!token || (cache_.due(now) && now >= calm_until_)) && !fetching_ && !stopping_) {
    fetching_ = true;
    failure_.reset();
    if (!thread_.joinable()) {
      thread_ = std::thread([this] { run(); });
      pthread_setname_np(thread_.native_handle(), "weir-oauth2");
    }
    cv_.notify_one();
  }
  return token;
}

void SinkToken::refused(const std::string& used) {
  MutexLock lock(mu_);
  if (cache_.holds(used)) cache_.invalidate();
}

std::optional<std::string> SinkToken::failure(Clock::time_point now) {
  MutexLock lock(mu_);
  if (!failure_ || cache_.usable(now)) return std::nullopt;
  std::optional<std::string> out = std::move(failure_);
  failure_.reset();
  return out;
}

void SinkToken::stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  abort_.store(true);
  if (thread_.joinable()) thread_.join();
}

namespace {
// stop() ends a token request in flight from curl's progress callback.
int on_progress(void* abort, curl_off_t /*dltotal*/, curl_off_t /*dlnow*/, curl_off_t /*ultotal*/,
                curl_off_t /*ulnow*/) {
  return static_cast<std::atomic<bool>*>(abort)->load() ? 1 : 0;
}

size_t on_token_body(char* data, size_t size, size_t count, void* user) {
  auto* body = static_cast<std::string*>(user);
  const size_t n = size * count;
  if (body->size() + n > kMaxTokenAnswer) return 0;  // aborts the transfer: not a token answer
  body->append(data, n);
  return n;
}
}  // namespace

Result<oauth2::Answer> SinkToken::post(const std::string& url, const std::vector<std::string>& headers,
                                       const std::string& body) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  const std::string what = "oauth2 token request to " + client_.token_where;
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return Status::unavailable(what + ": curl_easy_init failed");
  oauth2::Answer answer;
  curl_slist* list = nullptr;
  for (const auto& h : headers) list = curl_slist_append(list, h.c_str());
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_.count()));
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "weir");
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(curl, CURLOPT_POST, 1L);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &on_token_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer.body);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &on_progress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &abort_);
  const CURLcode code = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &answer.status);
  curl_slist_free_all(list);
  curl_easy_cleanup(curl);
  if (code == CURLE_ABORTED_BY_CALLBACK) return Status::unavailable(what + ": sink stopping");
  if (code == CURLE_WRITE_ERROR) return Status::invalid(what + ": the answer is larger than 64 KiB");
  // curl_easy_strerror's fixed text only: the error buffer may quote the URL.
  if (code != CURLE_OK) return Status::unavailable(what + ": " + curl_easy_strerror(code));
  return answer;
}

void SinkToken::run() {
  UniqueLock lock(mu_);
  while (true) {
    // Checked first on every turn: the timed wait below returns at once when stopping, and
    // going round to it again would spin while stop() waits in join().
    if (stopping_) return;
    // A token in use is replaced at its refresh time, whether or not a request comes then.
    if (used_ && !cache_.empty() && !fetching_) {
      const auto at = cache_.refresh_at();
      lock.wait_until(cv_, at, [&]() REQUIRES(mu_) { return stopping_ || fetching_ || !used_; });
      if (!stopping_ && !fetching_ && used_ && Clock::now() >= at) fetching_ = true;
      continue;
    }
    lock.wait(cv_, [&]() REQUIRES(mu_) { return stopping_ || fetching_ || (used_ && !cache_.empty()); });
    if (stopping_) return;
    if (!fetching_) continue;
    lock.unlock();
    const auto asked = Clock::now();
    auto got = oauth2::fetch_token(client_, [this](const std::string& url, const std::vector<std::string>& headers,
                                                   const std::string& body) { return post(url, headers, body); });
    lock.lock();
    fetching_ = false;
    if (stopping_) return;
    if (got) {
      // Lifetime counts from the request, not the answer: the server's clock started then.
      cache_.set(got->access_token, got->expires_in, asked);
      used_ = false;
      failure_.reset();
      fetches_.fetch_add(1, std::memory_order_acq_rel);
    } else {
      failure_ = got.status().message();
      used_ = false;  // no timed refresh after a failure: the next request asks again
      calm_until_ = Clock::now() + std::chrono::seconds(1);
    }
    lock.unlock();
    if (got) {
      log::debug("http sink: oauth2 token fetched",
                 {{"flow", flow_}, {"sink", sink_}, {"expires_in_s", std::to_string(got->expires_in.count())}});
    } else {
      log::warn("http sink: oauth2 token request failed",
                {{"flow", flow_}, {"sink", sink_}, {"reason", got.status().message()}});
    }
    if (ready_) ready_();
    lock.lock();
  }
}

}  // namespace weir::connectors

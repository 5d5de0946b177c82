// Authenticating the HTTP sink to its receiver (docs/adr/0302-http-sink-tls-and-oauth2.md):
// the `tls:` files, read and checked once at start, and the `oauth2:` token source.
//
// SinkTls: the PEM text of ca_file, cert_file and key_file, read when the sink starts and
// handed to libcurl as blobs, so what was checked is what is sent. Errors name the sink,
// the key and the file, never the files' contents.
//
// SinkToken: the client-credentials token of one sink (runtime/base/oauth2.h does the
// request, the answer and the cache). The sink's loop asks it for a token per request
// (take(): never blocks); a fetch runs on the token source's own thread, "weir-oauth2",
// started by the first fetch, and `ready` is called on that thread when it ends (the sink
// marks itself for its loop then). A token that has been used is replaced at its refresh
// time (30 s before expiry, 10% of its lifetime when shorter) by the token thread, and a
// request that finds it past that time asks for the same; the old token is used meanwhile
// until it expires. A token never used since it was fetched is not replaced (an idle sink
// asks the endpoint nothing). Without a usable token requests wait for the fetch, and a
// failed fetch is handed to the waiting requests as their retry reason. Thread-safe; stop() joins the thread, after
// which `ready` is never called.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "flows/flow.h"
#include "runtime/base/oauth2.h"
#include "runtime/base/status.h"
#include "runtime/base/thread_annotations.h"

namespace weir::connectors {

struct SinkTls {
  std::string ca_pem;    // "" = the system trust store
  std::string cert_pem;  // "" = no client certificate
  std::string key_pem;
};

// Reads and checks the files of `tls` for sink `sink`: each file readable and PEM, the CA
// file with at least one certificate, the key unencrypted and matching the certificate.
Result<SinkTls> load_sink_tls(const flows::HttpSinkSpec::Tls& tls, const std::string& sink);

class SinkToken {
 public:
  using Clock = std::chrono::steady_clock;
  // `client`: endpoint and credentials; `timeout`: per token request.
  SinkToken(oauth2::Client client, std::chrono::milliseconds timeout, std::string flow, std::string sink);
  ~SinkToken();  // stop()
  SinkToken(const SinkToken&) = delete;
  SinkToken& operator=(const SinkToken&) = delete;

  // Called on the token thread after each fetch, success or failure.
  void on_ready(std::function<void()> ready);
  // A token usable at `now`; starts a fetch when there is none or the refresh time has
  // passed (and none is running). nullopt: wait for `ready`.
  std::optional<std::string> take(Clock::time_point now);
  // A receiver refused `used` (401): forgets it unless a newer token replaced it already.
  void refused(const std::string& used);
  // The reason the last fetch failed, once, when no token is usable; nullopt otherwise.
  std::optional<std::string> failure(Clock::time_point now);
  // Successful token requests so far.
  uint64_t fetches() const { return fetches_.load(std::memory_order_acquire); }
  void stop();

 private:
  void run();
  Result<oauth2::Answer> post(const std::string& url, const std::vector<std::string>& headers, const std::string& body);

  const oauth2::Client client_;
  const std::chrono::milliseconds timeout_;
  const std::string flow_, sink_;
  std::function<void()> ready_;  // set before the first take()

  mutable Mutex mu_;
  oauth2::TokenCache cache_ GUARDED_BY(mu_);
  bool fetching_ GUARDED_BY(mu_) = false;           // asked for or running
  bool used_ GUARDED_BY(mu_) = false;               // the cached token was taken since it was fetched
  Clock::time_point calm_until_ GUARDED_BY(mu_){};  // after a failed fetch: no early refresh before
  std::optional<std::string> failure_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::condition_variable cv_;
  std::thread thread_;  // started by the first fetch (under mu_), joined by stop()
  std::atomic<bool> abort_{false};
  std::atomic<uint64_t> fetches_{0};
};

}  // namespace weir::connectors

#include "runtime/http/http_router.h"

namespace weir {

Status HttpRouter::add_route(const std::string& path, Handler handler) {
  MutexLock lock(mu_);
  if (!routes_.emplace(path, std::make_shared<Handler>(std::move(handler))).second) {
    return Status::conflict("two flows share the http path " + path);
  }
  return Status::ok();
}

void HttpRouter::remove_route(const std::string& path) {
  MutexLock lock(mu_);
  routes_.erase(path);
}

std::vector<std::string> HttpRouter::paths() const {
  MutexLock lock(mu_);
  std::vector<std::string> out;
  for (const auto& [p, h] : routes_) out.push_back(p);
  return out;
}

void HttpRouter::handle(HttpRequest& request, Responder respond) {
  if (draining_.load()) {
    HttpResponse r = HttpResponse::error(503, "shutting down");
    r.headers.emplace_back("Retry-After", "1");
    r.close = true;
    respond(std::move(r));
    return;
  }
  std::shared_ptr<Handler> h;
  {
    MutexLock lock(mu_);
    auto it = routes_.find(std::string(request.path()));
    if (it != routes_.end()) h = it->second;
  }
  if (!h) {
    if (starting_.load()) {
      // Its flow may still be on the way: "not yet", not "no such path".
      HttpResponse r = HttpResponse::error(503, "starting: the flows are not running yet");
      r.headers.emplace_back("Retry-After", "1");
      respond(std::move(r));
      return;
    }
    respond(HttpResponse::error(404, "no flow listens on " + std::string(request.path())));
    return;
  }
  if (request.method() != "POST") {
    HttpResponse r = HttpResponse::error(405, "use POST");
    r.headers.emplace_back("Allow", "POST");
    respond(std::move(r));
    return;
  }
  (*h)(request, std::move(respond));
}

}  // namespace weir

// HttpRouter: the shared http-in route table. Each flow's http source adds its path;
// the ingress server asks the router. Unknown path → 404, known path with a method
// other than POST → 405.
//
// Thread safety: routes are added before the ingress server starts taking requests
// (during start-up, under a lock) and read on the io thread.
#pragma once

#include <atomic>
#include <string>
#include <unordered_map>

#include "runtime/http/http_server.h"
#include "runtime/base/thread_annotations.h"

namespace weir {

class HttpRouter {
 public:
  Status add_route(const std::string& path, Handler handler);
  void remove_route(const std::string& path);
  void handle(HttpRequest& request, Responder respond);
  std::vector<std::string> paths() const;
  // While draining, every request is answered 503 with Retry-After and the connection
  // is closed: nothing new is taken, and no path looks unknown (404) to a client.
  void set_draining() { draining_ = true; }
  // A path is served from the moment its flow's source adds it, while the other flows are
  // still starting (their events are safe in the stream; the stage reads them once it
  // runs). Until every flow runs, a path nobody added yet is answered 503 with Retry-After
  // rather than 404 (the listener is bound early so its address is known and clients get
  // an answer, not a refusal).
  void set_serving() { starting_ = false; }

 private:
  std::atomic<bool> draining_{false};
  std::atomic<bool> starting_{true};
  mutable Mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<Handler>> routes_ GUARDED_BY(mu_);
};

}  // namespace weir

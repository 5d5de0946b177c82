#include <utility>  // before Asio: Boost 1.74's Asio needs it first under C++20

#include "runtime/loop/io_loop.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "runtime/base/log.h"
#include "runtime/base/thread_annotations.h"

namespace weir {

namespace asio = boost::asio;

namespace {
thread_local IoLoop* current_loop = nullptr;

// On the calling thread: Linux keeps a nice value per thread (setpriority with the thread's
// id), and the calling thread's is the one it inherited, so `steps` is relative to that.
void lower_priority(int steps, const char* name) {
  const auto tid = static_cast<id_t>(::gettid());
  errno = 0;
  const int now = ::getpriority(PRIO_PROCESS, tid);
  if (now == -1 && errno != 0) {
    log::warn("cannot read the thread's nice value", {{"thread", name}, {"error", std::strerror(errno)}});
    return;
  }
  if (::setpriority(PRIO_PROCESS, tid, std::min(19, now + steps)) != 0) {
    log::warn("cannot lower the thread's priority", {{"thread", name}, {"error", std::strerror(errno)}});
  }
}

// IoLoop::Batch: per thread, the open batches and the work they were left (capacity kept).
struct BatchWork {
  void (*fn)(void*);
  std::shared_ptr<void> obj;
};
thread_local int batch_depth = 0;
thread_local std::vector<BatchWork> batch_work;
thread_local std::vector<BatchWork> batch_running;
}  // namespace

IoLoop::Batch::Batch() { ++batch_depth; }

IoLoop::Batch::~Batch() {
  if (batch_depth > 1) {
    --batch_depth;
    return;
  }
  // Still open while the work runs: what it leaves is appended and runs next.
  while (!batch_work.empty()) {
    batch_running.swap(batch_work);
    for (auto& w : batch_running) w.fn(w.obj.get());
    batch_running.clear();
  }
  batch_depth = 0;
}

bool IoLoop::at_batch_end(void (*fn)(void*), std::shared_ptr<void> obj) {
  if (batch_depth == 0) return false;
  batch_work.push_back({fn, std::move(obj)});
  return true;
}

struct IoLoop::Impl {
  asio::io_context ioc{1};
  const char* name = "weir-io";
  int nice = 0;  // set_nice()
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::thread thread;
  // After ioc: destroyed before it.
  Mutex mu;
  std::vector<std::pair<const void*, std::shared_ptr<void>>> attachments GUARDED_BY(mu);
};

IoLoop::IoLoop(const char* thread_name) : impl_(std::make_unique<Impl>()) { impl_->name = thread_name; }
IoLoop::~IoLoop() { stop(); }
void* IoLoop::native() { return &impl_->ioc; }
IoLoop* IoLoop::current() { return current_loop; }

void IoLoop::set_nice(int steps) { impl_->nice = std::clamp(steps, 0, 19); }

void IoLoop::start() {
  impl_->guard.emplace(impl_->ioc.get_executor());
  impl_->thread = std::thread([this] {
    pthread_setname_np(pthread_self(), impl_->name);
    if (impl_->nice > 0) lower_priority(impl_->nice, impl_->name);
    current_loop = this;
    impl_->ioc.run();
    current_loop = nullptr;
  });
}

void IoLoop::stop() {
  if (impl_->thread.joinable()) {
    impl_->guard.reset();
    impl_->ioc.stop();
    impl_->thread.join();
  }
  std::vector<std::pair<const void*, std::shared_ptr<void>>> gone;
  {
    MutexLock lock(impl_->mu);
    gone.swap(impl_->attachments);
  }
  gone.clear();  // outside the lock: a destructor may look for another attachment
}

std::shared_ptr<void> IoLoop::attachment(const void* key, const std::function<std::shared_ptr<void>()>& make) {
  MutexLock lock(impl_->mu);
  for (const auto& [k, v] : impl_->attachments) {
    if (k == key) return v;
  }
  std::shared_ptr<void> made = make();
  if (made) impl_->attachments.emplace_back(key, made);
  return made;
}

}  // namespace weir

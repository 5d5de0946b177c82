// Thread-safety annotations checked by clang's -Wthread-safety, and the annotated Mutex
// and lock guards they need (docs/adr/0210-thread-safety-annotations.md).
//
// Under clang the macros are the thread-safety attributes; under g++ (the release build)
// they expand to nothing, so the annotations cost nothing at run time. The CTest
// `thread_safety` (scripts/check-thread-safety.sh) compiles the libraries with clang and
// -Werror=thread-safety: a member read or written without its mutex, a helper called
// without the lock it REQUIRES, a lock leaked out of a scope — each fails the build.
//
//   Mutex mu_;
//   std::vector<Item> items_ GUARDED_BY(mu_);
//   void push(Item i) EXCLUDES(mu_) { MutexLock lock(mu_); items_.push_back(std::move(i)); }
//   void trim() REQUIRES(mu_);   // the caller holds mu_
//
// Waiting on a condition: keep std::condition_variable and wait through UniqueLock
// (`lock.wait(cv_, pred)`); a predicate lambda that reads guarded members says so with
// `[&]() REQUIRES(mu_) { return stopping_; }`, since the analysis checks a lambda's body
// on its own and cannot see that wait() calls it with the lock held.
//
// Header-only, depends on the standard library alone: flows/ (the leaf library) uses it too.
#pragma once

#include <condition_variable>
#include <mutex>
#include <shared_mutex>
#include <utility>

#if defined(__clang__)
#define WEIR_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define WEIR_THREAD_ANNOTATION_(x)
#endif

// A type that is a lock (Mutex), and a guard type whose lifetime holds one (MutexLock).
#define CAPABILITY(name) WEIR_THREAD_ANNOTATION_(capability(name))
#define SCOPED_CAPABILITY WEIR_THREAD_ANNOTATION_(scoped_lockable)

// Data: read or written only with the mutex held; PT_: the data the pointer points to.
#define GUARDED_BY(mu) WEIR_THREAD_ANNOTATION_(guarded_by(mu))
#define PT_GUARDED_BY(mu) WEIR_THREAD_ANNOTATION_(pt_guarded_by(mu))

// Lock order between mutexes (checked only with -Wthread-safety-beta).
#define ACQUIRED_BEFORE(...) WEIR_THREAD_ANNOTATION_(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) WEIR_THREAD_ANNOTATION_(acquired_after(__VA_ARGS__))

// Functions: the caller must hold (REQUIRES) or must not hold (EXCLUDES) the mutex; the
// function takes (ACQUIRE), gives back (RELEASE) or may take (TRY_ACQUIRE) it.
#define REQUIRES(...) WEIR_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) WEIR_THREAD_ANNOTATION_(requires_shared_capability(__VA_ARGS__))
#define EXCLUDES(...) WEIR_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) WEIR_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) WEIR_THREAD_ANNOTATION_(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) WEIR_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) WEIR_THREAD_ANNOTATION_(release_shared_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) WEIR_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
#define ASSERT_CAPABILITY(mu) WEIR_THREAD_ANNOTATION_(assert_capability(mu))
#define ASSERT_SHARED_CAPABILITY(mu) WEIR_THREAD_ANNOTATION_(assert_shared_capability(mu))
#define RETURN_CAPABILITY(mu) WEIR_THREAD_ANNOTATION_(lock_returned(mu))

// Turns the analysis off for one function. Each use says why in a comment: it is for code
// whose locking the analysis cannot follow, never to silence a real finding.
#define NO_THREAD_SAFETY_ANALYSIS WEIR_THREAD_ANNOTATION_(no_thread_safety_analysis)

namespace weir {

// std::mutex with the annotations. Also a BasicLockable (lock/unlock/try_lock), so
// std::condition_variable_any works with it; std::condition_variable waits go through
// UniqueLock below.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

  // Tells the analysis the caller holds this mutex where it cannot see so itself (a
  // callback that a locked caller runs synchronously). Checks nothing at run time.
  void assert_held() const ASSERT_CAPABILITY(this) {}

  // The std::mutex inside, for UniqueLock's std::unique_lock; not for locking directly
  // (the analysis would not see it).
  std::mutex& native() { return mu_; }

 private:
  std::mutex mu_;
};

// Holds the mutex for its scope (std::lock_guard). With std::adopt_lock it takes over a
// mutex the caller holds already (after `if (!mu.try_lock()) …`).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  MutexLock(Mutex& mu, std::adopt_lock_t) REQUIRES(mu) : mu_(mu) {}
  ~MutexLock() RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// Holds the mutex for its scope, may let go of it and take it again (unlock()/lock()),
// and waits on a std::condition_variable (std::unique_lock). A wait releases the mutex
// while it sleeps and holds it again when it returns, so for the analysis it stays held.
class SCOPED_CAPABILITY UniqueLock {
 public:
  explicit UniqueLock(Mutex& mu) ACQUIRE(mu) : lock_(mu.native()) {}
  ~UniqueLock() RELEASE() = default;
  UniqueLock(const UniqueLock&) = delete;
  UniqueLock& operator=(const UniqueLock&) = delete;

  void lock() ACQUIRE() { lock_.lock(); }
  void unlock() RELEASE() { lock_.unlock(); }

  // std::condition_variable's wait, wait_for and wait_until, with or without a predicate.
  template <typename... Args>
  auto wait(std::condition_variable& cv, Args&&... args) {
    return cv.wait(lock_, std::forward<Args>(args)...);
  }
  template <typename... Args>
  auto wait_for(std::condition_variable& cv, Args&&... args) {
    return cv.wait_for(lock_, std::forward<Args>(args)...);
  }
  template <typename... Args>
  auto wait_until(std::condition_variable& cv, Args&&... args) {
    return cv.wait_until(lock_, std::forward<Args>(args)...);
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

// std::shared_mutex with the annotations: written under WriterLock, read under ReaderLock
// (a member GUARDED_BY it may be read with either, written only with WriterLock).
class CAPABILITY("mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  void lock_shared() ACQUIRE_SHARED() { mu_.lock_shared(); }
  void unlock_shared() RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds a SharedMutex exclusively for its scope (std::unique_lock<std::shared_mutex>).
class SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~WriterLock() RELEASE() { mu_.unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex& mu_;
};

// Holds a SharedMutex shared for its scope (std::shared_lock): other readers may hold it
// too, a writer waits.
class SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) ACQUIRE_SHARED(mu) : mu_(mu) { mu_.lock_shared(); }
  ~ReaderLock() RELEASE() { mu_.unlock_shared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

}  // namespace weir

#!/usr/bin/env bash
# Self-test of the thread-safety check (CTest `thread_safety_selftest`, label lint): with
# runtime/base/thread_annotations.h and the flags of scripts/check-thread-safety.sh, code that
# follows its annotations compiles, and each kind of mistake fails naming the member or
# function. Without this a header whose macros had silently become empty under clang
# would pass the check on every tree. Also: g++ compiles the same code (the macros are
# empty there). Exit 1 without clang++ (a missing tool fails).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
clang=$(command -v clang++ || command -v clang++-14 || true)
[[ -n "$clang" ]] || { echo "thread_safety_selftest: clang++ not found (scripts/setup.sh installs it)"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
flags=(-std=c++20 -I"$root" -Wall -Wextra -Werror -Wthread-safety -Werror=thread-safety -fsyntax-only)

cat > "$dir/good.cc" <<'CC'
#include <vector>
#include "runtime/base/thread_annotations.h"
namespace weir {
class Queue {
 public:
  void push(int v) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    items_.push_back(v);
    cv_.notify_one();
  }
  int pop() EXCLUDES(mu_) {
    UniqueLock lock(mu_);
    lock.wait(cv_, [&]() REQUIRES(mu_) { return !items_.empty(); });
    int v = take_locked();
    lock.unlock();
    lock.lock();
    return v + static_cast<int>(items_.size());
  }
  bool try_clear() {
    if (!mu_.try_lock()) return false;
    MutexLock lock(mu_, std::adopt_lock);
    items_.clear();
    return true;
  }
 private:
  int take_locked() REQUIRES(mu_) {
    int v = items_.back();
    items_.pop_back();
    return v;
  }
  Mutex mu_;
  std::condition_variable cv_;
  std::vector<int> items_ GUARDED_BY(mu_);
};
class Table {
 public:
  void put(int v) {
    WriterLock lock(mu_);
    last_ = v;
  }
  int last() const {
    ReaderLock lock(mu_);
    return last_;
  }
 private:
  mutable SharedMutex mu_;
  int last_ GUARDED_BY(mu_) = 0;
};
}  // namespace weir
int main() {
  weir::Queue q;
  q.push(1);
  weir::Table t;
  t.put(1);
  return q.pop() == 1 && q.try_clear() && t.last() == 1 ? 0 : 1;
}
CC

fail=0
if ! out=$("$clang" "${flags[@]}" "$dir/good.cc" 2>&1); then
  echo "FAIL: annotated code that holds its locks was refused:"; echo "$out"; fail=1
fi
if ! out=$(g++ -std=c++20 -I"$root" -Wall -Wextra -Wpedantic -Werror -fsyntax-only "$dir/good.cc" 2>&1); then
  echo "FAIL: g++ does not compile the annotated code:"; echo "$out"; fail=1
fi

# Each mistake: a replacement for one line of good.cc, and what clang must say.
expect_failure() {
  local what=$1 from=$2 to=$3 diagnostic=$4
  python3 - "$dir/good.cc" "$dir/bad.cc" "$from" "$to" <<'PY'
import sys
src, dst, old, new = sys.argv[1:]
text = open(src).read()
assert text.count(old) == 1, old
open(dst, "w").write(text.replace(old, new))
PY
  if out=$("$clang" "${flags[@]}" "$dir/bad.cc" 2>&1); then
    echo "FAIL: $what compiled"; fail=1
  elif ! grep -q -- "$diagnostic" <<< "$out"; then
    echo "FAIL: $what failed without \"$diagnostic\":"; echo "$out"; fail=1
  fi
}
expect_failure "a guarded member written without its mutex" \
  "    MutexLock lock(mu_);
    items_.push_back(v);" "    items_.push_back(v);" "variable 'items_' requires holding mutex 'mu_'"
expect_failure "a REQUIRES helper called without the lock" \
  "    int v = take_locked();
    lock.unlock();" "    lock.unlock();
    int v = take_locked();" "calling function 'take_locked' requires holding mutex 'mu_'"
expect_failure "a wait predicate that reads guarded state without REQUIRES" \
  "[&]() REQUIRES(mu_) { return !items_.empty(); }" "[&] { return !items_.empty(); }" \
  "reading variable 'items_' requires holding mutex 'mu_'"
expect_failure "a try_lock()ed mutex left locked on one path" \
  "    MutexLock lock(mu_, std::adopt_lock);
" "" "mutex 'mu_' is not held on every path through here"
expect_failure "an EXCLUDES function called with the lock held" \
  "    items_.clear();" "    items_.clear();
    push(2);" "cannot call function 'push' while mutex 'mu_' is held"

expect_failure "a write under a shared (reader) lock" \
  "    WriterLock lock(mu_);
    last_ = v;" "    ReaderLock lock(mu_);
    last_ = v;" "writing variable 'last_' requires holding mutex 'mu_' exclusively"
expect_failure "a read of SharedMutex-guarded data without a lock" \
  "    ReaderLock lock(mu_);
    return last_;" "    return last_;" "reading variable 'last_' requires holding mutex 'mu_'"

((fail == 0)) || exit 1
echo "thread_safety_selftest: the annotations are checked (7 kinds of mistake refused)"

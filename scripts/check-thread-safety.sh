#!/usr/bin/env bash
# clang's thread-safety analysis (-Wthread-safety) over every translation unit, of the
# libraries and of the tests, that sees runtime/base/thread_annotations.h; any warning fails
# (docs/adr/0210, 0250).
#   scripts/check-thread-safety.sh [BUILD_DIR]   # CTest `thread_safety` (label lint)
# g++ builds weir; the annotations (GUARDED_BY, REQUIRES, …) are empty there. This
# configures BUILD_DIR (default build-tsa-clang/) with clang++, the tests and without
# benchmarks, only for its compile_commands.json, then runs `clang++ -fsyntax-only` on
# the units: the analysis runs in clang's front end, so nothing is generated or linked.
# The units are those whose #include "…" closure (read from the sources) reaches
# runtime/base/thread_annotations.h: the libraries' and the tests' (the fakes and the harness
# in tests/support are annotated). Through ccache (which caches -fsyntax-only, warnings
# included) an unchanged unit costs nothing the second time: cold ~245 CPU-seconds for
# 91 units (51 of them the tests'), warm ~10.
# Exit 1 when clang++ is missing (scripts/setup.sh installs it): a missing tool fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-tsa-clang}
cd "$root"
clang=$(command -v clang++ || command -v clang++-14 || true)
[[ -n "$clang" ]] || { echo "check-thread-safety: clang++ not found (scripts/setup.sh installs it)"; exit 1; }
launcher=$(command -v ccache || true)

# Asio in Boost 1.74 detects C++20 coroutines for g++ only (clang 14 does not set the TS
# macro it looks for): tell it they are there, as the fuzz target does.
flags="-Wthread-safety -Werror=thread-safety -DBOOST_ASIO_HAS_CO_AWAIT=1 -DBOOST_ASIO_HAS_STD_COROUTINE=1"
mkdir -p "$build"
# One run at a time per tree (scripts/warm-up.sh may be running it ahead of CTest).
exec 8> "$build/.lock"
flock 8
if [[ -f "$build/build.ninja" ]] && grep -qxF "CMAKE_CXX_FLAGS:STRING=$flags" "$build/CMakeCache.txt" &&
  grep -qxF "WEIR_TESTS:BOOL=ON" "$build/CMakeCache.txt"; then
  # Re-runs CMake only when a CMakeLists.txt or a globbed folder changed. (A tree
  # configured before the tests were checked, WEIR_TESTS=OFF, is configured again.)
  configure=(ninja -C "$build" build.ninja)
else
  configure=(cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER="$clang"
             -DCMAKE_CXX_FLAGS="$flags" -DWEIR_TESTS=ON -DWEIR_BENCH=OFF -DWEIR_FUZZ=OFF)
fi
"${configure[@]}" > "$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; echo "check-thread-safety: configuring $build failed"; exit 1; }

# One line per unit: the directory, then the command as a JSON list (-o/-c replaced by
# -fsyntax-only).
mapfile -t jobs < <(python3 - "$build/compile_commands.json" "$root" <<'PY'
import json, os, re, shlex, sys
db, root = sys.argv[1], sys.argv[2]
include = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
target = "runtime/base/thread_annotations.h"
deps = {}
def reaches(path, seen):
    # path is relative to root; includes are written from the root ("runtime/x.h").
    if path == target:
        return True
    if path in seen or not os.path.isfile(os.path.join(root, path)):
        return False
    seen.add(path)
    if path not in deps:
        with open(os.path.join(root, path), errors="replace") as f:
            deps[path] = include.findall(f.read())
    return any(reaches(d, seen) for d in deps[path])
for e in json.load(open(db)):
    f = os.path.relpath(os.path.join(e["directory"], e["file"]), root)
    if f.startswith("..") or "/fuzz/" in f or not reaches(f, set()):
        continue
    args = e.get("arguments") or shlex.split(e["command"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "-o":
            skip = True
        elif a != "-c":
            out.append(a)
    print(e["directory"] + "\t" + f + "\t" + json.dumps(out + ["-fsyntax-only"]))
PY
)
((${#jobs[@]})) || { echo "check-thread-safety: no translation unit includes runtime/base/thread_annotations.h"; exit 1; }
# The tests' units too (the annotated fakes and harness): none would mean a tree
# configured without them, a check that silently covers less.
tests=$(printf '%s\n' "${jobs[@]}" | awk -F'\t' '$2 ~ /^tests\//' | wc -l)
((tests)) || { echo "check-thread-safety: no unit of tests/ in $build (configured with WEIR_TESTS=OFF?)"; exit 1; }
echo "check-thread-safety: ${#jobs[@]} translation units ($tests of tests/)"

export launcher
analyse() {
  local dir unit cmd out
  IFS=$'\t' read -r dir unit cmd <<< "$1"
  mapfile -t argv < <(python3 -c 'import json, sys; print("\n".join(json.loads(sys.argv[1])))' "$cmd")
  if out=$(cd "$dir" && $launcher "${argv[@]}" 2>&1) && ! grep -q ': \(warning\|error\):' <<< "$out"; then
    return 0
  fi
  echo "== $unit"
  echo "$out"
  return 1
}
export -f analyse
if ! printf '%s\0' "${jobs[@]}" | xargs -0 -n1 -P"${TSA_JOBS:-2}" bash -c 'analyse "$0"'; then
  echo "check-thread-safety: findings above (runtime/base/thread_annotations.h says how to annotate)" >&2
  exit 1
fi
echo "check-thread-safety: ${#jobs[@]} translation units clean"

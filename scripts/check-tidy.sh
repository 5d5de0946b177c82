#!/usr/bin/env bash
# clang-tidy (.clang-tidy: bugprone, performance, the naming rule) over the translation
# units of the folders below, from build/compile_commands.json; any finding fails.
#   scripts/check-tidy.sh [BUILD_DIR]     # CTest `tidy` (label lint); default build/
#   TIDY_FOLDERS="flows cluster" scripts/check-tidy.sh   # other folders (e.g. runtime)
# A file whose text, the project's headers and .clang-tidy are unchanged since it last
# passed is not analysed again (stamps in BUILD_DIR/tidy-stamps), so a second run costs
# seconds; a cold run of the default folders (65 files) took 21 min with 2 jobs on a loaded
# machine (~6-7 CPU-minutes; ADR 0182). Exit 1 when clang-tidy
# is missing (scripts/setup.sh installs it): a missing tool fails, it never skips.
# Every folder of the tree is listed; runtime/.clang-tidy adds the function-size rule there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
cd "$root"
tidy=$(command -v clang-tidy || command -v clang-tidy-14 || true)
[[ -n "$tidy" ]] || { echo "check-tidy: clang-tidy not found (scripts/setup.sh installs it)"; exit 1; }
[[ -f "$build/compile_commands.json" ]] || { echo "check-tidy: no $build/compile_commands.json (configure first)"; exit 1; }

folders=${TIDY_FOLDERS:-flows cluster app runtime connectors/exec connectors/http connectors/mqtt connectors/nats connectors/poll connectors/timer connectors/registry.cc}
# Translation units of those folders (fuzz targets need clang's libFuzzer flags: not here).
mapfile -t units < <(python3 - "$build/compile_commands.json" "$root" $folders <<'PY'
import json, os, sys
db, root, folders = sys.argv[1], sys.argv[2], sys.argv[3:]
seen = set()
for e in json.load(open(db)):
    f = os.path.relpath(os.path.join(e["directory"], e["file"]), root)
    if "/fuzz/" in f or f in seen:
        continue
    if any(f == d or f.startswith(d.rstrip("/") + "/") for d in folders):
        seen.add(f)
        print(f)
PY
)
((${#units[@]})) || { echo "check-tidy: no translation units for: $folders"; exit 1; }
# Findings in headers count for the folders checked (runtime/ headers are checked when
# runtime/ is listed).
header_res=()
for d in $folders; do
  if [[ -d "$d" ]]; then header_res+=("${d%/}/[^/]*\\.h"); else header_res+=("${d%.cc}\\.h"); fi
done
header_filter="^$root/($(IFS='|'; echo "${header_res[*]}"))$"

stamps="$build/tidy-stamps"
mkdir -p "$stamps"
# One run at a time per tree (scripts/warm-up.sh may be running it ahead of CTest).
exec 8> "$stamps/.lock"
flock 8
context=$(cat $(git ls-files -- .clang-tidy '*/.clang-tidy' | sort) "$tidy" <(git ls-files -- '*.h' | sort | xargs cat) 2> /dev/null |
  sha256sum | cut -c1-16)
todo=()
for u in "${units[@]}"; do
  key=$(cat "$u" | sha256sum | cut -c1-16)
  [[ -f "$stamps/${u//\//_}.$context.$key" ]] || todo+=("$u")
done
echo "check-tidy: ${#units[@]} files in: $folders; ${#todo[@]} to analyse"

export tidy build header_filter stamps context
analyse() {
  local u=$1 out key
  key=$(sha256sum < "$u" | cut -c1-16)
  # clang 14 with libstdc++ 12 and Boost 1.74: Asio enables its C++20 coroutines only
  # for GCC, so http_server.cc would not parse; these say what clang 14 does support.
  if out=$("$tidy" -p "$build" --quiet --header-filter="$header_filter" --extra-arg=-D__cpp_impl_coroutine=201902L \
      --extra-arg=-DBOOST_ASIO_HAS_CO_AWAIT=1 --extra-arg=-DBOOST_ASIO_HAS_STD_COROUTINE=1 "$u" 2>&1) &&
      ! grep -q ': \(warning\|error\):' <<< "$out"; then
    rm -f "$stamps/${u//\//_}".*
    touch "$stamps/${u//\//_}.$context.$key"
  else
    grep -v '^[0-9]* warnings\? generated\.$\|^Suppressed [0-9]* warnings\|^Use -header-filter\|^Use -system-headers' <<< "$out"
    return 1
  fi
}
export -f analyse
if ((${#todo[@]})) && ! printf '%s\0' "${todo[@]}" | xargs -0 -n1 -P"${TIDY_JOBS:-2}" bash -c 'analyse "$0"'; then
  echo "check-tidy: findings above (.clang-tidy; fix them, or argue a check off in docs/adr/0182-lint-checks.md)" >&2
  exit 1
fi
echo "check-tidy: ${#units[@]} files clean"

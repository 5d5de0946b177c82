#!/usr/bin/env bash
# clang-format --dry-run over the files that are already formatted (.clang-format-files),
# so they stay formatted; the tree is formatted file by file, not in one sweep that would
# conflict with every open branch (docs/adr/0182-lint-checks.md).
#   scripts/check-format.sh                 # the listed files (CTest `format`, label lint)
#   scripts/check-format.sh --changed [BASE] # also every C++ file changed since BASE (default main)
#   scripts/check-format.sh FILE...          # these files
# Exit 1 with clang-format's diagnostics when a file is not formatted; 77 when clang-format
# is missing (CTest reports that as skipped; scripts/setup.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format > /dev/null || { echo "check-format: clang-format not found (apt-get install clang-format)"; exit 77; }

files=()
if (($# > 0)) && [[ "$1" != --changed ]]; then
  files=("$@")
else
  mapfile -t files < <(grep -v '^#' .clang-format-files | grep .)
  if [[ "${1:-}" == --changed ]]; then
    base=${2:-main}
    mapfile -t -O "${#files[@]}" files < <(git diff --name-only --diff-filter=d "$base" -- '*.cc' '*.h')
  fi
fi
missing=0
for f in "${files[@]}"; do
  [[ -f "$f" ]] || { echo "check-format: $f is listed but does not exist"; missing=1; }
done
((missing == 0)) || exit 1
mapfile -t files < <(printf '%s\n' "${files[@]}" | sort -u)
if clang-format --dry-run --Werror "${files[@]}"; then
  echo "check-format: ${#files[@]} files formatted"
else
  echo "check-format: run clang-format -i on the files above" >&2
  exit 1
fi

#!/usr/bin/env bash
# clang-format --dry-run over every tracked C++ file (.clang-format; the whole tree was
# formatted in one commit, docs/adr/0182-lint-checks.md), so it stays formatted.
#   scripts/check-format.sh          # every *.cc / *.h git tracks (CTest `format`, label lint)
#   scripts/check-format.sh FILE...  # these files
# Without git (an exported tarball) every *.cc / *.h under the source folders is checked.
# Exit 1 with clang-format's diagnostics when a file is not formatted, and when clang-format
# is missing (a missing tool fails the check: it must not pass while checking nothing).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format > /dev/null || { echo "check-format: clang-format not found (scripts/setup.sh installs it)"; exit 1; }

files=()
if (($# > 0)); then
  files=("$@")
elif git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- '*.cc' '*.h')
else
  mapfile -t files < <(find app bench cluster connectors flows runtime tests -name '*.cc' -o -name '*.h')
fi
if clang-format --dry-run --Werror "${files[@]}"; then
  echo "check-format: ${#files[@]} files formatted"
else
  echo "check-format: run clang-format -i on the files above (or on every file: git ls-files '*.cc' '*.h' | xargs clang-format -i)" >&2
  exit 1
fi

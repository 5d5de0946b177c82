#!/usr/bin/env bash
# Self-test of scripts/check-layout.sh: in a throwaway tree with a small dependency table,
# an allowed include passes, and each kind of forbidden include fails naming file and line.
set -euo pipefail
check="$(cd "$(dirname "$0")/../.." && pwd)/scripts/check-layout.sh"
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
cd "$root"
mkdir -p docs
cat > docs/development.md <<'MD'
## Layout

| folder | what | may include |
|---|---|---|
| `core/` | the leaf | `core/` |
| `plug/` | registry | `plug/` `core/api.h` |
| `plug/<kind>/` | one per kind | `plug/<kind>/` `core/api.h` |
| `plug/special/` | a row that tries to allow another kind | `plug/special/` `plug/http/client.h` `core/api.h` `core/extra.h` |
| `tests/` | anything | `*` |

## Next
MD
mkdir -p core plug/http plug/timer plug/special tests
printf '#include "core/api.h"\n#include <vector>\n' > core/a.cc
printf '#include "core/api.h"\n#include "plug/http/client.h"\n' > plug/registry.cc
printf '#include "plug/http/client.h"\n#include "core/api.h"\n' > plug/http/client.cc
printf '#include "core/extra.h"\n' > plug/special/s.cc
printf "" > plug/timer/t.cc
printf '#include "helpers.h"\n#include "plug/http/client.h"\n' > tests/t.cc
LAYOUT_ROOT=. "$check" > /dev/null || { echo "FAIL: a tree that follows its table was refused"; exit 1; }

expect_fail() {   # FILE TEXT WANT: adding TEXT to FILE makes the check fail with WANT
  local file=$1 text=$2 want=$3 out
  cp "$file" "$file.bak"
  printf '%s\n' "$text" >> "$file"
  if out=$(LAYOUT_ROOT=. "$check" 2>&1); then
    echo "FAIL: '$text' in $file passed"; exit 1
  fi
  grep -qF -- "$want" <<< "$out" || { echo "FAIL: '$text' in $file: expected '$want' in: $out"; exit 1; }
  mv "$file.bak" "$file"
}
expect_fail core/a.cc '#include "plug/registry.h"' 'core/a.cc:3: #include "plug/registry.h" is not allowed in core/'
expect_fail core/a.cc '#include "core_internal.h"' 'core/a.cc:3: #include "core_internal.h" has no folder'
expect_fail plug/timer/t.cc '#include "core/internal.h"' 'is not allowed in plug/<kind>/'
expect_fail plug/http/client.cc '#include "core/internal.h"' 'plug/http/client.cc:3: #include "core/internal.h"'
expect_fail plug/special/s.cc '#include "core/internal.h"' 'is not allowed in plug/special/'
# One kind's folder never includes another's, even where a row names the header.
expect_fail plug/special/s.cc '#include "plug/http/client.h"' 'plug/special/s.cc:2: #include "plug/http/client.h": a <kind> folder never includes another kind'
expect_fail plug/timer/t.cc '#include "plug/http/client.h"' 'plug/timer/t.cc:1: #include "plug/http/client.h": a <kind> folder never includes another kind'
expect_fail plug/registry.cc '#include "tests/t.h"' 'is not allowed in plug/'
echo "layout self-test: 1 clean tree passed, 8 forbidden includes failed"

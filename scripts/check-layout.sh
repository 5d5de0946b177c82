#!/usr/bin/env bash
# Asserts the folder dependency table of docs/development.md ("## Layout") literally: every
# `#include "x/…"` in a C++ file of a folder must match a pattern in the last column of
# the most specific row for that file. Patterns: `x/` (a folder, and everything under it),
# `x/y.h` (one header), `*` (anything), `<kind>` (the connector's own folder name).
# An include of a project header without a folder (`#include "y.h"`) fails too.
# Whatever the rows say, a file in one `x/<kind>/` folder never includes another kind's
# folder (connectors/poll/ → connectors/http/): what two kinds share has a home outside
# them (e.g. runtime/base/retry_after.h), so no row can re-open that door.
#   scripts/check-layout.sh            # from anywhere; exit 1 and one line per violation
# Runs as the CTest `layout` (label lint), so CI fails on a new forbidden include.
set -euo pipefail
set -o noglob   # patterns such as `*` are words here, never file names
cd "${LAYOUT_ROOT:-$(dirname "$0")/..}"   # LAYOUT_ROOT: another tree (the self-test)

table_doc=docs/development.md
# Rows of the Layout table: "| `folder/` | what | patterns |".
mapfile -t rows < <(awk '/^## Layout/{on=1; next} /^## /{on=0} on && /^\| `/' "$table_doc")
if ((${#rows[@]} == 0)); then
  echo "check-layout: no rows found under '## Layout' in $table_doc" >&2
  exit 2
fi

declare -a row_dirs=() row_pats=()
for row in "${rows[@]}"; do
  dir=$(printf '%s\n' "$row" | awk -F'|' '{print $2}' | grep -o '`[^`]*`' | head -1 | tr -d '`')
  pats=$(printf '%s\n' "$row" | awk -F'|' '{print $(NF-1)}' | { grep -o '`[^`]*`' || true; } | tr -d '`' | tr '\n' ' ')
  [[ -n "$dir" && "$dir" == */ ]] || continue
  row_dirs+=("$dir")
  row_pats+=("$pats")
done

# The most specific row for a path: a literal folder beats `<kind>`, a longer one a shorter.
row_for() {
  local path=$1 best=-1 best_len=-1 i dir re len
  for i in "${!row_dirs[@]}"; do
    dir=${row_dirs[$i]}
    re="^${dir//<kind>/[^/]+}"
    [[ "$path" =~ $re ]] || continue
    len=$((${#BASH_REMATCH[0]} * 2))   # the longer matched folder wins;
    [[ "$dir" == *"<kind>"* ]] && len=$((len - 1))   # at equal length a named folder beats <kind>
    if ((len > best_len)); then best=$i; best_len=$len; fi
  done
  echo "$best"
}

allowed() {   # allowed PATTERNS FILE INCLUDE
  local pats=$1 file=$2 inc=$3 p kind=""
  local i dir
  for i in "${!row_dirs[@]}"; do   # <kind>: the folder name below a `x/<kind>/` row's x/
    dir=${row_dirs[$i]}
    [[ "$dir" == *"<kind>"* && "$file" =~ ^${dir%%<kind>*}([^/]+)/ ]] && kind=${BASH_REMATCH[1]}
  done
  for p in $pats; do
    p=${p//<kind>/$kind}
    [[ "$p" == "*" ]] && return 0   # bench/, tests/: anything, folder-less includes too
    if [[ "$p" == */ ]]; then [[ "$inc" == "$p"* ]] && return 0; else [[ "$inc" == "$p" ]] && return 0; fi
  done
  return 1
}

# cross_kind FILE INCLUDE: true when FILE is in x/<a>/ of a `x/<kind>/` row and INCLUDE
# names x/<b>/… with b ≠ a; prints x/<b>/.
cross_kind() {
  local file=$1 inc=$2 i dir base
  for i in "${!row_dirs[@]}"; do
    dir=${row_dirs[$i]}
    [[ "$dir" == *"<kind>"* ]] || continue
    base=${dir%%<kind>*}
    [[ "$file" =~ ^${base}([^/]+)/ ]] || continue
    local own=${BASH_REMATCH[1]}
    if [[ "$inc" =~ ^${base}([^/]+)/ && "${BASH_REMATCH[1]}" != "$own" ]]; then
      echo "${base}${BASH_REMATCH[1]}/"
      return 0
    fi
  done
  return 1
}

violations=0 files=0
for i in "${!row_dirs[@]}"; do
  dir=${row_dirs[$i]}
  [[ "$dir" == *"<kind>"* ]] && continue   # its files are reached through connectors/
  [[ -d "$dir" ]] || continue
  while IFS= read -r -d '' file; do
    [[ "$(row_for "$file")" == "$i" ]] || continue   # a more specific row owns it
    files=$((files + 1))
    while IFS=: read -r line inc; do
      if other=$(cross_kind "$file" "$inc"); then
        echo "$file:$line: #include \"$inc\": a <kind> folder never includes another kind's folder ($other); what two kinds share needs a common home (runtime/ for connectors)"
        violations=$((violations + 1))
      elif allowed "${row_pats[$i]}" "$file" "$inc"; then
        continue
      elif [[ "$inc" != */* ]]; then
        echo "$file:$line: #include \"$inc\" has no folder (write \"${dir%%/*}/…\")"
        violations=$((violations + 1))
      else
        echo "$file:$line: #include \"$inc\" is not allowed in $dir (docs/development.md, Layout: ${row_pats[$i]})"
        violations=$((violations + 1))
      fi
    done < <(grep -n -o '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*"' "$file" | sed -E 's/^([0-9]+):.*"([^"]*)"/\1:\2/')
  done < <(find "$dir" -type f \( -name '*.cc' -o -name '*.h' -o -name '*.cpp' -o -name '*.hpp' \) -print0)
done

# `x/<kind>/` rows: the files one folder below x/ that no named row owns.
for i in "${!row_dirs[@]}"; do
  dir=${row_dirs[$i]}
  [[ "$dir" == *"<kind>"* ]] || continue
  base=${dir%%<kind>*}
  [[ -d "$base" ]] || continue
  while IFS= read -r -d '' file; do
    [[ "$(row_for "$file")" == "$i" ]] || continue
    files=$((files + 1))
    while IFS=: read -r line inc; do
      if other=$(cross_kind "$file" "$inc"); then
        echo "$file:$line: #include \"$inc\": a <kind> folder never includes another kind's folder ($other); what two kinds share needs a common home (runtime/ for connectors)"
        violations=$((violations + 1))
      elif [[ "$inc" != */* ]] || ! allowed "${row_pats[$i]}" "$file" "$inc"; then
        echo "$file:$line: #include \"$inc\" is not allowed in $dir (docs/development.md, Layout: ${row_pats[$i]})"
        violations=$((violations + 1))
      fi
    done < <(grep -n -o '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*"' "$file" | sed -E 's/^([0-9]+):.*"([^"]*)"/\1:\2/')
  done < <(find "$base" -mindepth 2 -type f \( -name '*.cc' -o -name '*.h' -o -name '*.cpp' -o -name '*.hpp' \) -print0)
done

if ((files == 0)); then
  echo "check-layout: no files checked (is the table right?)" >&2
  exit 2
fi
if ((violations)); then
  echo "check-layout: $violations include(s) break the dependency table of docs/development.md ($files files checked)" >&2
  exit 1
fi
echo "check-layout: $files files follow the dependency table of docs/development.md"

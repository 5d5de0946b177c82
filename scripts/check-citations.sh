#!/usr/bin/env bash
# Comments, tests, scripts and docs stand alone: whatever they cite, a reader of the
# repository can open. They cite ADRs (docs/adr/NNNN-slug.md), docs, tests and files in
# the repository, or state the reason itself. This check fails on a line that cites what
# only the people who wrote it had: a work session ("session 8"), one of our own issues
# or its items ("issue #13", "issue 10 item 7", "Must show"), a review and its findings
# ("the review", "review B11"), the contract kept outside the repository ("spec.md",
# "spec §1.6", "(§1.6)", "spec section 6", "../shared/docs/…"), or a work log.
# Instead of citing, say the rule (a full backlog answers 503), or point at the page that
# says it (docs/admin-api.md, ADR 0080, tests/integration/order_test.cc).
#
# An upstream project's public issue is fine: cite it as owner/repo#N
# (e.g. nats-io/nats.c#1007), or say "upstream" on the line; either exempts that line.
#
#   scripts/check-citations.sh     # from anywhere; exit 1 and one line per hit
#   CITATIONS_ROOT=dir scripts/check-citations.sh    # another tree (the self-test)
# Scans the files git tracks (without git, e.g. an exported tarball: every file found) of
# the kinds below; not docs/bench-runs/ (raw data as it was recorded), this file (the
# patterns) and tests/lint/citations_selftest.sh (its fixture). Runs as the CTest
# `citations` (label lint); `citations_selftest` shows it failing on each kind of citation.
set -euo pipefail
cd "${CITATIONS_ROOT:-$(dirname "$0")/..}"   # CITATIONS_ROOT: another tree (the self-test)
export LC_ALL=C

# What a hit is (extended regular expressions, matched case-insensitively, per line).
patterns=(
  '\bsessions?[ -]#?[0-9]'               # work sessions: "session 8", "sessions 25 and 26"
  '\bissues?[ -]#?[0-9]'                 # our issues: "issue #13", "issue 11", "issue-10 figures"
  '\bitems? #?[0-9]+([-,] ?[0-9]+| and [0-9]+)*[):;]'  # their items: "(item 7)", "items 4-6:"
  '\(items? #?[0-9]'                    # (not "items 1 to 10": a count)
  '\bmust show\b'                        # an issue's acceptance list
  '\breviews?\b'                         # reviews: "the review", "hot-path review C6", "(review §1.4)"
  '\bwork[ -]?logs?\b'                   # work logs
  '\.\./shared/|\bshared/docs\b'         # files outside the repository
  '\bspec\.md\b'                         # the contract kept outside the repository …
  '\bspec ?§'                            # … and its sections: "spec §6", "(spec §1.7)"
  '\bspec (section )?[0-9]'              # "spec 1.6", "spec section 6"
  '\(§'                                  # a bare section: "(§1.6)"
)
# What exempts a line: an upstream project's public issue, or the word upstream.
exempt='[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+#[0-9]+|\bupstream\b'

# The files: the kinds the project writes prose in.
kinds=('*.cc' '*.h' '*.sh' '*.py' '*.cmake' 'CMakeLists.txt' '*.md' '*.js' '*.html' '*.css'
       '*.lua' '*.yaml' '*.yml')
skip='^(docs/bench-runs/|scripts/check-citations\.sh$|tests/lint/citations_selftest\.sh$)'

files=()
if [[ "$(git rev-parse --show-toplevel 2> /dev/null || true)" == "$(pwd -P)" ]]; then
  mapfile -t files < <({ git ls-files -- "${kinds[@]/#/:(glob)**/}" .ci/run; } | sort -u \
                       | { grep -Ev "$skip" || true; })
else
  names=()
  for k in "${kinds[@]}"; do names+=(-o -name "$k"); done
  mapfile -t files < <(find . \( -name .git -o -type d -name 'build*' \) -prune -o -type f \
                         \( -path ./.ci/run "${names[@]}" \) -print \
                       | sed 's|^\./||' | sort | { grep -Ev "$skip" || true; })
fi
if ((${#files[@]} == 0)); then
  echo "check-citations: no files found in $(pwd)" >&2
  exit 2
fi

regex=$(IFS='|'; echo "${patterns[*]}")
# file:line:text of every hit, minus the exempt lines. -I: binary files are not prose.
# The exemption is looked for in the text only, never in the file's name.
hits=$(printf '%s\0' "${files[@]}" \
         | xargs -0 grep -HnIiE -- "$regex" 2> /dev/null \
         | { grep -viE -- "^[^:]*:[0-9]+:.*($exempt)" || true; } || true)

if [[ -n "$hits" ]]; then
  # file:line: the text, without its indentation, at most 160 characters of it.
  sed -E 's/^([^:]*:[0-9]+:)[[:space:]]*(.{0,160}).*$/\1 \2/' <<< "$hits"
  n=$(wc -l <<< "$hits")
  echo "check-citations: $n line(s) cite what the repository does not hold (${#files[@]} files checked); cite an ADR, doc or test instead, or say the reason (header of scripts/check-citations.sh)" >&2
  exit 1
fi
echo "check-citations: ${#files[@]} files cite only what the repository holds"

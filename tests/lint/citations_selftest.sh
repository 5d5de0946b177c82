#!/usr/bin/env bash
# Self-test of scripts/check-citations.sh: in a throwaway tree, clean files pass (ADR and
# doc citations, an upstream issue as owner/repo#N or with the word upstream, everyday
# words such as "session" and "items"), and each kind of citation a reader cannot open
# fails, naming the file and line. This file is the check's fixture, so the check skips it.
set -euo pipefail
check="$(cd "$(dirname "$0")/../.." && pwd)/scripts/check-citations.sh"
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
cd "$root"
mkdir -p runtime docs tests docs/bench-runs/2026-01-01
cat > runtime/clean.cc <<'CC'
// The flow stage's batch (ADR 0262; docs/architecture.md). A full backlog answers 503.
// The MQTT source keeps its session; a page of items 1 to 10; RFC 9112 §6.1, §6.3.
// cnats drops the parser state on reconnect (nats-io/nats.c#1007).
// An upstream bug, issue 3816 there: the server ignores max_bytes with batch 0.
int main() { return 0; }
CC
cat > docs/clean.md <<'MD'
# Clean

See [admin-api.md](admin-api.md) and tests/integration/order_test.cc; the spec of a sink
is its `to:` entry. Reviewers use scripts/check-format.sh.
MD
# Raw data is exempt: what a recorded run printed stays as it was.
printf 'recorded in session 4 for issue #2\n' > docs/bench-runs/2026-01-01/raw.md
printf 'docs/bench-runs/2026-01-01/raw.md not scanned\n' > docs/bench-runs/README.txt
out=$(CITATIONS_ROOT=. "$check" 2>&1) || { echo "FAIL: a clean tree was refused: $out"; exit 1; }
grep -q '^check-citations: 2 files cite only what the repository holds$' <<< "$out" \
  || { echo "FAIL: unexpected summary for the clean tree: $out"; exit 1; }

expect_fail() {   # FILE TEXT: a new FILE holding TEXT makes the check fail, naming FILE:line
  local file=$1 text=$2 out
  printf '%s\n' "$text" > "$file"
  if out=$(CITATIONS_ROOT=. "$check" 2>&1); then
    echo "FAIL: '$text' in $file passed"; exit 1
  fi
  grep -qF -- "$file:1: " <<< "$out" || { echo "FAIL: '$text' in $file: expected '$file:1:' in: $out"; exit 1; }
  rm "$file"
}
expect_fail runtime/a.cc '// Opened on its own thread (ADR 0215, session 12).'
expect_fail runtime/b.cc '// The start-up timeline (issue #7): milliseconds since start.'
expect_fail runtime/c.h '  // Every later publish fails at once (hot-path review C6).'
# shellcheck disable=SC2016  # the backquotes are the doc's, not the shell's
expect_fail docs/d.md 'The contract is `../shared/docs/spec.md`; where weir differs an ADR says so.'
expect_fail tests/e_test.cc '// Must show: every row of the ingress answers.'
expect_fail tests/f_test.cc 'TEST_CASE("broker payloads are refused (spec 1.6)", "[unit]") {}'
expect_fail tests/g.sh '# Exit codes (spec §2): 2 for a usage error.'
expect_fail tests/h_test.cc '// nothing stored for a rejected request (§1.6).'
expect_fail docs/i.md '| ingress | answers every row of spec section 6 |'
expect_fail tests/j.py '"""The dashboard in a real browser (issue 12 item 2)."""'
expect_fail tests/CMakeLists.txt '# Disabled in sessions 6 and 7 for an intermittent loss.'
expect_fail tests/k_test.cc '// item 8): JSON lines with levels, no secret ever logged.'
expect_fail tests/l.yaml '# The acceptance list (items 4-6; docs/adr/0042-version-registry.md).'
expect_fail docs/m.md 'Figures: the work log of the bench runs.'
# An exemption is read from the text, never from the file's name.
mkdir -p docs/upstream
expect_fail docs/upstream/n.md 'As the review found, ...'
echo "citations self-test: 1 clean tree passed, 15 citations failed"

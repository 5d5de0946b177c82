#!/usr/bin/env bash
# In a clean clone, the README's two commands work exactly as
# written. Clones REPO (its committed HEAD) into a temp dir, takes the first two lines
# of the README's first ```sh block, and
#   1. runs the first: it must build, start weir (embedded NATS) and print where to
#      POST; a POST there answers 202 and reaches the demo sink; Ctrl-C (SIGINT to weir)
#      stops everything and frees the ports;
#   2. runs the second: the whole test suite must pass (exit 0).
# Builds the whole tree from scratch (tens of minutes on 2 cores), so CTest registers it
# disabled unless configured with -DWEIR_CLEAN_CLONE_TEST=ON; run it by hand with
#   tests/integration/clean_clone.sh /path/to/repo
# Processes are stopped by PID only; the temp dir is removed on exit.
set -euo pipefail

REPO=${1:?usage: clean_clone.sh REPO}
REPO=$(cd "$REPO" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/weir-clean-clone-XXXXXX")
RUN_PID=""

log() { echo "clean_clone: $*" >&2; }
fail() {
  log "FAILED: $*"
  exit 1
}

# Every descendant of a PID (by parent PID, never by name), so each can be signalled by PID.
descendants() {
  local p
  for p in $(ps -o pid= --ppid "$1" 2>/dev/null); do
    echo "$p"
    descendants "$p"
  done
}

cleanup() {
  local rc=$?
  if [ -n "$RUN_PID" ] && kill -0 "$RUN_PID" 2>/dev/null; then
    for p in $(descendants "$RUN_PID") "$RUN_PID"; do kill -KILL "$p" 2>/dev/null || true; done
  fi
  if [ $rc -ne 0 ] && [ -f "$WORK/run.log" ]; then
    log "last lines of the first command's output:"
    tail -n 40 "$WORK/run.log" >&2 || true
  fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

log "cloning $REPO into $WORK/weir"
git clone --quiet "$REPO" "$WORK/weir"
cd "$WORK/weir"
log "at $(git log -1 --format='%h %s')"

# The README's two commands: the first two lines of its first ```sh block.
mapfile -t COMMANDS < <(awk '/^```sh/{inblock=1; next} /^```/{if (inblock) exit} inblock && NF' README.md | head -n 2)
[ "${#COMMANDS[@]}" -eq 2 ] || fail "README.md does not open with a \`\`\`sh block of two commands"
log "command 1: ${COMMANDS[0]}"
log "command 2: ${COMMANDS[1]}"

for port in 8080 8081 9090; do
  port_free "$port" || fail "127.0.0.1:$port is in use on this machine; the README's example needs it"
done

# --- command 1: build and run the example
bash -c "${COMMANDS[0]}" >"$WORK/run.log" 2>&1 &
RUN_PID=$!
log "waiting for weir to become ready (this includes a full build)"
deadline=$((SECONDS + 5400))
until curl -sf -o /dev/null http://127.0.0.1:8081/readyz; do
  kill -0 "$RUN_PID" 2>/dev/null || fail "the first command exited before weir was ready"
  [ $SECONDS -lt $deadline ] || fail "weir not ready after 90 min"
  sleep 2
done
[ -x build/weir ] || fail "build/weir does not exist"
URL=$(grep -oE 'http://127\.0\.0\.1:8080/in/[A-Za-z0-9_/.-]+' "$WORK/run.log" | head -n 1)
[ -n "$URL" ] || fail "the first command did not print where to POST"
log "POST $URL"
status=$(curl -s -o "$WORK/post.out" -w '%{http_code}' -X POST "$URL" -H 'Content-Type: application/json' \
  -d '{"id":"clean-clone-1","hello":"world"}')
[ "$status" = 202 ] || fail "POST $URL answered $status: $(cat "$WORK/post.out")"
grep -q '"id"' "$WORK/post.out" || fail "202 without an id: $(cat "$WORK/post.out")"
for _ in $(seq 1 100); do
  received=$(curl -s http://127.0.0.1:9090/stats | grep -oE '"received":[0-9]+' | cut -d: -f2 || true)
  [ "${received:-0}" -ge 1 ] && break
  sleep 0.2
done
[ "${received:-0}" -ge 1 ] || fail "the demo sink on 127.0.0.1:9090 received nothing"
log "delivered to the demo sink"

# Ctrl-C: SIGINT to weir (the script's foreground child); the script's trap stops the sink.
WEIR_PID=""
for p in $(descendants "$RUN_PID"); do
  [ "$(cat "/proc/$p/comm" 2>/dev/null)" = weir ] && WEIR_PID=$p
done
[ -n "$WEIR_PID" ] || fail "no weir process under the first command"
kill -INT "$WEIR_PID"
for _ in $(seq 1 150); do
  kill -0 "$RUN_PID" 2>/dev/null || break
  sleep 0.2
done
kill -0 "$RUN_PID" 2>/dev/null && fail "the first command did not stop within 30 s of Ctrl-C"
wait "$RUN_PID" || true
RUN_PID=""
for port in 8080 8081 9090; do
  port_free "$port" || fail "127.0.0.1:$port still in use after Ctrl-C"
done
log "stopped cleanly"

# --- command 2: the whole suite
log "running the test suite"
if ! bash -c "${COMMANDS[1]}" >"$WORK/test.log" 2>&1; then
  tail -n 60 "$WORK/test.log" >&2
  fail "the second command failed"
fi
tail -n 5 "$WORK/test.log" >&2
log "both README commands work in a clean clone"

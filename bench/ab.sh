#!/usr/bin/env bash
# A/B of one benchmark command in one quiet window: side A (the reference) and side B run
# alternately, the order switching each pair (A B, B A, A B, ...), so a drift of the machine
# during the window falls on both sides alike. docs/bench.md "How to reproduce" describes the
# method; compare the sides pair by pair and by their medians, never across windows.
#
#   bench/ab.sh [--reps N] [--out DIR] NAME -- COMMAND [ARGS...]
#
#   --reps N    pairs to run (default 3)
#   --out DIR   where the reports go (default bench/out/ab-<UTC date>)
#   NAME        the scenario's name in the file names: DIR/NAME-<side>-<pair>.json
#   COMMAND     a bench script printing one JSON report, e.g. bench/run.sh 15 32 --no-cold-start
#
# A side is what differs; for each of A and B (the names default to "ref" and "new"):
#   A_NAME / B_NAME       the side's name in the file names
#   A_BUILD / B_BUILD     the build directory given as BUILD= (default $BUILD, else build/). To compare two
#                         commits, build the reference in a worktree and copy this build's
#                         weir-sink, weir-loadgen and weir-jsbench beside its weir, so only
#                         weir differs.
#   A_ENV / B_ENV         VAR=value words set in weir's environment (no spaces inside a value),
#                         e.g. A_ENV=WEIR_HTTP_SINK_CLIENT=curl
#   A_CONFIG / B_CONFIG   weir.yaml text passed as --weir-config (bench/run.sh, bench/paced.sh
#                         and bench/syscalls.sh take it; the last --weir-config wins, so a
#                         scenario's own config goes into both sides' text)
#
# Examples (the commands of docs/bench.md):
#   A_NAME=curl A_ENV=WEIR_HTTP_SINK_CLIENT=curl B_NAME=weir \
#     bench/ab.sh closed -- bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3
#   A_NAME=two A_CONFIG='delivery_loops: 2' B_NAME=one \
#     bench/ab.sh paced1k -- bench/paced.sh 1000 10 --no-cold-start
#   A_BUILD=/tmp/refbuild bench/ab.sh --reps 4 closed -- bench/run.sh 15 32 --no-cold-start --ceiling-seconds 3
#
# Progress goes to DIR/bench.err; DIR/window.txt gets the start (time, load average), each
# run's end time and exit code, and the end. Start it only when nothing else runs on the
# machine. Each run is bounded by the command's own count and duration; the bench scripts
# keep every process on loopback. Exit 1 when any run exited non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2; }

reps=3
out=bench/out/ab-$(date -u +%Y-%m-%d)
while [ $# -gt 0 ]; do
  case $1 in
    --reps) reps=${2:?--reps N}; shift 2 ;;
    --out) out=${2:?--out DIR}; shift 2 ;;
    -h|--help) usage ;;
    --) usage ;;
    -*) echo "bench/ab.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ $# -lt 3 ] || [ "$2" != "--" ]; then usage; fi
name=$1
shift 2
case $reps in ''|*[!0-9]*) echo "bench/ab.sh: --reps takes a number" >&2; exit 2 ;; esac

a_name=${A_NAME:-ref}
b_name=${B_NAME:-new}
[ "$a_name" != "$b_name" ] || { echo "bench/ab.sh: A_NAME and B_NAME must differ" >&2; exit 2; }
mkdir -p "$out"
failed=0

note() { echo "$*" >> "$out/window.txt"; }
side() {  # side A|B PAIR: one run of the command as that side
  local s=$1 i=$2 label build config rc=0
  local -a envs cmd
  shift 2
  cmd=("$@")
  if [ "$s" = A ]; then
    label=$a_name build=${A_BUILD:-${BUILD:-build}} config=${A_CONFIG:-}
    read -r -a envs <<< "${A_ENV:-}"
  else
    label=$b_name build=${B_BUILD:-${BUILD:-build}} config=${B_CONFIG:-}
    read -r -a envs <<< "${B_ENV:-}"
  fi
  if [ -n "$config" ]; then cmd+=(--weir-config "$config"); fi
  env BUILD="$build" ${envs[@]+"${envs[@]}"} "${cmd[@]}" \
    > "$out/$name-$label-$i.json" 2>> "$out/bench.err" || rc=$?
  note "$(date -u +%H:%M:%S) $name-$label-$i rc=$rc"
  if [ "$rc" != 0 ]; then failed=1; fi
}

note "start $(date -u +%Y-%m-%dT%H:%M:%SZ) load $(cut -d' ' -f1-3 /proc/loadavg) $name: A=$a_name B=$b_name"
for i in $(seq 1 "$reps"); do
  if [ $((i % 2)) = 1 ]; then first=A second=B; else first=B second=A; fi
  side "$first" "$i" "$@"
  side "$second" "$i" "$@"
done
note "end $(date -u +%Y-%m-%dT%H:%M:%SZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$failed"

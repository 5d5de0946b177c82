#!/usr/bin/env bash
# Open-loop end-to-end benchmark at a fixed rate: bench/paced.sh RATE SECONDS.
# Latency counts from each event's intended send time (coordinated omission corrected).
# Same report as bench/run.sh. Exit 1 when lost > 0.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then echo "usage: bench/paced.sh RATE SECONDS" >&2; exit 2; fi
rate=$1
seconds=$2
shift 2
exec python3 bench/harness.py --rate "$rate" --seconds "$seconds" "$@"

#!/usr/bin/env bash
# The receiver-outage drill as a benchmark (bench/README.md; ADR 0294, 0295):
#   bench/outage.sh [--outage SECONDS 600] [--rate EVENTS_PER_S 20] [--before S 10] [--after S 10]
#                   [--after-timeout S 180] [--out DIR] [--keep]
# A throwaway nats-server, weir with one pass-through flow into one http sink (default
# settings), weir-sink as the receiver, weir-loadgen at the rate. The receiver is killed
# after --before seconds and started again on the same port --outage seconds later. One
# JSON object on stdout (also written into --out), progress on stderr. Exit 0 when lost = 0
# and dead letters = 0, 1 otherwise. BUILD=dir selects the build (default build/).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/outage.py "$@"

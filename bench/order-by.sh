#!/usr/bin/env bash
# Per-key order's cost (bench/order_by.py, ADR 0310): the delivered rate of one http sink
# with max_connections 8 without order_by, with 1,000 keys and with 4 keys, on a receiver
# that answers in --delay-ms.
#   bench/order-by.sh [--events 10000] [--delay-ms 2] [--repeats 3]
# One JSON object on stdout, progress on stderr. Exit 1 when an event was not delivered or
# arrived out of its key's order. BUILD=dir selects the build (default build/).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/order_by.py "$@"

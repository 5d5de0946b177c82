#!/usr/bin/env bash
# Closed-loop end-to-end benchmark (the report: bench/README.md): bench/run.sh [seconds] [concurrency]
# (defaults 30 and 32). A throwaway nats-server, weir on bench/flows/bench_orders.yaml,
# weir-sink and weir-loadgen; the ceilings in the same run. One JSON object on stdout,
# progress on stderr, an SVG in bench/out/. Exit 1 when lost > 0.
# BUILD=dir selects the build (default build/); extra flags go to bench/harness.py.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
concurrency=${2:-32}
shift $(( $# > 2 ? 2 : $# ))
exec python3 bench/harness.py --seconds "$seconds" --concurrency "$concurrency" "$@"

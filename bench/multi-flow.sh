#!/usr/bin/env bash
# 1, 10 and 50 copies of bench_orders in one weir at once (bench/multi_flow.py): aggregate
# ingest and delivered rate, exact loss, RSS idle/peak in total and per flow.
#   bench/multi-flow.sh [--counts 1,10,50] [--seconds 20] [--concurrency 32] [--connections spread|constant]
#                        [--loadgens one|per-flow]
# One JSON object on stdout, progress on stderr, an SVG per count in bench/out/. Exit 1 when
# an acked event was lost. BUILD=dir selects the build (default build/).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/multi_flow.py "$@"

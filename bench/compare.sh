#!/usr/bin/env bash
# weir beside Node-RED on the bench_orders scenario (bench/compare.py): same loadgen, same sink,
# same machine, same session. Installs the pinned Node-RED into bench/.node-red/ (git-ignored)
# on first use (needs npm and network once).
#   bench/compare.sh [--seconds 20] [--concurrency 32] [--rate 1000] [--paced-seconds 20]
# One JSON object on stdout (side-by-side table, ratios), the table on stderr, SVGs in
# bench/out/. Exit 1 when the two systems' outputs differ or weir lost an acked event.
# BUILD=dir selects the build (default build/).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/compare.py "$@"

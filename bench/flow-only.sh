#!/usr/bin/env bash
# The flow hop alone, against the raw JetStream hop on the same nats-server (bench/flow_only.py):
#   bench/flow-only.sh [--count 100000]                 pre-filled input stream, worked off
#   bench/flow-only.sh --publishers 4 --seconds 10      4 live NATS publishers feeding it
# One JSON object on stdout, progress on stderr, an SVG in bench/out/. Exit 1 when the counts
# do not add up. BUILD=dir selects the build (default build/).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/flow_only.py "$@"

#!/usr/bin/env bash
# nats-server's CPU per event for N flows in three bus layouts (bench/layouts.py):
# a stream per flow (weir's), one shared stream, one stream with two consumers in all.
#   bench/layouts.sh [--counts 1,10,50] [--rate 5000] [--seconds 5] [--repeats 3]
# One JSON object on stdout, progress on stderr. BUILD=dir selects the build (default build/).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/layouts.py "$@"

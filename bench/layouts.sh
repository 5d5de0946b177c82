#!/usr/bin/env bash
# nats-server's CPU per event for N flows in five bus layouts (bench/layouts.py):
# a stream per flow (weir's) down to one stream with one consumer of all inputs and one of
# all outputs; push consumers or pull requests as weir sends them.
#   bench/layouts.sh [--counts 1,10,50] [--rate 5000] [--seconds 5] [--repeats 3]
#                    [--consumers push|pull] [--batch 64] [--burst 1] [--sinks 1]
# One JSON object on stdout, progress on stderr. BUILD=dir selects the build (default build/).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/layouts.py "$@"

#!/usr/bin/env bash
# Time from a KV table change to the running flow seeing it: bench/table_latency.py.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/table_latency.py "$@"

#!/usr/bin/env bash
# Singleton failover: bench/cluster-gaps.sh [kills] [terms] [instances]
# (defaults 5, 5, 2). A 200 ms timer flow on that many `weir run --cluster gaps` with the
# default lease (1 s); kill -9 the lease holder `kills` times and SIGTERM it `terms` times,
# alternating, restarting it as the standby after each. At the sink: event -> first tick of
# the new holder (crash failover, graceful handoff), the gap between ticks, duplicate ticks.
# One JSON object on stdout (medians and max); progress on stderr. Exit 1 when a tick fired
# twice or ticks never resumed. BUILD=dir selects the build (default build/).
set -euo pipefail
cd "$(dirname "$0")/.."
kills=${1:-5}
terms=${2:-5}
instances=${3:-2}
exec python3 bench/cluster_bench.py gaps --kills "$kills" --terms "$terms" --instances "$instances"

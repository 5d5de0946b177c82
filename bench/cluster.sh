#!/usr/bin/env bash
# Cluster scaling: bench/cluster.sh [seconds] [concurrency] [instances]
# (defaults 20, 32, "1,2,3"). For each instance count, a throwaway nats-server, that many
# `weir run --cluster bench` on bench/flows/bench_orders.yaml, weir-sink, and one weir-loadgen
# per instance (the connections split between them). One JSON object on stdout with
# delivered/s per instance count; progress on stderr. Exit 1 when lost > 0.
# All instances share this machine's cores: the figures report scaling, they do not promise it.
# BUILD=dir selects the build (default build/).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
concurrency=${2:-32}
instances=${3:-1,2,3}
exec python3 bench/cluster_bench.py scale --seconds "$seconds" --concurrency "$concurrency" --instances "$instances"

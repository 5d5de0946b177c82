#!/usr/bin/env bash
# Per-event system calls (strace -c -f) and context switches (/proc/PID/task/*/status) of weir
# and nats-server at a paced rate, and CPU and context switches per weir thread:
# bench/syscalls.sh [--rate 1000] [--seconds 10] [--no-strace] [--per-thread] [--perf].
# One JSON object on stdout. BUILD=dir selects the build (default build/).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/syscalls.py "$@"

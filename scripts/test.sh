#!/usr/bin/env bash
# Installs what is missing, builds (warnings are errors), and runs the whole suite with
# CTest: unit tests, the integration suite (it starts its own nats-server, mosquitto and
# HTTP sinks on free loopback ports), a short fuzz run and a short bench/run.sh smoke
# run. Integration tests are RUN_SERIAL (they time failovers); unit tests run two at a
# time. The last lines are CTest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd "${BUILD_DIR:-build}"
exec ctest --output-on-failure --timeout 900 -j2 "$@"

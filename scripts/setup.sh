#!/usr/bin/env bash
# Installs what weir needs to build, test and benchmark (Debian 12 packages only),
# then configures and builds into build/. Safe to run again: installs only what is
# missing and rebuilds incrementally.
#   scripts/setup.sh            # Release-ish build (RelWithDebInfo) of everything into build/
#   scripts/setup.sh weir ...   # only these targets (run-example.sh: weir and the demo sink)
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache clang libclang-rt-14-dev clang-tidy clang-format
  libnats-dev nats-server libcurl4-openssl-dev libssl-dev
  libpaho-mqttpp-dev libpaho-mqtt-dev mosquitto mosquitto-clients
  libboost-dev nlohmann-json3-dev libyaml-cpp-dev libcli11-dev catch2 libbenchmark-dev
  libmimalloc-dev   # the allocator weir is linked with (docs/adr/0263-mimalloc.md)
  wrk curl jq python3 binutils
  nginx openssl   # the reverse-proxy example's test (tests/integration/nginx_proxy_test.sh)
  chromium chromium-driver python3-selenium   # the dashboard's browser test (tests/dashboard/)
  lintian systemd file dpkg-dev   # the package test: lintian, systemd-analyze, dpkg-shlibdeps (tests/package/)
  prometheus                      # promtool for the alert rules (tests/monitoring/); its server: below
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
  # The prometheus package is here for its promtool: where its postinst started the
  # server (a booted systemd), stop and disable it, or it holds port 9090 (the demo sink's).
  if [[ " ${missing[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now prometheus.service >&2 || true
  fi
fi

# The reference webhook verifiers signing_test.cc checks weir's signatures with, as the lock
# file pins them (the test runs the same `npm ci` when they are missing). Node and npm are
# on the machine (/usr/bin/node), not Debian packages here.
if command -v npm >/dev/null && [ ! -d tests/integration/npm/node_modules ]; then
  npm ci --no-audit --no-fund --prefix tests/integration/npm >&2
fi

BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} ${CMAKE_ARGS:-} >&2
targets=()
(($#)) && targets=(--target "$@")
cmake --build "$BUILD_DIR" -j"$(nproc)" "${targets[@]}" >&2

#!/usr/bin/env bash
# Installs weir's .deb into a fresh Debian 12 root and runs it there as a user would after
# `apt install ./weir_*.deb`: the package's dependencies from a Debian mirror, the `weir`
# user and /etc/weir/env made by postinst; then weir started as the `weir` user with the
# sample config (/etc/weir/weir.yaml) and the example flow, one event posted to
# /in/hook and seen at the flow's receiver, SIGTERM (exit 0), and `apt purge`.
# The run is in a network namespace of its own (loopback only), so the sample's ports
# (8080, 8081, the receiver's 9090) are free whatever this machine runs.
#
#   sudo packaging/try-in-debian-root.sh [weir_VERSION_amd64.deb]
#     no argument: `cpack -G DEB` in build/ first
#   DEBIAN_MIRROR=http://…/debian          the mirror debootstrap and apt use
#   WEIR_DEB12_TARBALL=/var/tmp/deb12.tgz  debootstrap's packages kept there between runs
#   KEEP_ROOT=1                            leave the root in place (its path is printed)
#
# Needs root, debootstrap, unshare, ip and python3 on this machine, and the network
# (not run by CI; its output is in docs/operations.md, "Installing the package").
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in debootstrap unshare ip python3 curl; do
  command -v "$tool" >/dev/null || { echo "try-in-debian-root: $tool not found" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "try-in-debian-root: run as root (debootstrap, chroot)" >&2; exit 1; }

deb=${1:-}
if [ -z "$deb" ]; then
  (cd build && cpack -G DEB >/dev/null)
  deb=$(ls -t build/weir_*_amd64.deb | head -1)
fi
deb=$(realpath "$deb")
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

root=$(mktemp -d /var/tmp/weir-debian12.XXXXXX)
chmod 0755 "$root"   # it becomes /, which the weir user must traverse
mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
  if [ "${KEEP_ROOT:-0}" = 1 ]; then echo "root kept: $root"; else rm -rf "$root"; fi
}
trap cleanup EXIT
step() { printf '\n== %s\n' "$*"; }

step "debootstrap bookworm (minbase) into $root"
start=$(date +%s)
if [ -n "${WEIR_DEB12_TARBALL:-}" ]; then
  [ -f "$WEIR_DEB12_TARBALL" ] ||
    debootstrap --variant=minbase --make-tarball="$WEIR_DEB12_TARBALL" bookworm "$root.tarball" "$mirror" >/dev/null
  rm -rf "$root.tarball"
  debootstrap --variant=minbase --unpack-tarball="$WEIR_DEB12_TARBALL" bookworm "$root" "$mirror" >/dev/null
else
  debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null
fi
echo "done in $(($(date +%s) - start)) s: $(. "$root/etc/os-release" && echo "$PRETTY_NAME")"

for fs in proc sys dev; do
  mount --bind "/$fs" "$root/$fs"
  mounted+=("$root/$fs")
done
cp /etc/resolv.conf "$root/etc/resolv.conf"
# As in a container image: no init system, so maintainer scripts start no service.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
cp "$deb" "$root/tmp/"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }

step "apt install ./$(basename "$deb")"
in_root apt-get update -q >/dev/null
in_root apt-get install -y -q --no-install-recommends "/tmp/$(basename "$deb")" >"$root/tmp/apt.log" 2>&1 ||
  { cat "$root/tmp/apt.log"; exit 1; }
sed -n '/^The following NEW packages/,/^[0-9]* upgraded/p' "$root/tmp/apt.log"
grep '^Setting up weir' "$root/tmp/apt.log"
in_root dpkg -s weir | grep -E '^(Package|Status|Version|Depends):'

step "what postinst made"
in_root getent passwd weir
in_root stat -c '%A %U:%G %n' /etc/weir/env /etc/weir/weir.yaml /etc/weir/flows/webhook.yaml /var/lib/weir /usr/bin/weir
in_root sh -c 'grep -c "^WEIR_ADMIN_TOKEN=[0-9a-f]\{64\}$" /etc/weir/env | sed "s/^/WEIR_ADMIN_TOKEN lines of 64 hex digits: /"'

step "weir run as the weir user with the sample config, in a network namespace of its own"
export root
unshare --net --fork bash -euo pipefail -c '
  ip link set lo up
  log=$(mktemp); received=$(mktemp)
  # The example flow delivers to ${SINK_URL:-http://127.0.0.1:9090}/hook: a receiver there.
  python3 - "$received" <<"PY" &
import http.server, sys
out = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with open(out, "a") as f:
            key = self.headers.get("Idempotency-Key")
            f.write(f"{self.path} Idempotency-Key={key} {body.decode()}\n")
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", 9090), H).serve_forever()
PY
  receiver=$!
  # As weir.service runs it: secrets from /etc/weir/env, the weir user, /var/lib/weir, and
  # the PATH of systemd, which has /usr/sbin (nats-server) where a user PATH on Debian does not.
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin /bin/sh -c \
    "set -a; . /etc/weir/env; set +a; cd /var/lib/weir && exec setpriv --reuid=weir --regid=weir --init-groups --reset-env \
     env PATH=/usr/sbin:/usr/bin:/sbin:/bin WEIR_ADMIN_TOKEN=\$WEIR_ADMIN_TOKEN /usr/bin/weir run --config /etc/weir/weir.yaml" >"$log" 2>&1 &
  weir=$!
  token=$(sed -n "s/^WEIR_ADMIN_TOKEN=//p" "$root/etc/weir/env")
  for _ in $(seq 600); do
    curl -fs -o /dev/null http://127.0.0.1:8081/readyz && break
    kill -0 $weir 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.1
  done
  echo "readyz: $(curl -s http://127.0.0.1:8081/readyz)"
  # Numeric: ps runs outside the root, where the uid of weir may belong to another name.
  ps -o uid=,pid=,args= -p "$weir,$(pgrep -d, -P $weir)" | sed "s/^ */process: uid /"
  echo "POST /in/hook:"
  curl -s -i -X POST http://127.0.0.1:8080/in/hook -H "Content-Type: application/json" \
    -d "{\"id\":\"try-1\",\"hello\":\"debian\"}" | tr -d "\r" | sed "s/^/  /"
  echo
  for _ in $(seq 200); do [ -s "$received" ] && break; sleep 0.05; done
  echo "the receiver got: $(cat "$received")"
  echo "metrics without the token: HTTP $(curl -s -o /dev/null -w "%{http_code}" http://127.0.0.1:8081/metrics)"
  curl -s -H "Authorization: Bearer $token" http://127.0.0.1:8081/metrics |
    grep -E "^weir_(events_acked_total\{flow=\"webhook\",stage=\"sink:out\"\}|nats_connected) " | sed "s/^/metrics: /"
  kill -TERM $weir
  rc=0; wait $weir || rc=$?
  echo "weir exit code after SIGTERM: $rc"
  echo "--- weir log"; cat "$log"
  kill $receiver
  [ -s "$received" ] && [ "$rc" = 0 ]
'

step "apt purge weir"
in_root apt-get purge -y -q weir >"$root/tmp/purge.log" 2>&1 || { cat "$root/tmp/purge.log"; exit 1; }
for p in /etc/weir /var/lib/weir /usr/bin/weir; do
  if [ -e "$root$p" ]; then echo "still there: $p"; else echo "gone: $p"; fi
done
in_root getent passwd weir >/dev/null && echo "the weir user stays (as Debian leaves system users)"
step "ok"

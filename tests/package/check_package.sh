#!/usr/bin/env bash
# The Debian package as a user gets it (docs/adr/0303-debian-package.md): builds it with
# `cpack -G DEB` from this build tree, then checks its metadata (dpkg-deb --info), its
# files (dpkg-deb --contents), that its weir starts on its own sample config and example
# flow and sends READY=1 (packaging/weir.yaml, /etc/weir/flows/webhook.yaml), that
# lintian has nothing to say beyond packaging/debian/lintian-overrides, and that
# `systemd-analyze verify` takes its unit. One line per failed check; exit 1 on any.
#   tests/package/check_package.sh BUILD_DIR SOURCE_DIR     # CTest `package`
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)

for tool in cpack dpkg-deb lintian systemd-analyze python3; do
  command -v "$tool" >/dev/null || { echo "package: $tool not found (scripts/setup.sh installs it)"; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/weir-package.XXXXXX")
weir_pid=""
cleanup() {
  [ -n "$weir_pid" ] && kill -9 "$weir_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

version=$(sed -n 's/^project(weir VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
arch=$(dpkg --print-architecture)
deb="$work/out/weir_${version}_${arch}.deb"

# --- build
start=$(date +%s)
if ! (cd "$build" && cpack -G DEB -B "$work/out" >"$work/cpack.log" 2>&1); then
  cat "$work/cpack.log"
  echo "FAIL: cpack -G DEB"
  exit 1
fi
[ -f "$deb" ] || { ls "$work/out"; echo "FAIL: cpack wrote no $(basename "$deb")"; exit 1; }
echo "built $(basename "$deb") ($(stat -c %s "$deb") bytes) in $(($(date +%s) - start)) s"

# --- metadata
info=$(dpkg-deb --info "$deb")
field() { dpkg-deb --field "$deb" "$1"; }
[ "$(field Package)" = weir ] || fail "Package: $(field Package)"
[ "$(field Version)" = "$version" ] || fail "Version: $(field Version), not $version"
[ "$(field Architecture)" = "$arch" ] || fail "Architecture: $(field Architecture)"
depends=$(field Depends)
echo "Depends: $depends"
# Named by hand (the embedded default, the dlopen()ed libcurl, the postinst) and found by
# dpkg-shlibdeps (what weir links: cnats, OpenSSL, yaml-cpp, Paho, mimalloc, the C++ runtime).
for dep in nats-server libcurl4 adduser libc6 libstdc++6 libnats3.4 libssl3 libyaml-cpp0.7 libpaho-mqttpp3-1; do
  grep -Eq "(^|, )${dep//+/\\+}( |,|$)" <<<"$depends" || fail "Depends lacks $dep"
done
for script in postinst prerm postrm conffiles; do
  grep -Eq "^ +[0-9]+ bytes, +[0-9]+ lines +\*? *$script( |$)" <<<"$info" || fail "control archive lacks $script"
done
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles >"$work/conffiles"
diff -u "$src/packaging/debian/conffiles" "$work/conffiles" >/dev/null || fail "conffiles differ from packaging/debian/conffiles"
grep -qx /etc/weir/weir.yaml "$work/conffiles" || fail "/etc/weir/weir.yaml is no conffile"

# --- contents: path, mode, owner
contents=$(dpkg-deb --contents "$deb")
expect() {   # expect MODE PATH
  grep -Eq "^$1 root/root +[0-9]+ [0-9-]+ [0-9:]+ \.$2\$" <<<"$contents" || fail "no $1 root/root .$2 in the package"
}
expect -rwxr-xr-x /usr/bin/weir
expect -rw-r--r-- /etc/weir/weir.yaml
expect -rw-r--r-- /etc/weir/flows/webhook.yaml
expect -rw-r--r-- /lib/systemd/system/weir.service
expect -rw-r--r-- /usr/share/doc/weir/copyright
expect -rw-r--r-- /usr/share/doc/weir/changelog.gz
expect -rw-r--r-- /usr/share/man/man1/weir.1.gz
expect -rw-r--r-- /usr/share/lintian/overrides/weir
expect -rw-r--r-- /usr/share/doc/weir/monitoring/weir-dashboard.json
expect -rw-r--r-- /usr/share/doc/weir/monitoring/weir-alerts.yml
# /etc/weir/env holds secrets: postinst makes it (0600), the package never ships one.
grep -q '\./etc/weir/env$' <<<"$contents" && fail "the package ships /etc/weir/env"
grep -q '\./var/lib/weir' <<<"$contents" && fail "the package ships /var/lib/weir (postinst and StateDirectory= make it)"

# --- the packaged files do what they say
root="$work/root"
dpkg-deb -x "$deb" "$root"
weir="$root/usr/bin/weir"
"$weir" version >/dev/null || fail "usr/bin/weir version"
if file "$weir" | grep -q "not stripped"; then fail "usr/bin/weir is not stripped"; fi
"$weir" validate "$root/etc/weir/flows/webhook.yaml" >"$work/validate.log" 2>&1 ||
  fail "weir validate /etc/weir/flows/webhook.yaml: $(cat "$work/validate.log")"

# TimeoutStopSec must leave the drain its time (docs/adr/0303-debian-package.md).
unit="$root/lib/systemd/system/weir.service"
seconds() { python3 -c 'import re,sys; m=re.fullmatch(r"(\d+)(ms|s|m|min)?", sys.argv[1]); n=int(m[1]); print({"ms": n/1000, "s": n, None: n, "m": 60*n, "min": 60*n}[m[2]])' "$1"; }
stop=$(sed -n 's/^TimeoutStopSec=//p' "$unit")
drain=$(sed -n 's/^drain_timeout: *\([0-9a-z]*\).*/\1/p' "$root/etc/weir/weir.yaml")
[ -n "$stop" ] && [ -n "$drain" ] || fail "TimeoutStopSec ($stop) or drain_timeout ($drain) not found"
if [ -n "$stop" ] && [ -n "$drain" ] && ! python3 -c "import sys; sys.exit(0 if $(seconds "$stop") > $(seconds "$drain") + 5 else 1)"; then
  fail "TimeoutStopSec=$stop leaves drain_timeout $drain no room"
fi

# The sample config and the example flow start (ports and the store moved into $work;
# nats-server from PATH as under the unit) and weir says READY=1 to a socket we hold.
python3 - "$weir" "$root" "$work" <<'PY' || fail "weir did not start on the packaged weir.yaml and flow"
import os, socket, subprocess, sys, urllib.request
weir, root, work = sys.argv[1:]
sock_path = os.path.join(work, "notify.sock")
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sock_path)
s.settimeout(60)
env = dict(os.environ, NOTIFY_SOCKET=sock_path, WEIR_ADMIN_TOKEN="package-test-token")
log = open(os.path.join(work, "weir.log"), "w")
p = subprocess.Popen([weir, "run", "--config", root + "/etc/weir/weir.yaml", "--flows", root + "/etc/weir/flows",
                      "--data-dir", work + "/data", "--http", "127.0.0.1:0", "--admin", "127.0.0.1:0"],
                     env=env, stdout=log, stderr=subprocess.STDOUT)
try:
    msg = s.recv(4096).decode()
    assert "READY=1" in msg.split("\n"), msg
    p.terminate()
    assert p.wait(30) == 0, "exit code"
    print("sample config: READY=1, then SIGTERM, exit 0")
except Exception as e:
    print("error:", repr(e))
    print(open(os.path.join(work, "weir.log")).read()[-3000:])
    p.kill()
    sys.exit(1)
PY

# --- lintian: every tag it still prints is a failure (kept ones are overridden, with the
# reason, in packaging/debian/lintian-overrides).
# (Its one remark that is no tag, on running as root, is left out.)
lintian_rc=0
lintian --fail-on error,warning,info --tag-display-limit 0 "$deb" >"$work/lintian.out" 2>&1 || lintian_rc=$?
grep -v '^running with root privileges is not recommended!$' "$work/lintian.out" >"$work/lintian.log" || true
if ((lintian_rc)) || [ -s "$work/lintian.log" ]; then
  cat "$work/lintian.log"
  fail "lintian"
else
  echo "lintian: clean ($(grep -c '^[a-z]' "$src/packaging/debian/lintian-overrides" || true) override(s))"
fi

# --- systemd-analyze verify on the unit as packaged, against this machine's systemd: only
# ExecStart's /usr/bin/weir is pointed at the extracted binary (verify checks that it is
# executable), and MANPATH at the extracted manual (verify runs `man weir(1)`).
mkdir "$work/unit"
sed "s#^ExecStart=/usr/bin/weir #ExecStart=$root/usr/bin/weir #" "$unit" >"$work/unit/weir.service"
grep -q "^ExecStart=$root/usr/bin/weir run " "$work/unit/weir.service" || fail "ExecStart is not /usr/bin/weir run …"
if ! MANPATH="$root/usr/share/man" systemd-analyze verify "$work/unit/weir.service" >"$work/verify.log" 2>&1 ||
  [ -s "$work/verify.log" ]; then
  cat "$work/verify.log"
  fail "systemd-analyze verify weir.service"
else
  echo "systemd-analyze verify: clean"
fi

if ((failures)); then
  echo "package: $failures check(s) failed"
  exit 1
fi
echo "package: every check passed"

#!/usr/bin/env bash
# The reverse-proxy example of docs/operations.md ("Behind a reverse proxy"), run as
# written: Debian's nginx with that section's ```nginx block (TLS with a certificate made
# here, the upstream pointed at this weir) in front of a weir with its ```yaml
# block, all on free loopback ports. An event posted through nginx over HTTPS is answered
# 202 with its Idempotency-Key as id and reaches the receiver; a second post with the same
# key is stored once; the admin API is not reachable through the proxy.
#   tests/integration/nginx_proxy_test.sh WEIR WEIR_SINK    # CTest `nginx_proxy` (label integration)
# Why the page's own block and not a copy: docs/adr/0307-front-door-and-reference-pages.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
weir=${1:?usage: nginx_proxy_test.sh WEIR WEIR_SINK}
sink=${2:?usage: nginx_proxy_test.sh WEIR WEIR_SINK}
doc=$root/docs/operations.md

fail() { echo "nginx_proxy: FAIL: $*" >&2; exit 1; }
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$nginx_bin" ] || fail "nginx not found (scripts/setup.sh installs Debian's nginx)"
command -v openssl > /dev/null || fail "openssl not found"

dir=$(mktemp -d /tmp/weir-nginx.XXXXXX)
chmod 755 "$dir"   # nginx's workers (user nobody when run as root) read under it
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

# A port free now on 127.0.0.1 (nginx needs a number; weir and the sink bind port 0).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Waits up to $1 seconds for the command after it to succeed.
await() {
  local secs=$1; shift
  local end=$((SECONDS + secs))
  until "$@"; do
    ((SECONDS < end)) || return 1
    sleep 0.1
  done
}

# The first ```$1 block under the page's "## Behind a reverse proxy".
section_block() {
  awk -v fence="\`\`\`$1" '/^## / {sec = ($0 ~ /^## Behind a reverse proxy/)}
    sec && $0 == fence && !done {on = 1; next} on && /^```$/ {on = 0; done = 1} on' "$doc"
}

# The receiver.
"$sink" --listen 127.0.0.1:0 > "$dir/sink.out" 2> "$dir/sink.err" &
pids+=($!)
await 10 grep -q listen "$dir/sink.out" || fail "weir-sink did not start: $(cat "$dir/sink.err")"
sink_addr=$(sed -n 's/.*"listen":"\([^"]*\)".*/\1/p' "$dir/sink.out")

# weir, with the page's weir.yaml lines for running behind a proxy.
mkdir -p "$dir/flows"
cat > "$dir/flows/hook.yaml" << YAML
flow: hook
from: { http: { path: /in/hook } }
to:
  out: { http: { url: "http://$sink_addr/hook", max_connections: 1 } }   # stream order (below)
YAML
section_block yaml > "$dir/proxy.yaml"
grep -q 'max_connections_per_client' "$dir/proxy.yaml" || fail "no weir.yaml block under 'Behind a reverse proxy' in $doc"
{
  cat "$dir/proxy.yaml"
  echo "data_dir: $dir/data"
  echo "flows: $dir/flows"
} | sed -e 's/listen: 127\.0\.0\.1:8080/listen: 127.0.0.1:0/' \
        -e 's/listen: 127\.0\.0\.1:8081/listen: 127.0.0.1:0/' > "$dir/weir.yaml"
"$weir" run --config "$dir/weir.yaml" > "$dir/weir.log" 2>&1 &
weir_pid=$!
pids+=("$weir_pid")
await 30 grep -q 'listening http=' "$dir/weir.log" || fail "weir did not listen: $(tail -5 "$dir/weir.log")"
http_addr=$(grep -o 'listening http=[^ ]*' "$dir/weir.log" | head -1 | cut -d= -f2)
admin_addr=$(grep -o 'admin=[^ ]*' "$dir/weir.log" | head -1 | cut -d= -f2)
await 30 curl -sf -o /dev/null "http://$admin_addr/readyz" || fail "weir not ready: $(tail -5 "$dir/weir.log")"

# nginx with the page's example: its own certificate, its listen port and upstream here.
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=hooks.example.com \
  -addext "subjectAltName=DNS:hooks.example.com" \
  -keyout "$dir/hooks.key" -out "$dir/hooks.pem" 2> /dev/null
port=$(free_port)
section_block nginx \
  | sed -e "s|listen 443 ssl;|listen 127.0.0.1:$port ssl;|" \
        -e "s|server 127\.0\.0\.1:8080;|server $http_addr;|" \
        -e "s|/etc/ssl/certs/hooks.example.com.pem|$dir/hooks.pem|" \
        -e "s|/etc/ssl/private/hooks.example.com.key|$dir/hooks.key|" > "$dir/weir-site.conf"
grep -q "listen 127.0.0.1:$port ssl;" "$dir/weir-site.conf" || fail "the nginx block of $doc has no 'listen 443 ssl;'"
grep -q "server $http_addr;" "$dir/weir-site.conf" || fail "the nginx block of $doc has no 'server 127.0.0.1:8080;'"
# What /etc/nginx/nginx.conf gives a site in conf.d on Debian, in this folder.
cat > "$dir/nginx.conf" << CONF
pid $dir/nginx.pid;
error_log $dir/error.log;
events {}
http {
  access_log $dir/access.log;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fastcgi;
  uwsgi_temp_path $dir/uwsgi;
  scgi_temp_path $dir/scgi;
  include $dir/weir-site.conf;
}
CONF
"$nginx_bin" -t -q -e "$dir/error.log" -p "$dir" -c "$dir/nginx.conf" 2> "$dir/nginx-t.err" \
  || fail "nginx -t: $(cat "$dir/nginx-t.err" "$dir/error.log" 2> /dev/null)"
"$nginx_bin" -e "$dir/error.log" -p "$dir" -c "$dir/nginx.conf" -g 'daemon off;' &
pids+=($!)
url="https://hooks.example.com:$port"
curl_tls=(--cacert "$dir/hooks.pem" --resolve "hooks.example.com:$port:127.0.0.1")
await 10 curl -s -o /dev/null "${curl_tls[@]}" "$url/" || fail "nginx did not start: $(cat "$dir/error.log")"

post() {
  curl -s "${curl_tls[@]}" -o "$dir/answer" -w '%{http_code}' -X POST "$url/in/hook" \
    -H 'Content-Type: application/json' -H 'Idempotency-Key: through-nginx-1' -d '{"id":"through-nginx-1","hello":"proxy"}'
}
code=$(post)
[ "$code" = 202 ] || fail "POST through nginx answered $code: $(cat "$dir/answer")"
grep -q '"through-nginx-1"' "$dir/answer" || fail "the Idempotency-Key did not reach weir: $(cat "$dir/answer")"
delivered() { curl -s "http://$sink_addr/ids" | grep -q '"through-nginx-1"'; }
await 10 delivered || fail "the event posted through nginx was not delivered: $(curl -s "http://$sink_addr/stats")"

code=$(post)
[ "$code" = 202 ] || fail "the repeated POST answered $code"
# The repeat is stored once: the sink has exactly one delivery of that id once a second
# event, posted after it, has arrived (one connection to the sink delivers in stream order).
curl -s "${curl_tls[@]}" -o /dev/null -X POST "$url/in/hook" -H 'Content-Type: application/json' \
  -H 'Idempotency-Key: through-nginx-2' -d '{"id":"through-nginx-2","hello":"again"}'
await 10 eval 'curl -s "http://$sink_addr/ids" | grep -q "\"through-nginx-2\""' || fail "second event not delivered"
n=$(curl -s "http://$sink_addr/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["received"])')
[ "$n" = 2 ] || fail "the receiver got $n requests for 2 distinct events: $(curl -s "http://$sink_addr/stats")"

# Only /in/ is proxied: the admin API and anything else answer 404 from nginx.
code=$(curl -s "${curl_tls[@]}" -o /dev/null -w '%{http_code}' "$url/metrics")
[ "$code" = 404 ] || fail "GET /metrics through nginx answered $code, expected 404"

kill -TERM "$weir_pid"
wait "$weir_pid" || fail "weir exited $? on SIGTERM"
echo "nginx_proxy: 202 through nginx (TLS), delivered once, repeat stored once, admin not exposed"

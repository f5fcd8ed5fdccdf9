#!/usr/bin/env bash
# bench/proxy: requests/s and added latency of vramd's proxy against direct, nginx and Go's
# httputil.ReverseProxy, on loopback, against a fast upstream (nginx `return 200`), at 1, 16
# and 64 connections; then SSE: 10,000 events through each, per-event latency.
# Usage: bench/proxy/run.sh [BUILD_DIR] [SECONDS] [ROUNDS]   (needs wrk, nginx, golang-go)
# Prints a Markdown table; runs are short: on a shared machine compare the ratios. ROUNDS > 1
# measures every connection count that many times, the setups interleaved, so that a burst of
# load from elsewhere hits them alike. VRAMD_BASELINE_HARNESS=PATH adds a row for another build
# of vramd_proxy_harness (e.g. the commit before a change), measured in the same run;
# VRAMD_BASELINE_SERVE=PATH does the same for another build's `vramd serve` (its binary).
# BUSY=N runs the measurements beside N busy loops (`sha256sum /dev/zero`, at the same priority):
# a homelab's CPUs are seldom idle (tokenizers, image decoding, a build), and a proxy that needs
# more CPU a request, or more threads, loses more there than on a quiet machine.
set -euo pipefail
BUILD=${1:-build}
SECS=${2:-3}
ROUNDS=${3:-1}
BASE=${VRAMD_BASELINE_HARNESS:-}
BASE_SERVE=${VRAMD_BASELINE_SERVE:-}
HERE=$(cd "$(dirname "$0")" && pwd)
for tool in wrk nginx go; do
  command -v $tool >/dev/null || { echo "bench/proxy: needs $tool (apt-get install wrk nginx-light golang-go)"; exit 77; }
done
[ -x "$BUILD/vramd_proxy_harness" ] || { echo "bench/proxy: build $BUILD/vramd_proxy_harness first"; exit 1; }
WORK=$(mktemp -d /tmp/vramd-bench-proxy.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; sleep 0.2; rm -rf "$WORK"; }
trap cleanup EXIT

UP=18100 NGX=18101 GO=18102 VR=18103 VS=18104 VS_API=18105 VB=18106 VSB=18107 VSB_API=18108 SSE=18110 NGX_SSE=18111 GO_SSE=18112 VR_SSE=18113
export GOCACHE=$WORK/gocache GOFLAGS=-mod=mod GO111MODULE=off
go build -o "$WORK/goproxy" "$HERE/goproxy.go"
go build -o "$WORK/ssebench" "$HERE/ssebench.go"

nginx_conf() {  # name listen body
  mkdir -p "$WORK/$1/logs"
  cat > "$WORK/$1/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $WORK/$1/nginx.pid;
error_log $WORK/$1/logs/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $WORK/$1; proxy_temp_path $WORK/$1; fastcgi_temp_path $WORK/$1;
  uwsgi_temp_path $WORK/$1; scgi_temp_path $WORK/$1;
  $3
}
CONF
  nginx -p "$WORK/$1" -c "$WORK/$1/nginx.conf" & PIDS+=($!)
  eval "NGINX_$1=$!"
}
nginx_conf upstream "$UP" "server { listen 127.0.0.1:$UP; location / { return 200 'hello'; } }"
nginx_conf proxy "$NGX" "upstream u { server 127.0.0.1:$UP; keepalive 256; }
  upstream s { server 127.0.0.1:$SSE; keepalive 16; }
  server { listen 127.0.0.1:$NGX; location / { proxy_pass http://u; proxy_http_version 1.1; proxy_set_header Connection \"\"; } }
  server { listen 127.0.0.1:$NGX_SSE; location / { proxy_pass http://s; proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_buffering off; } }"
"$WORK/goproxy" 127.0.0.1:$GO http://127.0.0.1:$UP 2>/dev/null & PIDS+=($!); GO_PID=$!
"$WORK/goproxy" 127.0.0.1:$GO_SSE http://127.0.0.1:$SSE 2>/dev/null & PIDS+=($!)
"$BUILD/vramd_proxy_harness" --service up http://127.0.0.1:$UP 127.0.0.1:$VR >/dev/null & PIDS+=($!); VR_PID=$!
B_PID=0
if [ -n "$BASE" ]; then "$BASE" --service up http://127.0.0.1:$UP 127.0.0.1:$VB >/dev/null & PIDS+=($!); B_PID=$!; fi
"$BUILD/vramd_proxy_harness" --service sse http://127.0.0.1:$SSE 127.0.0.1:$VR_SSE >/dev/null & PIDS+=($!)
"$WORK/ssebench" serve 127.0.0.1:$SSE 10000 200 & PIDS+=($!)
# The real daemon: `vramd serve` on the test GPU, the upstream as a generic_http service with its
# own proxy; every request is a RequestsInFlight event through the Arbiter and back.
cat > "$WORK/gpu.json" <<JSON
{"driver_version":"550.54.14","gpus":[{"name":"NVIDIA GeForce RTX 3090","uuid":"GPU-fa4e0000-0000-0000-0000-000000000000","total":25769803776,"used":0,"utilization":0,"processes":[]}]}
JSON
cat > "$WORK/vramd.toml" <<TOML
[daemon]
listen = "127.0.0.1:$VS_API"
state_dir = "$WORK/state"
[gpu]
backend = "nvml"
[services.up]
kind = "generic_http"
url = "http://127.0.0.1:$UP"
proxy = "127.0.0.1:$VS"
TOML
VRAMD_NVML_LIBRARY="$BUILD/libnvidia-ml-fake.so" FAKE_NVML_STATE="$WORK/gpu.json" \
  "$BUILD/vramd" serve --config "$WORK/vramd.toml" >"$WORK/serve.log" 2>&1 & PIDS+=($!); VS_PID=$!
VSB_PID=0
if [ -n "$BASE_SERVE" ]; then
  sed -e "s/:$VS_API/:$VSB_API/; s/:$VS\"/:$VSB\"/; s|/state|/state-before|" "$WORK/vramd.toml" > "$WORK/before.toml"
  VRAMD_NVML_LIBRARY="$BUILD/libnvidia-ml-fake.so" FAKE_NVML_STATE="$WORK/gpu.json" \
    "$BASE_SERVE" serve --config "$WORK/before.toml" >"$WORK/serve-before.log" 2>&1 & PIDS+=($!); VSB_PID=$!
fi
sleep 1
# nginx's work is done by its one worker, the master's child.
UP_PID=$(pgrep -P "$NGINX_upstream" | head -1); NGX_PID=$(pgrep -P "$NGINX_proxy" | head -1)

# CPU time (user + system, all threads) a process has used, in clock ticks.
ticks() { [ "$1" -gt 0 ] && awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat" || echo 0; }

# wrk's "Requests/sec", its p99 latency (in microseconds) and the CPU time per request of the
# process at PORT (PID $3), in microseconds: on a shared machine the least noisy of the three.
measure() {
  local out rps p99 t0 t1 n
  t0=$(ticks "$3")
  out=$(wrk -t1 -c"$2" -d"${SECS}s" --latency "http://127.0.0.1:$1/")
  t1=$(ticks "$3")
  n=$(awk '/requests in/ {print $1}' <<<"$out")
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {v=$2; if (v ~ /us$/) {sub(/us/,"",v); print v} else if (v ~ /ms$/) {sub(/ms/,"",v); print v*1000} else {sub(/s/,"",v); print v*1000000}}' <<<"$out")
  echo "$rps $p99 $(awk -v a="$t0" -v b="$t1" -v n="$n" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", (b - a) * 1e6 / hz / n }')"
}

for _ in $(seq "${BUSY:-0}"); do sha256sum /dev/zero & PIDS+=($!); done
[ "${BUSY:-0}" -gt 0 ] && echo "beside ${BUSY} busy loops (sha256sum /dev/zero)" >&2
echo "| conns | setup | req/s | p99 | added p99 | vs Go | vs nginx | CPU µs/req | CPU vs nginx |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
echo "uptime before: $(uptime)" >&2
for c in 1 16 64; do
for round in $(seq "$ROUNDS"); do
  read -r d_rps d_p99 d_cpu < <(measure $UP $c "$UP_PID")
  read -r n_rps n_p99 n_cpu < <(measure $NGX $c "$NGX_PID")
  read -r g_rps g_p99 g_cpu < <(measure $GO $c $GO_PID)
  read -r v_rps v_p99 v_cpu < <(measure $VR $c $VR_PID)
  read -r s_rps s_p99 s_cpu < <(measure $VS $c $VS_PID)
  if [ -n "$BASE" ]; then read -r b_rps b_p99 b_cpu < <(measure $VB $c $B_PID); fi
  if [ -n "$BASE_SERVE" ]; then read -r sb_rps sb_p99 sb_cpu < <(measure $VSB $c $VSB_PID); fi
  row() { awk -v c=$c -v n="$1" -v r=$2 -v p=$3 -v u=$4 -v d=$d_p99 -v g=$g_rps -v x=$n_rps -v nu=$n_cpu \
    'BEGIN { printf "| %d | %s | %.0f | %.0f µs | %+.0f µs | %.2f× | %.2f× | %.1f | %.2f× |\n", c, n, r, p, p-d, r/g, r/x, u, u/nu }'; }
  row "direct (the upstream's CPU)" "$d_rps" "$d_p99" "$d_cpu"
  row nginx "$n_rps" "$n_p99" "$n_cpu"
  row "Go ReverseProxy" "$g_rps" "$g_p99" "$g_cpu"
  row "vramd (proxy code alone)" "$v_rps" "$v_p99" "$v_cpu"
  row "vramd serve" "$s_rps" "$s_p99" "$s_cpu"
  if [ -n "$BASE" ]; then row "vramd before (baseline harness)" "$b_rps" "$b_p99" "$b_cpu"; fi
  if [ -n "$BASE_SERVE" ]; then row "vramd serve before (baseline)" "$sb_rps" "$sb_p99" "$sb_cpu"; fi
done
done
echo "uptime after: $(uptime)" >&2

echo
echo "| SSE, 10,000 events 200 µs apart | p50 | p99 | max | reads with >1 event |"
echo "|---|---:|---:|---:|---:|"
for s in "direct $SSE" "nginx $NGX_SSE" "Go-ReverseProxy $GO_SSE" "vramd $VR_SSE"; do
  set -- $s
  r=$("$WORK/ssebench" read "http://127.0.0.1:$2/sse")
  awk -v n="$1" -v r="$r" 'BEGIN { split(r, f, /[ =]/); printf "| %s | %s µs | %s µs | %s µs | %s |\n", n, f[4], f[6], f[8], f[10] }'
done

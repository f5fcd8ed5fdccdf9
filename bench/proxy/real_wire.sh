#!/usr/bin/env bash
# bench/proxy/real_wire.sh: vramd's proxy in front of an upstream shaped like llama-server b4747
# on the wire (issue 46): fake-gpu-server --kind llamacpp with its defaults (head and body in two
# sends without TCP_NODELAY, a 5 s keep-alive, 100 requests a connection) and WORKERS workers
# (default 3: --threads-http on a 2-core host; further connections wait unserved).
# Side by side in one run, each setup on an upstream of its own (so that one's idle pooled
# connections hold no worker of another's): direct, vramd's proxy code alone
# (vramd_proxy_harness), and `vramd serve` with the upstream as a llamacpp service.
#  - one-shot: CLIENTS clients, each request on a new client connection (the connect counted),
#    at 1, 4 and 16 clients: median and p99; the goals of issue 46 item 7 checked against direct
#    (median <= 1.2x direct + 1 ms; at 4 and 16 clients p99 <= 2x direct + 10 ms);
#  - keep-alive: wrk at 64 connections: req/s and p99.
# Usage: bench/proxy/real_wire.sh [BUILD_DIR] [SECONDS]   (needs go, wrk, curl)
# WORKERS=N sets the upstream's workers; REQ_PATH the request (default /health).
set -euo pipefail
BUILD=${1:-build}
SECS=${2:-5}
WORKERS=${WORKERS:-3}
REQ_PATH=${REQ_PATH:-/health}
HERE=$(cd "$(dirname "$0")" && pwd)
for tool in go wrk curl; do
  command -v $tool >/dev/null || { echo "bench/proxy: needs $tool (apt-get install wrk golang-go curl)"; exit 77; }
done
for bin in vramd vramd_proxy_harness fake-gpu-server libnvidia-ml-fake.so; do
  [ -e "$BUILD/$bin" ] || { echo "bench/proxy/real_wire.sh: build $BUILD/$bin first"; exit 1; }
done
WORK=$(mktemp -d /tmp/vramd-bench-wire.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; sleep 0.3; rm -rf "$WORK"; }
trap cleanup EXIT

UP_D=18300 UP_H=18301 UP_S=18302 VH=18303 VS=18304 VS_API=18305
export GOCACHE=$WORK/gocache GOFLAGS=-mod=mod GO111MODULE=off
go build -o "$WORK/oneshot" "$HERE/oneshot.go"

cat > "$WORK/gpu.json" <<JSON
{"driver_version":"550.54.14","gpus":[{"name":"NVIDIA GeForce RTX 3090","uuid":"GPU-fa4e0000-0000-0000-0000-000000000000","total":25769803776,"used":0,"utilization":0,"processes":[]}]}
JSON
for port in $UP_D $UP_H $UP_S; do
  "$BUILD/fake-gpu-server" --kind llamacpp --port "$port" --state "$WORK/gpu.json" \
    --model-bytes 1GiB --workers "$WORKERS" >"$WORK/up-$port.log" 2>&1 & PIDS+=($!)
done
# The harness is the proxy without the daemon: it is told what `vramd serve` works out for a
# llamacpp service (its workers less one).
"$BUILD/vramd_proxy_harness" --service llama "http://127.0.0.1:$UP_H" "127.0.0.1:$VH" \
  --max-connections $((WORKERS > 1 ? WORKERS - 1 : 1)) >/dev/null & PIDS+=($!)
cat > "$WORK/vramd.toml" <<TOML
[daemon]
listen = "127.0.0.1:$VS_API"
state_dir = "$WORK/state"
[gpu]
backend = "nvml"
[services.llama]
kind = "llamacpp"
url = "http://127.0.0.1:$UP_S"
proxy = "127.0.0.1:$VS"
TOML
VRAMD_NVML_LIBRARY="$BUILD/libnvidia-ml-fake.so" FAKE_NVML_STATE="$WORK/gpu.json" \
  "$BUILD/vramd" serve --config "$WORK/vramd.toml" >"$WORK/serve.log" 2>&1 & PIDS+=($!)
for port in $UP_D $UP_H $UP_S $VH $VS; do
  for _ in $(seq 100); do curl -s -o /dev/null -H 'Connection: close' "http://127.0.0.1:$port$REQ_PATH" && break; sleep 0.1; done
done
sleep 1

SETUPS=("direct $UP_D" "vramd (proxy code alone) $VH" "vramd serve $VS")
port_of() { awk '{print $NF}' <<<"$1"; }
name_of() { sed 's/ [0-9]*$//' <<<"$1"; }
ms() { awk -v u="$1" 'BEGIN { printf "%.2f ms", u / 1000 }'; }

echo "upstream: fake-gpu-server --kind llamacpp --workers $WORKERS (split writes, Nagle on, keep-alive 5 s, 100 requests a connection); GET $REQ_PATH; ${SECS} s a cell"
echo
echo "| one-shot clients | setup | requests | errors | median | p99 | max | goal (vs direct) |"
echo "|---:|---|---:|---:|---:|---:|---:|---|"
echo "uptime before: $(uptime)" >&2
for c in 1 4 16; do
  d50=0 d99=0
  for s in "${SETUPS[@]}"; do
    read -r n e p50 p99 mx < <("$WORK/oneshot" "127.0.0.1:$(port_of "$s")" "$REQ_PATH" "$c" "$SECS" |
      sed 's/[a-z0-9_]*=//g')
    if [ "$(name_of "$s")" = direct ]; then d50=$p50 d99=$p99; goal="-"; else
      goal=$(awk -v c=$c -v a=$p50 -v b=$p99 -v da=$d50 -v db=$d99 'BEGIN {
        ok50 = a <= 1.2 * da + 1000; s = sprintf("median %s", ok50 ? "ok" : "MISSED")
        if (c >= 4) { ok99 = b <= 2 * db + 10000; s = s sprintf(", p99 %s", ok99 ? "ok" : "MISSED") }
        print s }')
    fi
    echo "| $c | $(name_of "$s") | $n | $e | $(ms "$p50") | $(ms "$p99") | $(ms "$mx") | $goal |"
  done
done

# wrk's "Requests/sec" and its p99 (µs); --timeout long: a connection queued for a worker waits.
keepalive() {
  local out
  out=$(wrk -t1 -c64 -d"${SECS}s" --timeout 30s --latency "http://127.0.0.1:$1$REQ_PATH")
  awk '/Requests\/sec/ {r=$2} /Socket errors/ {e=$0} $1=="99%" {v=$2; if (v ~ /us$/) {sub(/us/,"",v); p=v} else if (v ~ /ms$/) {sub(/ms/,"",v); p=v*1000} else {sub(/s/,"",v); p=v*1000000}}
    END { if (e == "") e = "none"; printf "%s %s %s\n", r, p, e }' <<<"$out"
}
echo
echo "| keep-alive, 64 connections | req/s | p99 | socket errors |"
echo "|---|---:|---:|---|"
for s in "${SETUPS[@]}"; do
  read -r rps p99 errs < <(keepalive "$(port_of "$s")")
  echo "| $(name_of "$s") | $rps | $(ms "$p99") | $errs |"
done
echo "uptime after: $(uptime)" >&2

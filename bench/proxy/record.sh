#!/usr/bin/env bash
# bench/proxy/record.sh: what recording each request costs the request path (docs/history.md).
# The proxy code alone (vramd_proxy_harness) without and with --record, and `vramd serve` with
# [daemon] history = false and true, side by side, ROUNDS rounds interleaved, against a fast
# upstream (nginx `return 200`): req/s, CPU µs per request, heap allocations per request (the
# harness counts them), and for `vramd serve` with history on: the records the store took
# against the requests answered (the store's write rate).
# Usage: bench/proxy/record.sh [BUILD_DIR] [SECONDS] [ROUNDS] [CONNS]   (needs wrk, nginx)
set -euo pipefail
BUILD=${1:-build}
SECS=${2:-5}
ROUNDS=${3:-3}
CONNS=${4:-16}
for tool in wrk nginx curl python3; do
  command -v $tool >/dev/null || { echo "bench/proxy/record.sh: needs $tool"; exit 77; }
done
for bin in vramd_proxy_harness vramd libnvidia-ml-fake.so; do
  [ -e "$BUILD/$bin" ] || { echo "bench/proxy/record.sh: build $BUILD/$bin first"; exit 1; }
done
WORK=$(mktemp -d /tmp/vramd-bench-record.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; sleep 0.3; rm -rf "$WORK"; }
trap cleanup EXIT

UP=18200 OFF=18201 ON=18202 S_OFF=18203 S_OFF_API=18204 S_ON=18205 S_ON_API=18206
source "$(dirname "$0")/upstream.sh"
start_upstream "$WORK/up" "$UP"
"$BUILD/vramd_proxy_harness" --service up http://127.0.0.1:$UP 127.0.0.1:$OFF >"$WORK/off.out" & PIDS+=($!); OFF_PID=$!
"$BUILD/vramd_proxy_harness" --record --service up http://127.0.0.1:$UP 127.0.0.1:$ON >"$WORK/on.out" & PIDS+=($!); ON_PID=$!
cat > "$WORK/gpu.json" <<JSON
{"driver_version":"550.54.14","gpus":[{"name":"NVIDIA GeForce RTX 3090","uuid":"GPU-fa4e0000-0000-0000-0000-000000000000","total":25769803776,"used":0,"utilization":0,"processes":[]}]}
JSON
serve() {  # name api_port proxy_port history
  mkdir -p "$WORK/$1"
  cat > "$WORK/$1/vramd.toml" <<TOML
[daemon]
listen = "127.0.0.1:$2"
state_dir = "$WORK/$1"
history = $4
[gpu]
backend = "nvml"
[services.up]
kind = "generic_http"
url = "http://127.0.0.1:$UP"
proxy = "127.0.0.1:$3"
TOML
  VRAMD_NVML_LIBRARY="$BUILD/libnvidia-ml-fake.so" FAKE_NVML_STATE="$WORK/gpu.json" \
    "$BUILD/vramd" serve --config "$WORK/$1/vramd.toml" >"$WORK/$1/serve.log" 2>&1 & PIDS+=($!)
  eval "PID_$1=$!"
}
serve soff $S_OFF_API $S_OFF false
serve son $S_ON_API $S_ON true
sleep 1.5

ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
# req/s and CPU µs per request of the process PID behind PORT; the requests wrk counted.
measure() {
  local out t0 t1 n rps
  t0=$(ticks "$2")
  out=$(wrk -t1 -c"$CONNS" -d"${SECS}s" "http://127.0.0.1:$1/")
  t1=$(ticks "$2")
  n=$(awk '/requests in/ {print $1}' <<<"$out")
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  echo "$rps $(awk -v a="$t0" -v b="$t1" -v n="$n" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", (b - a) * 1e6 / hz / n }') $n"
}
echo "uptime before: $(uptime)" >&2
echo "| round | setup | req/s | CPU µs/req | vs off |"
echo "|---:|---|---:|---:|---:|"
ON_REQS=0
for r in $(seq "$ROUNDS"); do
  read -r a_rps a_cpu _ < <(measure $OFF $OFF_PID)
  read -r b_rps b_cpu _ < <(measure $ON $ON_PID)
  read -r c_rps c_cpu _ < <(measure $S_OFF "$PID_soff")
  read -r d_rps d_cpu d_n < <(measure $S_ON "$PID_son")
  ON_REQS=$((ON_REQS + d_n))
  awk -v r=$r -v a=$a_rps -v ac=$a_cpu -v b=$b_rps -v bc=$b_cpu -v c=$c_rps -v cc=$c_cpu -v d=$d_rps -v dc=$d_cpu 'BEGIN {
    printf "| %d | proxy code, recording off | %.0f | %.2f | 1.00× |\n", r, a, ac
    printf "| %d | proxy code, recording on | %.0f | %.2f | %.2f× |\n", r, b, bc, b / a
    printf "| %d | vramd serve, history = false | %.0f | %.2f | 1.00× |\n", r, c, cc
    printf "| %d | vramd serve, history = true | %.0f | %.2f | %.2f× |\n", r, d, dc, d / c }'
done
echo "uptime after: $(uptime)" >&2
echo
# Heap allocations per request, counted by the harness since it was ready.
kill -TERM $OFF_PID $ON_PID; sleep 0.5
off_line=$(grep '^requests' "$WORK/off.out"); on_line=$(grep '^requests' "$WORK/on.out")
python3 - "$off_line" "$on_line" <<'PY'
import sys
def parse(line):
    f = line.split()
    return {f[i]: int(f[i + 1]) for i in range(0, len(f), 2)}
off, on = parse(sys.argv[1]), parse(sys.argv[2])
a = off["allocations"] / max(off["requests"], 1)
b = on["allocations"] / max(on["requests"], 1)
print("| harness | requests | heap allocations | per request | recorded | dropped |")
print("|---|---:|---:|---:|---:|---:|")
print(f"| recording off | {off['requests']} | {off['allocations']} | {a:.3f} | - | - |")
print(f"| recording on | {on['requests']} | {on['allocations']} | {b:.3f} | {on['recorded']} | {on['dropped']} |")
print(f"\nadded allocations per request with recording on: {b - a:+.3f}")
PY
# At about 1,000 requests a second (wrk paced: two connections, 1 ms between requests): what the
# history costs vramd serve in CPU, all its threads (the store thread's writes included).
cat > "$WORK/paced.lua" <<'LUA'
function delay() return 1 end
LUA
paced() {  # port pid → req/s and CPU ms per second of load
  local t0 t1 out
  t0=$(ticks "$2")
  out=$(wrk -t1 -c2 -d"${SECS}s" -s "$WORK/paced.lua" "http://127.0.0.1:$1/")
  t1=$(ticks "$2")
  awk -v a="$t0" -v b="$t1" -v s="$SECS" -v hz="$(getconf CLK_TCK)" -v r="$(awk '/Requests\/sec/ {print $2}' <<<"$out")" \
    'BEGIN { printf "%.0f %.1f\n", r, (b - a) * 1000 / hz / s }'
}
echo
echo "| round | vramd serve, paced | req/s | CPU ms per second | vs off |"
echo "|---:|---|---:|---:|---:|"
for r in $(seq "$ROUNDS"); do
  read -r p_off c_off < <(paced $S_OFF "$PID_soff")
  read -r p_on c_on < <(paced $S_ON "$PID_son")
  ON_REQS=$((ON_REQS + p_on * SECS))
  awk -v r=$r -v a=$p_off -v ac=$c_off -v b=$p_on -v bc=$c_on 'BEGIN {
    printf "| %d | history = false | %d | %.1f | 1.00× |\n", r, a, ac
    printf "| %d | history = true | %d | %.1f | %.2f× |\n", r, b, bc, (ac > 0 ? bc / ac : 0) }'
done
# The store's write rate: every request vramd serve answered with history on, in the store?
sleep 2.5
stored=$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT count(*) FROM durations").fetchone()[0])' "$WORK/son/vramd.db")
echo
echo "vramd serve, history = true: about $ON_REQS requests answered (wrk's counts; the paced ones from its rate); $stored records in the store"

#!/usr/bin/env bash
# Instructions per proxied request, by callgrind, for one or more builds of vramd_proxy_harness
# measured one after the other in the same run: each proxies to the same nginx upstream
# (`return 200`), is warmed up, then counted over `wrk -t1 -c16` for SECONDS. Instruction counts
# do not depend on the machine's load (repeatable to ~1%), so this is the figure to compare a
# change of the request path with: bench/RESULTS.md.
# An argument `serve:BUILD_DIR` measures `vramd serve` of that build instead, the upstream as a
# generic_http service with its own proxy (as bench/proxy/run.sh): the whole daemon's cost of a
# request, its threads included (the request's record written to SQLite, the in-flight count).
# Usage: bench/proxy/callgrind.sh [SECONDS] HARNESS|serve:BUILD_DIR ...   (valgrind, wrk, nginx)
set -euo pipefail
SECS=5
if [[ ${1:-} =~ ^[0-9]+$ ]]; then SECS=$1; shift; fi
[ $# -ge 1 ] || { echo "usage: $0 [SECONDS] HARNESS [HARNESS...]"; exit 2; }
for tool in wrk nginx valgrind callgrind_control; do
  command -v $tool >/dev/null || { echo "bench/proxy: needs $tool (apt-get install wrk nginx-light valgrind)"; exit 77; }
done
WORK=$(mktemp -d /tmp/vramd-callgrind.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; sleep 0.3; rm -rf "$WORK"; }
trap cleanup EXIT
UP=18250 PX=18251
source "$(dirname "$0")/upstream.sh"
start_upstream "$WORK/up" "$UP"
sleep 0.5
echo "| harness | requests | instructions | instr./request |"
echo "|---|---:|---:|---:|"
for h in "$@"; do
  out="$WORK/cg.out"
  if [[ $h == serve:* ]]; then
    b=${h#serve:}
    rm -rf "$WORK/state"
    printf '%s\n' '[daemon]' "listen = \"127.0.0.1:$((PX + 1))\"" "state_dir = \"$WORK/state\"" \
      '[gpu]' 'backend = "nvml"' '[services.up]' 'kind = "generic_http"' \
      "url = \"http://127.0.0.1:$UP\"" "proxy = \"127.0.0.1:$PX\"" > "$WORK/vramd.toml"
    echo '{"driver_version":"550.54.14","gpus":[{"name":"NVIDIA GeForce RTX 3090","uuid":"GPU-fa4e0000-0000-0000-0000-000000000000","total":25769803776,"used":0,"utilization":0,"processes":[]}]}' > "$WORK/gpu.json"
    VRAMD_NVML_LIBRARY="$b/libnvidia-ml-fake.so" FAKE_NVML_STATE="$WORK/gpu.json" \
      valgrind --tool=callgrind --callgrind-out-file="$out" \
      "$b/vramd" serve --config "$WORK/vramd.toml" >/dev/null 2>"$WORK/vg.log" &
  else
    valgrind --tool=callgrind --callgrind-out-file="$out" \
      "$h" --service up "http://127.0.0.1:$UP" "127.0.0.1:$PX" >/dev/null 2>"$WORK/vg.log" &
  fi
  pid=$!
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PX/" 2>/dev/null && break; sleep 0.2; done
  wrk -t1 -c16 -d3s "http://127.0.0.1:$PX/" >/dev/null  # warm-up: pools, buffers, frames
  callgrind_control -z "$pid" >/dev/null
  n=$(wrk -t1 -c16 -d"${SECS}s" "http://127.0.0.1:$PX/" | awk '/requests in/ {print $1}')
  callgrind_control -d "$pid" >/dev/null  # the counts since -z, to $out.1
  kill "$pid"; wait "$pid" 2>/dev/null || true
  ir=$(awk '/^totals:/ {print $2}' "$out.1")
  awk -v h="$h" -v n="$n" -v ir="$ir" 'BEGIN { printf "| %s | %d | %d | %.1fk |\n", h, n, ir, ir / n / 1000 }'
  [ -n "${KEEP_PROFILE:-}" ] && cp "$out.1" "$KEEP_PROFILE.$(basename "$h")"
  rm -f "$out"*
done

#!/usr/bin/env bash
# The real soak (issue 14, item 5): `vramd serve` on the test GPU with misbehaving fake servers
# and clients busy all along, its RSS sampled every minute. Target: flat (what vramd keeps —
# events, logs, waiters, SSE subscribers, history — is bounded).
#
#   bench/soak_serve.sh [BUILD_DIR]        (DURATION_S=1800 by default)
#
# Services (tests/fakes): comfyui whose unloads free nothing (--ignore-unload), ollama freeing
# half (--partial 50), vllm answering after 3 s (--slow 3s), textgen answering 500, a1111
# answering garbage, llama.cpp that never answers (--hang), and a managed comfyui that crashes on
# unload (restarted with backoff). All unload after 1 minute idle. Clients, all along: a lease
# every 3 s (heartbeat leases left to expire, some released), an unload request every 10 s, work
# that loads the services again, the event list, and an SSE subscriber that comes and goes.
# Prints one line a minute (RSS, VmHWM, threads, fds, events stored) and the growth from minute
# 5 to the end. Exit 0 when it ran, 2 when it could not.
set -uo pipefail

BUILD_DIR=${1:-build}
DURATION_S=${DURATION_S:-1800}
cd "$(dirname "$0")/.." || exit 2
VRAMD="$PWD/$BUILD_DIR/vramd"
FAKE_LIB="$PWD/$BUILD_DIR/libnvidia-ml-fake.so"
FAKE_SERVER="$PWD/$BUILD_DIR/fake-gpu-server"
for f in "$VRAMD" "$FAKE_LIB" "$FAKE_SERVER"; do
  [ -e "$f" ] || { echo "soak_serve: $f missing (build first)"; exit 2; }
done
command -v curl >/dev/null || { echo "soak_serve: curl needed"; exit 2; }
command -v python3 >/dev/null || { echo "soak_serve: python3 needed"; exit 2; }

TMP=$(mktemp -d /tmp/vramd-soak.XXXXXX) || exit 2
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  # The managed service outlives vramd by design (on_shutdown = "leave").
  for f in "$TMP"/state/run/*.pid; do [ -f "$f" ] && kill -KILL -- "-$(cat "$f")" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
python3 - "$TMP/gpu.json" <<'EOF'
import json, sys
GiB = 1 << 30
json.dump({"driver_version": "550.54.14", "gpus": [{"name": "NVIDIA GeForce RTX 3090",
           "uuid": "GPU-00000000-0000-0000-0000-000000000000", "total": 48 * GiB,
           "used": 512 * 1024 * 1024, "utilization": 0, "processes": []}]}, open(sys.argv[1], "w"))
EOF

TOML=""
URLS=()
add_fake() {  # name kind bytes flags...
  local name=$1 kind=$2 bytes=$3 p
  shift 3
  p=$(free_port)
  "$FAKE_SERVER" --kind "$kind" --port "$p" --state "$TMP/gpu.json" --model-bytes "$bytes" "$@" \
    >"$TMP/fake-$name.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do grep -q "ready $p" "$TMP/fake-$name.log" 2>/dev/null && break; sleep 0.1; done
  TOML+="
[services.$name]
kind = \"$kind\"
url = \"http://127.0.0.1:$p\"
unload_after_idle = \"1m\"
min_idle = \"10s\"
"
  URLS+=("$name=http://127.0.0.1:$p")
}
add_fake comfy comfyui 8GiB --ignore-unload
add_fake ollama ollama 5GiB --partial 50
add_fake vllm vllm 6GiB --slow 3s
add_fake textgen textgen 3GiB --http-500
add_fake a1111 a1111 4GiB --garbage
add_fake llamacpp llamacpp 2GiB --hang
MP=$(free_port)
TOML+="
[services.flaky]
kind = \"comfyui\"
url = \"http://127.0.0.1:$MP\"
start = [\"$FAKE_SERVER\", \"--kind\", \"comfyui\", \"--port\", \"$MP\", \"--state\", \"$TMP/gpu.json\", \"--model-bytes\", \"3GiB\", \"--crash-on-unload\"]
unload_after_idle = \"1m\"
min_idle = \"10s\"
stop_timeout = \"3s\"
"

PORT=$(free_port)
URL="http://127.0.0.1:$PORT"
mkdir -p "$TMP/state"
cat >"$TMP/vramd.toml" <<EOF
[daemon]
listen = "127.0.0.1:$PORT"
state_dir = "$TMP/state"
sample_interval = "1s"

[gpu]
backend = "nvml"
$TOML
EOF

VRAMD_NVML_LIBRARY=$FAKE_LIB FAKE_NVML_STATE=$TMP/gpu.json \
  "$VRAMD" serve --config "$TMP/vramd.toml" >"$TMP/daemon.log" 2>&1 &
DAEMON=$!
PIDS+=("$DAEMON")
for _ in $(seq 100); do curl -sf "$URL/v1/status" >/dev/null && break; sleep 0.1; done
curl -sf "$URL/v1/status" >/dev/null || { echo "soak_serve: vramd did not start:"; cat "$TMP/daemon.log"; exit 2; }
curl -sf -X POST "$URL/v1/services/flaky/start" >/dev/null

# The clients.
(
  i=0
  while :; do
    i=$((i + 1))
    vram=$((1 + RANDOM % 8))
    id=$(curl -s -m 10 -X POST "$URL/v1/leases?wait=2s" \
      -d "{\"vram\": \"${vram}GiB\", \"label\": \"soak$((i % 10))\", \"holder\": \"soak\", \"timeout\": \"1m\"}" |
      python3 -c 'import json,sys; print(json.load(sys.stdin).get("id",""))' 2>/dev/null)
    # Half are released after a while; the rest are left to expire (no heartbeat).
    if [ -n "$id" ] && [ $((i % 2)) = 0 ]; then (sleep $((RANDOM % 20)); curl -s -m 10 -X DELETE "$URL/v1/leases/$id" >/dev/null) & fi
    sleep 3
  done
) >/dev/null 2>&1 &
PIDS+=($!)
(
  names=(comfy ollama vllm textgen a1111 llamacpp flaky)
  while :; do
    n=${names[RANDOM % ${#names[@]}]}
    curl -s -m 30 -X POST "$URL/v1/services/$n/unload" >/dev/null
    curl -s -m 10 "$URL/v1/events?limit=200" >/dev/null
    # Work: the servers load again (and are busy a while).
    for u in "${URLS[@]}"; do curl -s -m 2 -X POST "${u#*=}/fake/load" >/dev/null; done
    curl -s -m 2 -X POST "http://127.0.0.1:$MP/fake/load" >/dev/null
    sleep 10
  done
) >/dev/null 2>&1 &
PIDS+=($!)
(
  while :; do curl -s -N -m 15 -H 'Accept: text/event-stream' "$URL/v1/events" >/dev/null; sleep 5; done
) >/dev/null 2>&1 &
PIDS+=($!)

kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status" 2>/dev/null; }
events_stored() {
  python3 - "$TMP/state/vramd.db" <<'EOF' 2>/dev/null || echo "?"
import sqlite3, sys
print(sqlite3.connect(sys.argv[1]).execute("select count(*) from events").fetchone()[0])
EOF
}
echo "vramd serve soak: ${DURATION_S} s, 7 misbehaving services, clients busy; RSS every minute"
printf "  %6s %10s %10s %8s %6s %8s\n" minute "RSS KiB" "HWM KiB" threads fds events
START=$SECONDS
RSS5=""
LAST=""
MAX_AFTER5=0
minute=0
while [ $((SECONDS - START)) -lt "$DURATION_S" ]; do
  sleep $((60 - (SECONDS - START) % 60))
  minute=$(((SECONDS - START) / 60))
  kill -0 "$DAEMON" 2>/dev/null || { echo "soak_serve: vramd serve exited at minute $minute:"; tail -50 "$TMP/daemon.log"; exit 2; }
  rss=$(kib "$DAEMON" VmRSS)
  printf "  %6d %10s %10s %8s %6s %8s\n" "$minute" "$rss" "$(kib "$DAEMON" VmHWM)" \
    "$(kib "$DAEMON" Threads)" "$(ls "/proc/$DAEMON/fd" | wc -l)" "$(events_stored)"
  [ "$minute" = 5 ] && RSS5=$rss
  [ "$minute" -gt 5 ] && [ "$rss" -gt "$MAX_AFTER5" ] && MAX_AFTER5=$rss
  LAST=$rss
done
if [ -n "$RSS5" ]; then
  awk -v a="$RSS5" -v m="$MAX_AFTER5" -v l="$LAST" 'BEGIN {
    printf "\n  RSS at minute 5: %d KiB; at the end: %d KiB (%+.1f%%); highest after minute 5: %d KiB (%+.1f%%)\n",
      a, l, (l - a) * 100 / a, m, (m - a) * 100 / a }'
fi
echo "  events by type:"
curl -s "$URL/v1/events?limit=10000" | python3 -c '
import collections, json, sys
c = collections.Counter(e["type"] for e in json.load(sys.stdin)["events"])
for t, n in c.most_common(): print(f"    {n:6d} {t}")'

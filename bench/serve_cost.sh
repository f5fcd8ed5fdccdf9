#!/usr/bin/env bash
# What `vramd serve` costs the host at 1 s sampling. Target: <= 1.1 CPU seconds per hour (what
# the seed's sidecar costs, polling once every 30 s), RSS < 16 MiB.
#
#   bench/serve_cost.sh [BUILD_DIR]        (DURATION_S=60 WARMUP_S=5 HOST_PROCS=1000 by default)
#
# Runs vramd serve on the fake GPU (build/libnvidia-ml-fake.so) with a few stand-in GPU processes,
# four services matched by their port (fake-gpu-servers holding memory on the fake GPU, probed at
# the daemon's pace; no `match`, so their listening sockets are looked up) and HOST_PROCS more
# sleeping processes on the host; and, over the same window, two references:
#   - the seed's sidecar: a shell loop that every 30 s runs nvidia-smi (the fake one, on the same
#     fake GPU) and asks each service for its state with curl, as the first post's script did;
#   - a /proc scan: a shell loop that reads stat, status, cmdline and cgroup of every process
#     once a second (the bare minimum a naive scan must do).
# CPU figures come from /proc/PID/stat (utime+stime, the references' children included) and, for
# vramd, its threads' schedstat, measured from WARMUP_S after start to the end. The ratios
# vramd / reference are what to compare across runs: machines are shared and noisy, the ratios
# less so. Prints a table; exit 0 when it ran, 2 when it could not.
set -uo pipefail

BUILD_DIR=${1:-build}
DURATION_S=${DURATION_S:-60}
WARMUP_S=${WARMUP_S:-5}
HOST_PROCS=${HOST_PROCS:-1000}
PROBE_INTERVAL=${PROBE_INTERVAL:-2s}  # daemon.probe_interval (2 s is the default)
# daemon.quiet_probe_interval: unset, the daemon's default (10 s); = PROBE_INTERVAL, no backing off.
QUIET_PROBE_INTERVAL=${QUIET_PROBE_INTERVAL:-}
MATCH=${MATCH:-port}  # port: services found by their listening port; cmdline: by a match rule (to split the cost)
# A profiler to run vramd under (e.g. WRAP="valgrind --tool=callgrind --callgrind-out-file=/tmp/cg"):
# where the CPU goes; the CPU figures are then the profiler's, not vramd's.
WRAP=${WRAP:-}
CPU_TARGET_S_PER_H=1.1
RSS_TARGET_MIB=16

cd "$(dirname "$0")/.." || exit 2
VRAMD="$PWD/$BUILD_DIR/vramd"
FAKE_LIB="$PWD/$BUILD_DIR/libnvidia-ml-fake.so"
FAKE_SERVER="$PWD/$BUILD_DIR/fake-gpu-server"
[ -x "$FAKE_SERVER" ] || { echo "serve_cost: $FAKE_SERVER missing (build first)"; exit 2; }
[ -x "$VRAMD" ] || { echo "serve_cost: $VRAMD missing (build first)"; exit 2; }
[ -f "$FAKE_LIB" ] || { echo "serve_cost: $FAKE_LIB missing (build first)"; exit 2; }
command -v python3 >/dev/null || { echo "serve_cost: python3 needed"; exit 2; }
command -v curl >/dev/null || { echo "serve_cost: curl needed (the sidecar reference)"; exit 2; }
FAKE_SMI="$PWD/$BUILD_DIR/fake-bin/nvidia-smi"
[ -x "$FAKE_SMI" ] || { echo "serve_cost: $FAKE_SMI missing (build first)"; exit 2; }

TMP=$(mktemp -d /tmp/vramd-serve-cost.XXXXXX) || exit 2
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Stand-in GPU processes and the fake GPU state naming them (format: DESIGN.md "Test GPU").
STANDINS=()
for _ in 1 2 3 4; do
  sleep 100000 &
  PIDS+=($!)
  STANDINS+=($!)
done
python3 - "$TMP/gpu.json" "${STANDINS[@]}" <<'EOF'
import json, sys
path, pids = sys.argv[1], [int(p) for p in sys.argv[2:]]
GiB = 1 << 30
procs = [{"pid": p, "used": (i + 1) * GiB} for i, p in enumerate(pids)]
used = 512 * 1024 * 1024 + sum(p["used"] for p in procs)
json.dump({"driver_version": "550.54.14", "gpus": [{"name": "NVIDIA GeForce RTX 3090",
           "uuid": "GPU-00000000-0000-0000-0000-000000000000", "total": 24 * GiB, "used": used,
           "utilization": 0, "processes": procs}]}, open(path, "w"))
EOF

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
# The host's other processes: HOST_PROCS sleepers (vramd reads only the GPU's pids and their
# ancestors; the reference reads them all, as a naive scan does).
for _ in $(seq "$HOST_PROCS"); do
  sleep 100000 &
  PIDS+=($!)
done
# The port-matched services: each fake server adds its own pid and bytes to the fake GPU.
SERVICES_TOML=""
SIDECAR_URLS=""
for kind in comfyui ollama vllm llamacpp; do
  p=$(free_port)
  "$FAKE_SERVER" --kind "$kind" --port "$p" --state "$TMP/gpu.json" --model-bytes 3GiB \
    >"$TMP/fake-$kind.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do grep -q "ready $p" "$TMP/fake-$kind.log" 2>/dev/null && break; sleep 0.1; done
  grep -q "ready $p" "$TMP/fake-$kind.log" || { echo "serve_cost: fake $kind did not start"; exit 2; }
  case $kind in  # what the sidecar asks each for
    comfyui) SIDECAR_URLS+=" http://127.0.0.1:$p/queue" ;;
    ollama) SIDECAR_URLS+=" http://127.0.0.1:$p/api/ps" ;;
    vllm) SIDECAR_URLS+=" http://127.0.0.1:$p/metrics" ;;
    llamacpp) SIDECAR_URLS+=" http://127.0.0.1:$p/slots" ;;
  esac
  SERVICES_TOML+=$'\n'"[services.$kind]"$'\n'"kind = \"$kind\""$'\n'"url = \"http://127.0.0.1:$p\""$'\n'
  [ "$MATCH" = cmdline ] && SERVICES_TOML+="match = { cmdline = \"--kind $kind --port $p \" }"$'\n'
done
mkdir -p "$TMP/state"
QUIET_LINE=""
[ -n "$QUIET_PROBE_INTERVAL" ] && QUIET_LINE="quiet_probe_interval = \"$QUIET_PROBE_INTERVAL\""
cat >"$TMP/vramd.toml" <<EOF
[daemon]
listen = "127.0.0.1:$PORT"
state_dir = "$TMP/state"
sample_interval = "1s"
probe_interval = "$PROBE_INTERVAL"
$QUIET_LINE

[gpu]
backend = "nvml"

$SERVICES_TOML
EOF

# shellcheck disable=SC2086  # WRAP is a command line
VRAMD_NVML_LIBRARY=$FAKE_LIB FAKE_NVML_STATE=$TMP/gpu.json \
  $WRAP "$VRAMD" serve --config "$TMP/vramd.toml" >"$TMP/daemon.log" 2>&1 &
DAEMON=$!
PIDS+=("$DAEMON")

# The reference: once a second, read what a /proc scan must read for every process.
bash -c 'while :; do cat /proc/[0-9]*/stat /proc/[0-9]*/status /proc/[0-9]*/cmdline \
  /proc/[0-9]*/cgroup >/dev/null 2>&1; sleep 1; done' &
REF=$!
PIDS+=("$REF")
# The seed's sidecar: every 30 s, the GPU's processes from nvidia-smi and each service's state.
FAKE_NVML_STATE=$TMP/gpu.json SMI="$FAKE_SMI" URLS="$SIDECAR_URLS" sh -c 'while :; do
  "$SMI" --query-compute-apps=pid,used_memory --format=csv,noheader >/dev/null 2>&1
  for u in $URLS; do curl -s -m 5 "$u" >/dev/null 2>&1; done
  sleep 30; done' &
SIDECAR=$!
PIDS+=("$SIDECAR")

TICKS=$(getconf CLK_TCK)
# CPU seconds of PID: utime+stime, plus cutime+cstime (waited-for children) for the reference.
cpu_s() {
  local stat rest
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || { echo "nan"; return; }
  rest=${stat##*) }  # fields from 3 on; comm may hold spaces
  read -r -a f <<<"$rest"
  # f[0] is field 3 (state): utime = field 14 = f[11], stime f[12], cutime f[13], cstime f[14]
  awk -v u="${f[11]}" -v s="${f[12]}" -v cu="${f[13]}" -v cs="${f[14]}" -v t="$TICKS" \
    'BEGIN { printf "%.3f", (u + s + cu + cs) / t }'
}
# Nanoseconds on a CPU of PID's threads (schedstat: exact, where utime+stime count 10 ms ticks,
# so a minute's figure of ~0.1 s is ±10 %).
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%d", s }'; }
kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status" 2>/dev/null; }

sleep "$WARMUP_S"
kill -0 "$DAEMON" 2>/dev/null || { echo "serve_cost: vramd serve exited:"; cat "$TMP/daemon.log"; exit 2; }
V0=$(cpu_s "$DAEMON"); N0=$(cpu_ns "$DAEMON"); R0=$(cpu_s "$REF"); S0=$(cpu_s "$SIDECAR")
T0=${EPOCHREALTIME/,/.}
sleep "$DURATION_S"
V1=$(cpu_s "$DAEMON"); N1=$(cpu_ns "$DAEMON"); R1=$(cpu_s "$REF"); S1=$(cpu_s "$SIDECAR")
T1=${EPOCHREALTIME/,/.}
kill -0 "$DAEMON" 2>/dev/null || { echo "serve_cost: vramd serve exited:"; cat "$TMP/daemon.log"; exit 2; }
RSS=$(kib "$DAEMON" VmRSS); HWM=$(kib "$DAEMON" VmHWM)

# NVML calls by entry point (vramd's own count, /metrics): the process lists against memory reads.
curl -s -m 5 "http://127.0.0.1:$PORT/metrics" | grep '^vramd_nvml_calls_total' >"$TMP/nvml.txt"
# The daemon must really have been sampling: its status names the stand-ins.
STATUS_OK=no
if timeout 10 "$VRAMD" status --json --config "$TMP/vramd.toml" >"$TMP/status.json" 2>/dev/null &&
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); o={h["owner"] for h in s["gpus"][0]["holdings"]}; sys.exit(0 if {"comfyui","ollama","vllm","llamacpp"} <= o else 1)' "$TMP/status.json"; then
  STATUS_OK=yes
fi
if [ "$STATUS_OK" = no ]; then
  echo "serve_cost: the daemon's status does not name all four services; owners seen:"
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print([(h["owner"], h["source"]) for h in s["gpus"][0]["holdings"]])' "$TMP/status.json" 2>&1 | head -5
fi
NPROC=$(find /proc -maxdepth 1 -name '[0-9]*' | wc -l)

awk -v v0="$V0" -v v1="$V1" -v r0="$R0" -v r1="$R1" -v s0="$S0" -v s1="$S1" -v t0="$T0" -v t1="$T1" -v rss="$RSS" \
  -v hwm="$HWM" -v cpu_t="$CPU_TARGET_S_PER_H" -v rss_t="$RSS_TARGET_MIB" -v n="$NPROC" \
  -v ok="$STATUS_OK" -v mt="$MATCH" -v n0="$N0" -v n1="$N1" 'BEGIN {
  w = t1 - t0; v = (v1 - v0) * 3600 / w; r = (r1 - r0) * 3600 / w; sc = (s1 - s0) * 3600 / w
  vs = (n1 - n0) / 1e9 * 3600 / w
  printf "vramd serve cost: 1 s sampling, %.1f s measured after warm-up, %d processes on the host, 4 services matched by %s, daemon sampling: %s\n\n", w, n, mt, ok
  printf "  %-44s %12s %10s %10s\n", "process", "CPU s/hour", "RSS MiB", "HWM MiB"
  printf "  %-44s %12.2f %10.1f %10.1f\n", "vramd serve", v, rss / 1024, hwm / 1024
  printf "  %-44s %12.2f %10s %10s\n", "vramd serve, from its threads schedstat", vs, "-", "-"
  printf "  %-44s %12.2f %10s %10s\n", "seed sidecar: nvidia-smi + 4 curl /30s", sc, "-", "-"
  printf "  %-44s %12.2f %10s %10s\n", "reference: cat stat,status,cmdline,cgroup /1s", r, "-", "-"
  if (vs > 0) v = vs  # the exact figure, where the kernel keeps schedstat
  ratio = r > 0 ? v / r : 0
  sratio = sc > 0 ? v / sc : 0
  printf "\n  ratios: vramd CPU / sidecar CPU = %.2f; vramd CPU / /proc scan CPU = %.4f; vramd CPU / target (%g s/h) = %.2f; RSS / target (%g MiB) = %.2f\n",
    sratio, ratio, cpu_t, v / cpu_t, rss_t, rss / 1024 / rss_t
  cpu_v = v < cpu_t ? "within target" : "OVER target"
  rss_v = rss / 1024 < rss_t ? "within target" : "OVER target"
  printf "  verdict: CPU %s, RSS %s\n", cpu_v, rss_v
}'
echo
echo "  NVML calls (vramd's count since start):"
sed 's/^/    /' "$TMP/nvml.txt"

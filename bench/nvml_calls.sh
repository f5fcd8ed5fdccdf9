#!/usr/bin/env bash
# NVML calls of `vramd serve` at steady state, and how soon a new GPU process is named
# (issue "light on the driver"). Targets per GPU when nothing moves: at most 6 reads of the
# process lists a minute, 60 memory reads a minute (1 s sampling).
#
#   bench/nvml_calls.sh [BUILD_DIR]        (DURATION_S=60 WARMUP_S=5 NAMES=10 by default)
#
# Two daemons side by side on the same fake GPU (build/libnvidia-ml-fake.so, four stand-in GPU
# processes): `scan` with the defaults ([gpu] process_scan_threshold 32 MiB, interval 10 s) and
# `every` with process_scan_interval = sample_interval (the lists on every sample, as before).
# Their counts come from vramd_nvml_calls_total (vramd's own count) over the same DURATION_S
# window. Then NAMES times, a new process takes 1 GiB at a random moment, and the time until
# each daemon's /v1/status names it is measured (polled every 20 ms), in ms and in samples.
set -uo pipefail

BUILD_DIR=${1:-build}
DURATION_S=${DURATION_S:-60}
WARMUP_S=${WARMUP_S:-5}
NAMES=${NAMES:-10}
cd "$(dirname "$0")/.." || exit 2
VRAMD="$PWD/$BUILD_DIR/vramd"
FAKE_LIB="$PWD/$BUILD_DIR/libnvidia-ml-fake.so"
[ -x "$VRAMD" ] && [ -f "$FAKE_LIB" ] || { echo "nvml_calls: build first ($VRAMD, $FAKE_LIB)"; exit 2; }
command -v python3 >/dev/null || { echo "nvml_calls: python3 needed"; exit 2; }

TMP=$(mktemp -d /tmp/vramd-nvml-calls.XXXXXX) || exit 2
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

STANDINS=()
for _ in 1 2 3 4; do
  sleep 100000 &
  PIDS+=($!)
  STANDINS+=($!)
done
python3 - "$TMP/gpu.json" "${STANDINS[@]}" <<'PY'
import json, sys
path, pids = sys.argv[1], [int(p) for p in sys.argv[2:]]
GiB = 1 << 30
procs = [{"pid": p, "used": (i + 1) * GiB} for i, p in enumerate(pids)]
json.dump({"driver_version": "550.54.14", "gpus": [{"name": "NVIDIA GeForce RTX 3090",
           "uuid": "GPU-00000000-0000-0000-0000-000000000000", "total": 24 * GiB,
           "used": 512 * 1024 * 1024 + sum(p["used"] for p in procs), "utilization": 0,
           "processes": procs}]}, open(path, "w"))
PY

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
declare -A URL
for mode in scan every; do
  port=$(free_port)
  URL[$mode]="http://127.0.0.1:$port"
  mkdir -p "$TMP/$mode"
  extra=""
  [ "$mode" = every ] && extra='process_scan_interval = "1s"'
  cat >"$TMP/$mode/vramd.toml" <<TOML
[daemon]
listen = "127.0.0.1:$port"
state_dir = "$TMP/$mode"
sample_interval = "1s"

[gpu]
backend = "nvml"
$extra
TOML
  VRAMD_NVML_LIBRARY=$FAKE_LIB FAKE_NVML_STATE=$TMP/gpu.json \
    "$VRAMD" serve --config "$TMP/$mode/vramd.toml" >"$TMP/$mode/daemon.log" 2>&1 &
  PIDS+=($!)
done

sleep "$WARMUP_S"
for mode in scan every; do
  curl -s -m 5 "${URL[$mode]}/metrics" >"$TMP/$mode/m0" || { echo "nvml_calls: $mode did not answer"; cat "$TMP/$mode/daemon.log"; exit 2; }
done
T0=${EPOCHREALTIME/,/.}
sleep "$DURATION_S"
for mode in scan every; do curl -s -m 5 "${URL[$mode]}/metrics" >"$TMP/$mode/m1"; done
T1=${EPOCHREALTIME/,/.}

# New processes: each takes 1 GiB at a random moment; time until each daemon names it.
python3 - "$TMP" "$NAMES" "${URL[scan]}" "${URL[every]}" <<'PY' >"$TMP/names.txt"
import json, random, subprocess, sys, time, urllib.request
tmp, n, urls = sys.argv[1], int(sys.argv[2]), {"scan": sys.argv[3], "every": sys.argv[4]}
GiB = 1 << 30
state_path = f"{tmp}/gpu.json"
def update(f):
    s = json.load(open(state_path)); f(s)
    with open(state_path + ".tmp", "w") as o: json.dump(s, o)
    import os; os.replace(state_path + ".tmp", state_path)
def named(url, pid):
    s = json.load(urllib.request.urlopen(url + "/v1/status", timeout=5))
    return any(pid in h.get("pids", []) for h in s["gpus"][0]["holdings"])
delays = {"scan": [], "every": []}
for _ in range(n):
    time.sleep(random.uniform(0.5, 1.5))
    p = subprocess.Popen(["sleep", "100"])
    def add(s):
        s["gpus"][0]["processes"].append({"pid": p.pid, "used": GiB}); s["gpus"][0]["used"] += GiB
    update(add)
    t0 = time.monotonic(); left = set(urls)
    while left and time.monotonic() - t0 < 10:
        for m in list(left):
            if named(urls[m], p.pid):
                delays[m].append(time.monotonic() - t0); left.discard(m)
        time.sleep(0.02)
    for m in left: delays[m].append(float("inf"))
    def remove(s):
        s["gpus"][0]["processes"] = [x for x in s["gpus"][0]["processes"] if x["pid"] != p.pid]
        s["gpus"][0]["used"] -= GiB
    update(remove); p.kill(); p.wait()
    time.sleep(1.5)  # both see it go
for m, d in delays.items():
    d.sort()
    print(m, d[len(d) // 2], d[-1])
PY

python3 - "$TMP" "$T0" "$T1" <<'PY'
import re, sys
tmp, t0, t1 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
minutes = (t1 - t0) / 60
def counts(path):
    out = {}
    for line in open(path):
        m = re.match(r'vramd_nvml_calls_total\{function="([^"]+)"\} (\S+)', line)
        if m: out[m.group(1)] = float(m.group(2))
    return out
names = {l.split()[0]: (float(l.split()[1]), float(l.split()[2])) for l in open(f"{tmp}/names.txt")}
print(f"NVML calls of vramd serve, 1 GPU, 1 s sampling, {t1 - t0:.0f} s at steady state (per minute)\n")
rows = {}
for mode in ("scan", "every"):
    a, b = counts(f"{tmp}/{mode}/m0"), counts(f"{tmp}/{mode}/m1")
    rows[mode] = {f: (b.get(f, 0) - a.get(f, 0)) / minutes for f in set(a) | set(b)}
fns = sorted(set(rows["scan"]) | set(rows["every"]))
print(f"  {'function':48} {'scan (default)':>15} {'every sample':>13} {'ratio':>7}")
for f in fns:
    s, e = rows["scan"].get(f, 0), rows["every"].get(f, 0)
    if s == 0 and e == 0: continue
    print(f"  {f:48} {s:15.1f} {e:13.1f} {s / e if e else 0:7.2f}")
lists = {m: rows[m].get("nvmlDeviceGetComputeRunningProcesses_v3", 0) / 2 for m in rows}  # count + fetch a read
mem = {m: rows[m].get("nvmlDeviceGetMemoryInfo_v2", 0) for m in rows}
print(f"\n  reads of the process lists a minute (compute list: a count and a fetch each): "
      f"scan {lists['scan']:.1f}, every {lists['every']:.1f} (target <= 6: {lists['scan'] / 6:.2f} of it)")
print(f"  memory reads a minute: scan {mem['scan']:.1f} (target 60)")
for m in ("scan", "every"):
    med, worst = names[m]
    print(f"  a new 1 GiB process named after: {m:5} median {med * 1000:.0f} ms ({med:.2f} samples), "
          f"worst {worst * 1000:.0f} ms ({worst:.2f} samples)")
PY

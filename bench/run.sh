#!/usr/bin/env bash
# Runs every benchmark and prints the figures with their ratios (`make bench` calls this).
#
#   bench/run.sh [BUILD_DIR]     (default: build; needs vramd, vramd_bench, libnvidia-ml-fake.so)
#
# REPETITIONS (default 5) runs of each Google Benchmark case, reported as medians; SERVE_S
# (default 60) seconds of `vramd serve` for bench/serve_cost.sh; UNLOAD_REPS (default 3)
# repetitions of each case of vramd_unload_bench (~25 s each), run when that binary is built. Record the output in
# bench/RESULTS.md (one section per benchmark) with the date, machine, commit and command.
set -uo pipefail

BUILD_DIR=${1:-build}
REPETITIONS=${REPETITIONS:-5}
SERVE_S=${SERVE_S:-60}

cd "$(dirname "$0")/.." || exit 2
BENCH="$BUILD_DIR/vramd_bench"
[ -x "$BENCH" ] || { echo "bench: $BENCH missing (build it: ninja -C $BUILD_DIR vramd_bench)"; exit 2; }
command -v python3 >/dev/null || { echo "bench: python3 needed for the ratio table"; exit 2; }

TMP=$(mktemp -d /tmp/vramd-bench.XXXXXX) || exit 2
trap 'rm -rf "$TMP"' EXIT

echo "== machine: $(nproc) cores, $(uname -r); commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "== sample_bench: one sample (fake NVML + /proc scan + attribution), 2,000 processes; target < 2 ms"
"$BENCH" --benchmark_filter='-BM_Lease|BM_Ports' --benchmark_repetitions="$REPETITIONS" --benchmark_report_aggregates_only=true \
  --benchmark_out="$TMP/sample.json" --benchmark_out_format=json || exit 1
echo
python3 - "$TMP/sample.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
med = {}
for b in d["benchmarks"]:
    if b.get("aggregate_name") == "median":
        med[b["run_name"]] = b
def us(name):  # median CPU time in microseconds (the machine is shared: wall time is noisier)
    b = med.get(name)
    if not b: return None
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b["time_unit"]]
    return b["cpu_time"] * scale
def per_proc_us(name):
    b = med.get(name)
    return b["per_proc"] * 1e6 if b and "per_proc" in b else None  # counter in seconds
rows = [("BM_NvmlRead", "fake NVML read (reader kept open)"),
        ("BM_NvmlOpenAndRead", "fake NVML dlopen + read + dlclose"),
        ("BM_ScanFakeProcAll", "scan, fake /proc, all 2,000 (before)"),
        ("BM_ScanFakeProcGpu", "scan, fake /proc, GPU pids + ancestors"),
        ("BM_ScanFakeProcGpuCold", "  same, cache cold (new scanner)"),
        ("BM_ScanRealProcAll", "scan, real /proc, all (before)"),
        ("BM_ScanRealProcGpu", "scan, real /proc, 8 newest pids + ancestors"),
        ("BM_ArbiterHandleSampleAll", "Arbiter::handle, 2,000 processes (before)"),
        ("BM_ArbiterHandleSampleGpu", "Arbiter::handle, sample as taken now"),
        ("BM_FullSample", "full sample as the daemon takes it now"),
        ("BM_FullSampleAllProcesses", "full sample, all_processes (before)")]
def procs(name):
    b = med.get(name)
    return int(b["procs"]) if b and "procs" in b else None
print("  %-48s %12s %8s %14s" % ("case (medians of CPU time)", "time us", "procs", "us / process"))
for name, label in rows:
    t, p, n = us(name), per_proc_us(name), procs(name)
    print("  %-48s %12s %8s %14s" % (label, "%.1f" % t if t else "-", n if n else "-",
                                      "%.2f" % p if p else "-"))
full, old = us("BM_FullSample"), us("BM_FullSampleAllProcesses")
parts = [us(n) for n in ("BM_NvmlRead", "BM_ScanFakeProcGpu", "BM_ArbiterHandleSampleGpu")]
fake, real = per_proc_us("BM_ScanFakeProcAll"), per_proc_us("BM_ScanRealProcAll")
def ratio(label, a, b, fmt="%.2f"):
    if a and b: print("  %-46s= %s" % (label, fmt % (a / b)))
print()
ratio("full sample now / target (2,000 us)", full, 2000)
ratio("full sample before / target (2,000 us)", old, 2000)
ratio("full sample before / now", old, full, "%.1f")
ratio("scan before / now (fake /proc, warm)", us("BM_ScanFakeProcAll"), parts[1], "%.1f")
ratio("scan before / now (real /proc, warm)", us("BM_ScanRealProcAll"), us("BM_ScanRealProcGpu"), "%.1f")
ratio("scan cold / warm (fake /proc)", us("BM_ScanFakeProcGpuCold"), parts[1])
ratio("attribution before / now", us("BM_ArbiterHandleSampleAll"), parts[2], "%.1f")
ratio("NVML read share of the full sample now", parts[0], full)
ratio("scan share of the full sample now", parts[1], full)
ratio("attribution share of the full sample now", parts[2], full)
if full and all(parts): ratio("(nvml + scan + attribute) / full sample now", sum(parts), full)
ratio("real /proc / fake /proc, per process (all)", real, fake)
if full: print("  %-46s= %.2f" % ("full sample now x 3600 (CPU s/hour at 1 s)", full * 3600 / 1e6))
EOF
echo
echo "== ports_bench: the listening-port lookup of a sample, 1,000 extra sockets (500 listening)"
"$BENCH" --benchmark_filter=BM_Ports --benchmark_repetitions="$REPETITIONS" --benchmark_report_aggregates_only=true \
  --benchmark_out="$TMP/ports.json" --benchmark_out_format=json >/dev/null || exit 1
python3 - "$TMP/ports.json" <<'EOF'
import json, sys
scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
d = json.load(open(sys.argv[1]))["benchmarks"]
med = {b["run_name"]: b["cpu_time"] * scale[b["time_unit"]] for b in d if b.get("aggregate_name") == "median"}
wall = {b["run_name"]: b["real_time"] * scale[b["time_unit"]] for b in d if b.get("aggregate_name") == "median"}
for b in d:
    if b.get("error_occurred"): print("  skipped: %s: %s" % (b["name"], b.get("error_message")))
rows = [("BM_PortsProcNetTcp", "old: /proc/net/tcp{,6} + fd links"),
        ("BM_PortsNetlinkCached", "new: netlink LISTEN + cache (warm)"),
        ("BM_PortsNetlinkUncached", "netlink LISTEN + fd links every time"),
        ("BM_PortsTableProc", "socket table only: /proc/net/tcp{,6}"),
        ("BM_PortsTableNetlink", "socket table only: netlink LISTEN")]
print("  %-42s %12s %12s" % ("case (medians)", "CPU us", "wall us"))
for n, label in rows:
    print("  %-42s %12s %12s" % (label, "%.1f" % med[n] if n in med else "-", "%.1f" % wall[n] if n in wall else "-"))
def ratio(label, a, b):
    if a in med and b in med: print("  %-42s= %.1f" % (label, med[a] / med[b]))
ratio("old / new (CPU)", "BM_PortsProcNetTcp", "BM_PortsNetlinkCached")
ratio("old / netlink without cache (CPU)", "BM_PortsProcNetTcp", "BM_PortsNetlinkUncached")
ratio("table: /proc / netlink (CPU)", "BM_PortsTableProc", "BM_PortsTableNetlink")
EOF
echo
echo "== lease_bench: Arbiter::handle, 10,000 queued leases, 64 services; target < 1 ms per event"
"$BENCH" --benchmark_filter='BM_Lease|BM_Wake' --benchmark_repetitions="$REPETITIONS" --benchmark_report_aggregates_only=true \
  --benchmark_out="$TMP/lease.json" --benchmark_out_format=json >/dev/null || exit 1
python3 - "$TMP/lease.json" <<'EOF'
import json, sys
scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
med = {b["run_name"]: b["cpu_time"] * scale[b["time_unit"]] for b in json.load(open(sys.argv[1]))["benchmarks"]
       if b.get("aggregate_name") == "median" and not b.get("error_occurred")}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("error_occurred"): print("  skipped: %s: %s" % (b["name"], b.get("error_message")))
cases = ["Sample", "Tick", "Probe", "RequestQueues", "RequestGranted", "ReleaseGranted", "CancelQueued",
         "Wake"]
worlds = [("8 GPUs", "gpus:8/queued:{}/idle_gpu:0"), ("1 GPU", "gpus:1/queued:{}/idle_gpu:0"),
          ("8 GPUs, GPU 7 idle", "gpus:8/queued:{}/idle_gpu:1")]
print("  median CPU us per event (/ 1 ms target), and 10,000 / 100 queued")
for wname, args in worlds:
    print("  %-20s %22s %12s %10s" % (wname, "10,000 queued", "100 queued", "10k/100"))
    for c in cases:
        name = "BM_WakeRequested" if c == "Wake" else "BM_Lease" + c
        big, small = (med.get("%s/%s" % (name, args.format(n))) for n in (10000, 100))
        print("    %-18s %22s %12s %10s" % (c, "%.0f (%.2f)" % (big, big / 1000) if big else "-",
              "%.0f" % small if small else "-", "%.1f" % (big / small) if big and small else "-"))
EOF
echo
echo "== serve_cost: vramd serve at 1 s sampling; targets < 2 CPU s/hour, RSS < 16 MiB"
DURATION_S=$SERVE_S bench/serve_cost.sh "$BUILD_DIR"

UNLOAD_BENCH="$BUILD_DIR/vramd_unload_bench"
if [ -x "$UNLOAD_BENCH" ]; then
  echo
  echo "== unload_verdict: time from the unload call to the verdict, vramd vs 'wait 3 s, measure once';"
  echo "   targets: vramd's verdict right in every case, within 1 s of the memory settling"
  timeout 600 "$UNLOAD_BENCH" --reps "${UNLOAD_REPS:-3}" --build-dir "$BUILD_DIR"
else
  echo
  echo "== unload_verdict: skipped ($UNLOAD_BENCH missing; build it: ninja -C $BUILD_DIR vramd_unload_bench)"
fi

echo
echo "== lease_load: reclaim overhead (target < 50 ms) and 1,000 concurrent long-polling clients"
(ulimit -n 8192 2>/dev/null; timeout 300 python3 bench/lease_load.py "$BUILD_DIR")

echo
echo "== sim: every policy on every trace (vramd on the Pareto front) and the replay speed (< 2 s per policy)"
bench/sim.sh "$BUILD_DIR"

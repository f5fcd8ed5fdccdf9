#!/usr/bin/env bash
# The real-GPU check: vramd on a real NVIDIA GPU (real NVML), with real CUDA processes holding
# known amounts of memory. Run from the repo root on a machine with the NVIDIA driver and nvcc:
#
#   tests/gpu/run.sh
#
# Uses dist/vramd when it exists (`make dist` on another machine, copied here: then the GPU machine
# needs only the driver, nvcc and python3, and no network at all), else $BUILD_DIR/vramd, else
# builds it. Compiles tests/gpu/hold.cu, starts `vramd serve`
# on a temp config, measures the CUDA context overhead with `hold --gib 0`, starts a cudaMalloc
# holder and a cudaMallocAsync holder, and checks that vramd names each one's pid with its bytes
# (minus the context overhead) within TOLERANCE_PCT of what it allocated; then kills them and
# checks their holdings vanish within VANISH_SAMPLES samples. Reports the MIG mode; with MIG on
# the holders run in the first MIG instance with room (CUDA_VISIBLE_DEVICES=its MIG UUID) and
# every instance's figures are printed. Every compared figure is printed as a table: vramd's bytes
# for each holder against the driver's own per-process figure (nvidia-smi --query-compute-apps),
# which must agree within DRIVER_TOLERANCE_PCT (1%). Where NVIDIA's cuda-checkpoint is found
# ($CUDA_CHECKPOINT, else PATH), a preemptible `vramd run` job holding SUSPEND_GIB with a checked
# pattern is suspended for a lease of higher priority, resumed when it ends, and its memory
# checked word by word. Prints PASS or FAIL.
# Exit: 0 pass, 1 fail, 2 cannot run here (no nvcc, no GPU, no python3).
# See tests/gpu/README.md for the knobs (environment variables).
set -uo pipefail

SYNC_GIB=${SYNC_GIB:-2}
ASYNC_GIB=${ASYNC_GIB:-3}
TOLERANCE_PCT=${TOLERANCE_PCT:-5}
DRIVER_TOLERANCE_PCT=${DRIVER_TOLERANCE_PCT:-1}
SAMPLE_MS=${SAMPLE_MS:-500}
VANISH_SAMPLES=${VANISH_SAMPLES:-5}
SETTLE_TIMEOUT_S=${SETTLE_TIMEOUT_S:-60}
BUILD_DIR=${BUILD_DIR:-build}
CUDA_DEVICE=${CUDA_DEVICE:-0}
KEEP_TMP=${KEEP_TMP:-0}
# For checking this script without a GPU only: a ready hold program, and the fake NVML kept.
HOLD_BIN=${HOLD_BIN:-}
SUSPEND_GIB=${SUSPEND_GIB:-4}
CUDA_CHECKPOINT=${CUDA_CHECKPOINT:-$(command -v cuda-checkpoint || true)}
ALLOW_FAKE_NVML=${ALLOW_FAKE_NVML:-0}

cd "$(dirname "$0")/../.." || exit 2
REPO=$(pwd)

say() { printf '[gpu-test] %s\n' "$*"; }
die() { say "cannot run: $*"; exit 2; }
now() { printf '%s' "${EPOCHREALTIME/,/.}"; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

command -v python3 >/dev/null || die "python3 is needed to read the JSON"
NVCC=$(command -v nvcc || true)
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
[ -n "$NVCC" ] || [ -n "$HOLD_BIN" ] || die "nvcc not found (PATH or /usr/local/cuda/bin)"
if command -v nvidia-smi >/dev/null; then
  timeout 20 nvidia-smi -L >/dev/null 2>&1 || die "nvidia-smi -L fails: no GPU or driver not loaded"
fi

TMP=$(mktemp -d /tmp/vramd-gpu-test.XXXXXX) || die "mktemp"
DAEMON_PID=""
HOLDER_PIDS=()
RESULT="FAIL"

stop_pid() {  # TERM, then KILL after 3 s
  local pid=$1
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}

cleanup() {
  local pid
  for pid in "${HOLDER_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  [ -n "$DAEMON_PID" ] && stop_pid "$DAEMON_PID"
  if [ "$RESULT" != "PASS" ] && [ -f "$TMP/daemon.log" ]; then
    say "daemon log (last 30 lines):"
    tail -n 30 "$TMP/daemon.log" | sed 's/^/    /'
  fi
  if [ "$KEEP_TMP" = 1 ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'say "interrupted"; exit 1' INT TERM

# ---- 1. vramd ----
VRAMD=${VRAMD:-}
if [ -z "$VRAMD" ] && [ -x "$REPO/dist/vramd" ]; then VRAMD="$REPO/dist/vramd"; fi
[ -n "$VRAMD" ] || VRAMD="$REPO/$BUILD_DIR/vramd"
if [ -x "$VRAMD" ]; then
  say "using existing $VRAMD (delete it to rebuild)"
else
  say "building vramd: make BUILD=$BUILD_DIR (installs missing Debian packages with apt-get)"
  timeout 3600 make BUILD="$BUILD_DIR" >"$TMP/build.log" 2>&1 || {
    tail -n 40 "$TMP/build.log"
    die "make failed (no network for apt-get? build elsewhere and copy $BUILD_DIR/vramd here)"
  }
  [ -x "$VRAMD" ] || die "make finished but $VRAMD is missing"
fi

# ---- 2. hold ----
HOLD="$TMP/hold"
if [ -n "$HOLD_BIN" ]; then
  HOLD=$HOLD_BIN
else
  say "compiling tests/gpu/hold.cu with $NVCC"
  # -arch=native targets the GPU here; older nvcc lacks it, then the default arch (PTX JIT) is used.
  if ! timeout 600 "$NVCC" -O2 -arch=native -o "$HOLD" tests/gpu/hold.cu >"$TMP/nvcc.log" 2>&1; then
    timeout 600 "$NVCC" -O2 -o "$HOLD" tests/gpu/hold.cu >>"$TMP/nvcc.log" 2>&1 || {
      cat "$TMP/nvcc.log"
      die "nvcc failed"
    }
  fi
fi

# ---- 3. the daemon ----
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
URL="http://127.0.0.1:$PORT"
CONFIG="$TMP/vramd.toml"
mkdir -p "$TMP/state"
cat >"$CONFIG" <<EOF
[daemon]
listen = "127.0.0.1:$PORT"
state_dir = "$TMP/state"
sample_interval = "${SAMPLE_MS}ms"

[gpu]
backend = "nvml"
EOF
if [ -n "$CUDA_CHECKPOINT" ]; then
  printf 'cuda_checkpoint = "%s"\n' "$CUDA_CHECKPOINT" >>"$CONFIG"
fi
if [ "$ALLOW_FAKE_NVML" != 1 ]; then
  unset VRAMD_NVML_LIBRARY FAKE_NVML_STATE  # the real NVML, never the test double
fi
say "starting vramd serve on $URL (sampling every ${SAMPLE_MS} ms)"
"$VRAMD" serve --config "$CONFIG" >"$TMP/daemon.log" 2>&1 &
DAEMON_PID=$!

# Writes the daemon's status to $TMP/status.json. Fails when the daemon is gone or did not answer
# (`vramd status` would otherwise take a sample itself, which is not what is under test).
read_status() {
  kill -0 "$DAEMON_PID" 2>/dev/null || { say "vramd serve exited"; return 1; }
  timeout 10 "$VRAMD" status --json --config "$CONFIG" --url "$URL" \
    >"$TMP/status.json" 2>"$TMP/status.err" || return 1
  ! grep -q "not reachable" "$TMP/status.err"
}

# The helper that reads status.json. Commands:
#   sampled                    -> "yes" once the daemon has sampled
#   pid PID                    -> "HOLDING_BYTES NVML_BYTES SOURCE OWNER GPU_INDEX" or "absent"
#   absent PID...              -> "SAMPLED_AT PID:yes|no ..." (yes: no holding names PID)
#   gpu INDEX                  -> "NAME|DRIVER|TOTAL_BYTES" of that GPU (or GPU 0)
cat >"$TMP/q.py" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
cmd = sys.argv[2]
gpus = s.get("gpus") or []
if cmd == "sampled":
    print("yes" if s.get("sampled_at") and gpus else "no")
elif cmd == "pid":
    pid = int(sys.argv[3])
    for g in gpus:
        for h in g.get("holdings", []):
            if pid in h.get("pids", []):
                nvml = next((p.get("used_bytes") for p in g.get("processes", []) if p.get("pid") == pid), None)
                print(h["bytes"], "na" if nvml is None else nvml, h["source"], h["owner"].replace(" ", "_"),
                      g.get("label", g["index"]))
                sys.exit(0)
    print("absent")
elif cmd == "absent":  # "SAMPLED_AT_EPOCH_S PID:yes|no ...": which pids no holding names
    import datetime
    at = datetime.datetime.fromisoformat(s["sampled_at"].replace("Z", "+00:00")).timestamp()
    held = {p for g in gpus for h in g.get("holdings", []) for p in h.get("pids", [])}
    print("%.3f" % at, " ".join("%s:%s" % (p, "no" if int(p) in held else "yes") for p in sys.argv[3:]))
elif cmd == "mig":  # "PARENT_LABEL on|off" per card, then "instance LABEL UUID PROFILE TOTAL USED HELD FREE"
    for g in gpus:
        if g.get("parent") is None:
            print(g.get("label", g["index"]), "on" if g.get("mig_enabled") else "off")
    for g in gpus:
        if g.get("parent") is not None:
            held = sum(h["bytes"] for h in g.get("holdings", []))
            print("instance", g.get("label"), g.get("uuid") or "-", g.get("mig_profile") or "-",
                  g["total_bytes"], g["used_bytes"], held, g["free_bytes"])
elif cmd == "free":  # FREE_BYTES of the GPU labelled so
    g = next((g for g in gpus if str(g.get("label", g["index"])) == sys.argv[3]), {})
    print(g.get("free_bytes", 0))
elif cmd == "suspend":  # "offered|TOOL|FORM|WHY" of status's suspend
    o = s.get("suspend") or {}
    print("%s|%s|%s|%s" % ("yes" if o.get("offered") else "no", o.get("tool") or "-",
                           o.get("form") or "-", o.get("why") or ""))
elif cmd == "gpu":
    g = next((g for g in gpus if str(g.get("label", g["index"])) == sys.argv[3]), gpus[0] if gpus else {})
    print("%s|%s|%s" % (g.get("name", "?"), s.get("driver_version", "?"), g.get("total_bytes", 0)))
EOF
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3  # not a slow version-manager shim
q() { "$PY" "$TMP/q.py" "$TMP/status.json" "$@"; }

deadline=$(( $(date +%s) + 30 ))
until read_status && [ "$(q sampled)" = yes ]; do
  [ "$(date +%s)" -lt "$deadline" ] || { say "vramd gave no sample within 30 s"; exit 1; }
  kill -0 "$DAEMON_PID" 2>/dev/null || { say "vramd serve exited"; exit 1; }
  sleep 0.5
done
say "vramd is sampling"

# ---- MIG ----
MIG_LINES=$(q mig)
MIG_ON=no
while read -r label mode; do
  [ "$label" = instance ] && continue
  say "GPU $label: MIG $mode"
  [ "$mode" = on ] && MIG_ON=yes
done <<<"$MIG_LINES"
if [ "$MIG_ON" = yes ]; then
  # The holders go to the instance with the most free memory; CUDA sees it as device 0.
  read -r _ MIG_LABEL MIG_UUID _ <<<"$(grep '^instance ' <<<"$MIG_LINES" | sort -k8,8n | tail -n 1)"
  if [ -z "${MIG_UUID:-}" ] || [ "$MIG_UUID" = - ]; then die "MIG is on but vramd lists no instance"; fi
  say "holders run in MIG instance $MIG_LABEL ($MIG_UUID)"
  export CUDA_VISIBLE_DEVICES=$MIG_UUID
  CUDA_DEVICE=0
fi

# ---- 4. holders ----
# start_holder NAME ARGS...: starts hold, waits for its "held" line; sets HELD_PID.
start_holder() {
  local name=$1; shift
  CUDA_DEVICE_ORDER=PCI_BUS_ID "$HOLD" --device "$CUDA_DEVICE" "$@" >"$TMP/$name.out" 2>&1 &
  HELD_PID=$!
  HOLDER_PIDS+=("$HELD_PID")
  local deadline=$(( $(date +%s) + SETTLE_TIMEOUT_S ))
  until grep -q '^held ' "$TMP/$name.out"; do
    if ! kill -0 "$HELD_PID" 2>/dev/null || [ "$(date +%s)" -ge "$deadline" ]; then
      say "holder $name did not start:"; sed 's/^/    /' "$TMP/$name.out"; exit 1
    fi
    sleep 0.1
  done
  say "$name: $(cat "$TMP/$name.out")"
}

# wait_stable PID: waits until vramd shows PID with the same bytes in 3 status reads one sample
# apart; sets STABLE ("HOLDING_BYTES NVML_BYTES SOURCE OWNER GPU_INDEX").
wait_stable() {
  local pid=$1 last="" same=0 cur
  local deadline=$(( $(date +%s) + SETTLE_TIMEOUT_S ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    if read_status; then
      cur=$(q pid "$pid")
      if [ "$cur" != absent ] && [ "${cur%% *}" -gt 0 ] && [ "$cur" = "$last" ]; then
        same=$((same + 1))
        [ "$same" -ge 2 ] && { STABLE=$cur; return 0; }
      else
        same=0
      fi
      last=$cur
    fi
    sleep "$(awk -v ms="$SAMPLE_MS" 'BEGIN { print ms / 1000 }')"
  done
  say "pid $pid never showed stable bytes in vramd's status (last: ${last:-nothing})"
  return 1
}

start_holder ctx --gib 0
CTX_PID=$HELD_PID
wait_stable "$CTX_PID" || exit 1
CTX_STABLE=$STABLE
read -r CTX_BYTES _ _ _ GPU_INDEX <<<"$CTX_STABLE"
say "context overhead: $CTX_BYTES bytes (pid $CTX_PID)"

start_holder sync --gib "$SYNC_GIB"
SYNC_PID=$HELD_PID
start_holder async --gib "$ASYNC_GIB" --async
ASYNC_PID=$HELD_PID
wait_stable "$SYNC_PID" || exit 1
SYNC_STABLE=$STABLE
wait_stable "$ASYNC_PID" || exit 1
ASYNC_STABLE=$STABLE

read_status
IFS='|' read -r GPU_NAME DRIVER GPU_TOTAL <<<"$(q gpu "$GPU_INDEX")"

say "vramd status, for the record:"
timeout 10 "$VRAMD" status --config "$CONFIG" --url "$URL" 2>&1 | sed 's/^/    /'

# The driver's own figure for each holder, read beside vramd's (nvidia-smi talks to the driver
# itself; without it, the NVML figure vramd read is all there is).
driver_bytes() {  # driver_bytes PID -> bytes or "na"
  local pid=$1 line
  if command -v nvidia-smi >/dev/null; then
    line=$(timeout 20 nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
      awk -F', *' -v p="$pid" '$1 == p { print $2; exit }')
    case "$line" in
      ''|*N/A*|*Not*) echo na ;;
      *) awk -v m="$line" 'BEGIN { printf "%.0f", m * 1048576 }' ;;
    esac
  else
    echo na
  fi
}
declare -A DRIVER_B=()
for pid in "$CTX_PID" "$SYNC_PID" "$ASYNC_PID"; do DRIVER_B[$pid]=$(driver_bytes "$pid"); done
read_status
MIG_LINES=$(q mig)

# ---- 5. they end ----
# Each holder is killed; time to vanish = when the first sample without its holding was taken
# (the status's sampled_at), less when it was killed: polling overhead does not count.
KILL_T=$(now)
for pid in "$CTX_PID" "$SYNC_PID" "$ASYNC_PID"; do kill -KILL "$pid" 2>/dev/null; done
for pid in "$CTX_PID" "$SYNC_PID" "$ASYNC_PID"; do wait "$pid" 2>/dev/null; done  # no zombies
HOLDER_PIDS=()
declare -A GONE_S=()
vanish_limit=$(awk -v n="$VANISH_SAMPLES" -v ms="$SAMPLE_MS" 'BEGIN { print n * ms / 1000 }')
deadline=$(( $(date +%s) + 30 ))
while [ "$(date +%s)" -lt "$deadline" ] && [ "${#GONE_S[@]}" -lt 3 ]; do
  if read_status; then
    read -r at states <<<"$(q absent "$CTX_PID" "$SYNC_PID" "$ASYNC_PID")"
    for st in $states; do
      pid=${st%%:*}
      if [ "${st#*:}" = yes ] && [ -z "${GONE_S[$pid]:-}" ]; then
        GONE_S[$pid]=$(awk -v a="$at" -v k="$KILL_T" 'BEGIN { d = a - k; printf "%.2f", d < 0 ? 0 : d }')
      fi
    done
  fi
  sleep 0.1
done

# ---- 6. figures ----
FAILS=0
row() {  # row NAME GIB STABLE PID
  local name=$1 gib=$2 stable=$3 pid=$4 bytes nvml source owner
  read -r bytes nvml source owner _ <<<"$stable"
  local gone=${GONE_S[$pid]:-never}
  local verdict
  verdict=$(awk -v gib="$gib" -v b="$bytes" -v ctx="$CTX_BYTES" -v tol="$TOLERANCE_PCT" \
    -v gone="$gone" -v lim="$vanish_limit" 'BEGIN {
      want = gib * 1073741824; corr = b - ctx
      raw_err = want > 0 ? (b - want) * 100 / want : 0
      err = want > 0 ? (corr - want) * 100 / want : 0
      ok = (want == 0 || (err <= tol && err >= -tol)) && gone != "never" && gone + 0 <= lim
      printf "%.0f %.0f %.0f %+.2f %+.2f %s", want / 1048576, b / 1048576, corr / 1048576, raw_err, err, ok ? "ok" : "FAIL"
    }')
  local exp_mib raw_mib corr_mib raw_err err ok
  read -r exp_mib raw_mib corr_mib raw_err err ok <<<"$verdict"
  [ "$ok" = ok ] || FAILS=$((FAILS + 1))
  local nvml_mib=na
  [ "$nvml" != na ] && nvml_mib=$(( nvml / 1048576 ))
  if [ "$gib" = 0 ]; then corr_mib="-"; err="-"; fi
  printf '  %-6s %7s %9s %9s %9s %9s %6s %9s %8s %8s %-8s %s\n' "$name" "$pid" "$exp_mib" \
    "$nvml_mib" "$raw_mib" "$corr_mib" "$raw_err" "$err" "$gone" "$source" "$ok" "$owner"
}

echo
echo "vramd on a real GPU"
echo "  GPU:       $GPU_NAME (GPU $GPU_INDEX, $(( GPU_TOTAL / 1073741824 )) GiB), driver $DRIVER, MIG $MIG_ON"
echo "  vramd:     $("$VRAMD" version 2>/dev/null | head -n 1), sampling every ${SAMPLE_MS} ms"
echo "  context overhead (hold --gib 0): $(( CTX_BYTES / 1048576 )) MiB, subtracted from the others"
echo "  limits:    |error| <= ${TOLERANCE_PCT}% after the overhead; gone within ${VANISH_SAMPLES} samples (${vanish_limit} s)"
echo
printf '  %-6s %7s %9s %9s %9s %9s %6s %9s %8s %8s %-8s %s\n' holder pid "alloc" "nvml" \
  "vramd" "-ctx" "raw%" "error%" "gone_s" source verdict owner
printf '  %-6s %7s %9s %9s %9s %9s %6s %9s %8s\n' "" "" MiB MiB MiB MiB "" "" ""
row ctx 0 "$CTX_STABLE" "$CTX_PID"
row sync "$SYNC_GIB" "$SYNC_STABLE" "$SYNC_PID"
row async "$ASYNC_GIB" "$ASYNC_STABLE" "$ASYNC_PID"
echo
echo "  vramd against the driver, per process (limit ${DRIVER_TOLERANCE_PCT}%; nvidia-smi rounds to MiB):"
printf '  %-6s %7s %14s %14s %14s %8s %s\n' holder pid "vramd_bytes" "driver_bytes" "nvml_bytes" "diff%" verdict
drow() {  # drow NAME STABLE PID
  local name=$1 stable=$2 pid=$3 bytes nvml verdict
  read -r bytes nvml _ _ _ <<<"$stable"
  local drv=${DRIVER_B[$pid]:-na}
  # Without a driver figure, NVML's own (as vramd read it) is what vramd is held to.
  local ref=$drv
  [ "$ref" = na ] && ref=$nvml
  verdict=$(awk -v b="$bytes" -v r="$ref" -v tol="$DRIVER_TOLERANCE_PCT" 'BEGIN {
    if (r == "na" || r == 0) { print "- na"; exit }
    d = (b - r) * 100 / r
    printf "%+.3f %s", d, (d <= tol && d >= -tol) ? "ok" : "FAIL" }')
  local diff ok
  read -r diff ok <<<"$verdict"
  [ "$ok" = FAIL ] && FAILS=$((FAILS + 1))
  printf '  %-6s %7s %14s %14s %14s %8s %s\n' "$name" "$pid" "$bytes" "$drv" "$nvml" "$diff" "$ok"
}
drow ctx "$CTX_STABLE" "$CTX_PID"
drow sync "$SYNC_STABLE" "$SYNC_PID"
drow async "$ASYNC_STABLE" "$ASYNC_PID"
if [ "$MIG_ON" = yes ]; then
  echo
  echo "  MIG instances (while the holders ran; holders in $MIG_LABEL):"
  printf '  %-8s %-42s %-10s %9s %9s %9s %9s\n' label uuid profile "total" "used" "held" "free"
  printf '  %-8s %-42s %-10s %9s %9s %9s %9s\n' "" "" "" MiB MiB MiB MiB
  while read -r tag label uuid profile total used held free; do
    [ "$tag" = instance ] || continue
    printf '  %-8s %-42s %-10s %9s %9s %9s %9s\n' "$label" "$uuid" "$profile" \
      $(( total / 1048576 )) $(( used / 1048576 )) $(( held / 1048576 )) $(( free / 1048576 ))
  done <<<"$MIG_LINES"
fi

# ---- 7. suspend (cuda-checkpoint) ----
# api METHOD PATH [BODY]: vramd's API; prints its JSON answer (or {"error": ...}).
cat >"$TMP/api.py" <<'EOF'
import json, sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1] + sys.argv[3], method=sys.argv[2],
                             data=sys.argv[4].encode() if len(sys.argv) > 4 else None,
                             headers={"Content-Type": "application/json"})
try:
    print(urllib.request.urlopen(req, timeout=30).read().decode())
except urllib.error.HTTPError as e:
    print(e.read().decode())
except Exception as e:
    print(json.dumps({"error": str(e)}))
EOF
api() { "$PY" "$TMP/api.py" "$URL" "$@"; }
field() {  # field KEY: that key of the JSON on stdin ("" when absent)
  "$PY" -c 'import json, sys
try:
    v = json.load(sys.stdin)
except ValueError:
    v = None
print("" if not isinstance(v, dict) or v.get(sys.argv[1]) is None else v[sys.argv[1]])' "$1"
}
lease_state() { api GET "/v1/leases/$1" | field state; }
wait_lease() {  # wait_lease ID STATE SECONDS
  local deadline=$(( $(date +%s) + $3 ))
  until [ "$(lease_state "$1")" = "$2" ]; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}
event_message() {  # event_message TYPE: the message of the last event of that type
  api GET "/v1/events?limit=500" | "$PY" -c 'import json, sys
evs = [e for e in json.load(sys.stdin).get("events", []) if e.get("type") == sys.argv[1]]
print(evs[-1]["message"] if evs else "")' "$1"
}

SUSPEND_ROW=""
suspend_check() {
  read_status || { SUSPEND_ROW="the daemon did not answer"; return 1; }
  local offered tool form why
  IFS='|' read -r offered tool form why <<<"$(q suspend)"
  if [ "$offered" != yes ]; then
    SUSPEND_ROW="not run: ${why:-suspend is not offered}"
    return 0
  fi
  say "suspend: $tool offers the $form form; a preemptible job of ${SUSPEND_GIB} GiB"
  "$VRAMD" run --url "$URL" --preemptible --vram "$((SUSPEND_GIB + 1))GiB" --gpu "$GPU_INDEX" \
    --label gpu-suspend --no-cuda-env -- \
    env CUDA_DEVICE_ORDER=PCI_BUS_ID "$HOLD" --device "$CUDA_DEVICE" --gib "$SUSPEND_GIB" --pattern \
    >"$TMP/suspend.out" 2>&1 &
  local run_pid=$!
  local deadline=$(( $(date +%s) + SETTLE_TIMEOUT_S ))
  until grep -q '^held ' "$TMP/suspend.out"; do
    if ! kill -0 "$run_pid" 2>/dev/null || [ "$(date +%s)" -ge "$deadline" ]; then
      sed 's/^/    /' "$TMP/suspend.out"
      SUSPEND_ROW="the job did not start"
      return 1
    fi
    sleep 0.1
  done
  local pid
  pid=$(sed -n 's/^held .* pid \([0-9]*\).*/\1/p' "$TMP/suspend.out" | head -n 1)
  HOLDER_PIDS+=("$pid")
  wait_stable "$pid" || { SUSPEND_ROW="the job's bytes never showed"; return 1; }
  local before
  read -r before _ <<<"$STABLE"
  local id
  id=$(api GET /v1/leases | "$PY" -c 'import json, sys
print(next((l["id"] for l in json.load(sys.stdin)["leases"] if l.get("label") == "gpu-suspend"), ""))')
  [ -n "$id" ] || { SUSPEND_ROW="no lease labelled gpu-suspend"; return 1; }
  # A lease of higher priority that fits only without the job: vramd suspends the job for it.
  read_status
  local free want urgent
  free=$(q free "$GPU_INDEX")
  want=$(( free + before / 2 ))
  local gpu_json="\"$GPU_INDEX\""
  [[ "$GPU_INDEX" =~ ^[0-9]+$ ]] && gpu_json=$GPU_INDEX
  urgent=$(api POST /v1/leases "{\"vram\": $want, \"priority\": 10, \"gpu\": $gpu_json, \"label\": \"urgent\", \"holder\": \"gpu-test\", \"pid\": $$}" | field id)
  [ -n "$urgent" ] || { SUSPEND_ROW="the lease of higher priority was refused"; return 1; }
  local asked_t
  asked_t=$(now)
  if ! wait_lease "$id" suspended 180; then
    SUSPEND_ROW="not suspended: $(api GET "/v1/leases/$id" | field suspend_refused) $(event_message lease.suspend_failed)"
    return 1
  fi
  local suspend_wall
  suspend_wall=$(elapsed "$asked_t")
  wait_lease "$urgent" granted 30 || { SUSPEND_ROW="suspended, but the other lease was not granted"; return 1; }
  read_status
  local gone driver_gone=na
  if [ "$(q pid "$pid")" = absent ]; then gone=yes; else gone=no; fi
  if command -v nvidia-smi >/dev/null; then
    if [ "$(driver_bytes "$pid")" = na ]; then driver_gone=yes; else driver_gone=no; fi
  fi
  local suspended_msg
  suspended_msg=$(event_message lease.suspended)
  kill -0 "$pid" 2>/dev/null || { SUSPEND_ROW="the job died while suspended"; return 1; }
  # The other lease ends: the job resumes on its GPU, with its bytes.
  local ended_t
  ended_t=$(now)
  api DELETE "/v1/leases/$urgent" >/dev/null
  if ! wait_lease "$id" granted 180; then
    SUSPEND_ROW="not resumed: $(event_message lease.resume_failed)"
    return 1
  fi
  local resume_wall
  resume_wall=$(elapsed "$ended_t")
  wait_stable "$pid" || { SUSPEND_ROW="its bytes never came back"; return 1; }
  local after
  read -r after _ <<<"$STABLE"
  local resumed_msg
  resumed_msg=$(event_message lease.resumed)
  # Every word it wrote reads the same after host RAM and back.
  kill -USR1 "$pid"
  local checked=""
  deadline=$(( $(date +%s) + 60 ))
  until checked=$(grep -m1 '^check' "$TMP/suspend.out"); [ -n "$checked" ]; do
    [ "$(date +%s)" -lt "$deadline" ] || break
    sleep 0.2
  done
  kill -TERM "$pid" 2>/dev/null
  wait "$run_pid"
  local run_exit=$?
  HOLDER_PIDS=()
  local wrong out_s back_s
  wrong=$(sed -n 's/^checked [0-9]* words: \([0-9]*\) wrong$/\1/p' <<<"$checked")
  out_s=$(sed -n 's/.* in \([0-9.]*\) s$/\1/p' <<<"$suspended_msg")
  back_s=$(sed -n 's/.* back in \([0-9.]*\) s$/\1/p' <<<"$resumed_msg")
  local verdict=ok
  awk -v a="$after" -v b="$before" -v t="$TOLERANCE_PCT" \
    'BEGIN { d = (a - b) * 100 / b; exit !(d <= t && d >= -t) }' || verdict=FAIL
  { [ "$gone" = yes ] && [ "$driver_gone" != no ] && [ "$wrong" = 0 ] && [ "$run_exit" = 0 ]; } ||
    verdict=FAIL
  SUSPEND_ROW=$(printf '%7s %9s %7s %7s %5s %5s %7s %7s %9s %9s %5s %s' "$pid" \
    $(( before / 1048576 )) "${out_s:-?}" "$suspend_wall" "$gone" "$driver_gone" "${back_s:-?}" \
    "$resume_wall" $(( after / 1048576 )) "${wrong:-?}" "$run_exit" "$verdict")
  [ "$verdict" = ok ]
}
SUSPEND_OK=yes
if [ -z "$CUDA_CHECKPOINT" ]; then
  SUSPEND_ROW="not run: no cuda-checkpoint (PATH, or \$CUDA_CHECKPOINT)"
elif ! suspend_check; then
  SUSPEND_OK=no
fi
echo
echo "  suspend: a preemptible ${SUSPEND_GIB} GiB job suspended for a lease of higher priority, then"
echo "  resumed when it ended (${CUDA_CHECKPOINT:-no cuda-checkpoint}); out_s/back_s: the utility's"
echo "  seconds, wall_s: from the ask to vramd's verdict; gone: vramd's and the driver's lists:"
printf '  %7s %9s %7s %7s %5s %5s %7s %7s %9s %9s %5s %s\n' pid held out_s wall_s gone drv \
  back_s wall_s back wrong exit verdict
printf '  %7s %9s %7s %7s %5s %5s %7s %7s %9s %9s\n' "" MiB "" "" "" "" "" "" MiB words
case "$SUSPEND_ROW" in
  "not run:"*) echo "  $SUSPEND_ROW" ;;
  *)
    if [ "$SUSPEND_OK" = yes ]; then
      echo "  $SUSPEND_ROW"
    else
      echo "  FAIL: $SUSPEND_ROW"
      FAILS=$((FAILS + 1))
    fi
    ;;
esac

echo
if [ "$FAILS" -eq 0 ]; then RESULT=PASS; else RESULT=FAIL; fi
echo "$RESULT"
[ "$RESULT" = PASS ]

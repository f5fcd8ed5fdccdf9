#!/usr/bin/env bash
# Runs every libFuzzer target of a VRAMD_FUZZ build for SECONDS each (tests/fuzz/README.md).
#   tests/fuzz/run.sh BUILD_DIR SECONDS [TARGET...]
# Each starts from its checked-in seeds (tests/fuzz/corpus/TARGET, never written to) plus what
# earlier runs in BUILD_DIR found (BUILD_DIR/fuzz-corpus/TARGET). A crash, leak or timeout
# leaves its input in BUILD_DIR/fuzz-crashes/ and fails the run. Prints one line per target.
set -uo pipefail
build=${1:?build dir}
seconds=${2:?seconds per target}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || read -r -a targets < "$build/fuzz-targets.txt"
mkdir -p "$build/fuzz-crashes"
failed=0
printf '%-16s %10s %9s %7s %s\n' target executions exec/s corpus result
for t in "${targets[@]}"; do
  work="$build/fuzz-corpus/$t"
  mkdir -p "$work"
  log="$build/fuzz-$t.log"
  "$build/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$build/fuzz-crashes/$t-" \
    "$work" "$here/corpus/$t" > "$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  size=$(ls "$work" | wc -l)
  result=ok
  if [ $rc -ne 0 ]; then
    result="FAILED (rc $rc, see $log)"
    failed=1
  fi
  printf '%-16s %10s %9s %7s %s\n' "$t" "${execs:-?}" "${rate:-?}" "$size" "$result"
done
exit $failed

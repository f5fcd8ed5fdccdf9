#!/usr/bin/env bash
# Every policy on every trace (docs/sim.md), and the replay speed on a 24 h, ~50,000-event day.
#
#   bench/sim.sh [BUILD_DIR] [--write]   (default: build; needs BUILD_DIR/vramd only)
#
# Checks first that bench/traces/*.jsonl are what the generator gives for seed 1, then runs the
# three traces at seed 1 (the ones the policy was looked at on) and seeds 2 and 3 (not looked at),
# every policy, then vramd beside its variants (vramd:fixed-depth, vramd:prewarm).
# Prints the markdown; --write also puts it into bench/RESULTS.md between the sim markers.
# Exits 1 when a baseline beats vramd on job wait p95 and reload seconds at once on any trace.
set -euo pipefail

BUILD_DIR=${1:-build}
WRITE=${2:-}
cd "$(dirname "$0")/.." || exit 2
VRAMD="$BUILD_DIR/vramd"
[ -x "$VRAMD" ] || { echo "bench/sim.sh: $VRAMD missing (ninja -C $BUILD_DIR vramd)"; exit 2; }
TMP=$(mktemp -d /tmp/vramd-sim.XXXXXX) || exit 2
trap 'rm -rf "$TMP"' EXIT

TRACES="homelab:homelab-day agent:agent-runner lab:multi-gpu-lab"
for pair in $TRACES; do
  gen=${pair%%:*} file=bench/traces/${pair#*:}.jsonl
  "$VRAMD" sim --generate "$gen" --seed 1 > "$TMP/check.jsonl"
  cmp -s "$TMP/check.jsonl" "$file" || { echo "bench/sim.sh: $file is not what --generate $gen --seed 1 gives"; exit 1; }
done

dominated=0
{
  echo "### $(date -u +%Y-%m-%d), $(nproc) cores, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo
  for pair in $TRACES; do
    gen=${pair%%:*} name=${pair#*:}
    for seed in 1 2 3; do
      if [ "$seed" = 1 ]; then file=bench/traces/$name.jsonl; else
        file=$TMP/$name-$seed.jsonl; "$VRAMD" sim --generate "$gen" --seed "$seed" > "$file"; fi
      echo "#### $name, seed $seed$([ "$seed" = 1 ] && echo " (bench/traces/$name.jsonl)" || echo " (--generate $gen --seed $seed)")"
      echo
      "$VRAMD" sim "$file" --markdown | tail -n +3 > "$TMP/out.md"
      grep -q '^vramd: dominated' "$TMP/out.md" && dominated=1
      cat "$TMP/out.md"
      echo
      # Its parts: the depth of each sleep (vs. fixed at level 1) and prewarm (vs. off).
      echo "vramd's parts (docs/sim.md \"Variants\"):"
      echo
      "$VRAMD" sim "$file" --policy vramd --policy vramd:fixed-depth --policy vramd:prewarm \
        --markdown | tail -n +3 | grep '^|'
      echo
    done
  done
  echo "#### Replay speed: --generate stress --seed 1 (24 h), target < 2 s per policy"
  echo
  "$VRAMD" sim --generate stress --seed 1 > "$TMP/stress.jsonl"
  "$VRAMD" sim "$TMP/stress.jsonl" --json > "$TMP/stress.json"
  events=$(grep -m1 '"events"' "$TMP/stress.json" | tr -dc '0-9')
  echo "$events requests and jobs. Wall time of each replay, measured in one run:"
  echo
  echo "| policy | wall s |"
  echo "|---|---:|"
  paste -d' ' <(grep '"policy"' "$TMP/stress.json" | cut -d'"' -f4) \
              <(grep '"wall_s"' "$TMP/stress.json" | tr -dc '0-9.\n') |
    while read -r p s; do echo "| $p | $s |"; done
  echo
} > "$TMP/section.md"

cat "$TMP/section.md"
if [ "$WRITE" = --write ]; then
  # The newest run goes first, after the section's header (everything up to the begin marker).
  awk -v run="$TMP/section.md" '
    { print }
    /^<!-- sim:runs -->$/ { while ((getline l < run) > 0) print l }
  ' bench/RESULTS.md > "$TMP/results.md"
  grep -q '^<!-- sim:runs -->$' bench/RESULTS.md || { echo "bench/sim.sh: no '<!-- sim:runs -->' in bench/RESULTS.md"; exit 2; }
  cp "$TMP/results.md" bench/RESULTS.md
  echo "bench/sim.sh: wrote the run into bench/RESULTS.md"
fi
[ "$dominated" = 0 ] || { echo "bench/sim.sh: a baseline dominates vramd on some trace"; exit 1; }

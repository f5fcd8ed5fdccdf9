#!/usr/bin/env bash
# Suspend instead of wait (issue 28): vramd beside its no-suspend ablation and two baselines on
# bench/traces/preemptible-batch.jsonl (an evening on one 24 GiB card: three preemptible batch
# jobs of 14-16 GiB, 40-90 min each, and bursts of chat and image requests), in one run.
#
#   bench/suspend.sh [BUILD_DIR]     (default: build; needs BUILD_DIR/vramd only)
#
# Prints the markdown table for bench/RESULTS.md ("suspend").
set -euo pipefail
BUILD_DIR=${1:-build}
cd "$(dirname "$0")/.." || exit 2
VRAMD="$BUILD_DIR/vramd"
[ -x "$VRAMD" ] || { echo "bench/suspend.sh: $VRAMD missing (ninja -C $BUILD_DIR vramd)"; exit 2; }
echo "### $(date -u +%Y-%m-%d), $(nproc) cores, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo
"$VRAMD" sim bench/traces/preemptible-batch.jsonl --policy vramd --policy vramd:no-suspend \
  --policy ttl:300s --policy ollama --markdown | tail -n +3 | grep '^|'

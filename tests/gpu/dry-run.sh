#!/usr/bin/env bash
# Runs tests/gpu/run.sh without a GPU: the fake libnvidia-ml and fake nvidia-smi serve a state
# file, and tests/gpu/fake_hold.py stands in for the CUDA holder. Checks the script itself (its
# tables, the MIG path, the comparison with the driver), not vramd on hardware.
# Usage: tests/gpu/dry-run.sh [mig]   (BUILD_DIR=build by default; `make` first)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
tmp=$(mktemp -d /tmp/vramd-gpu-dry.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
if [ "${1:-}" = mig ]; then
  cat >"$tmp/state.json" <<'JSON'
{"driver_version": "590.48.01", "privileged": false,
 "gpus": [{"name": "NVIDIA H200", "uuid": "GPU-00000000-0000-0000-0000-000000000000",
   "total": 150754820096, "used": 0,
   "mig_devices": [
     {"gi": 2, "ci": 0, "uuid": "MIG-aaaaaaaa-0000-5000-8000-000000000000", "profile": "3g.71gb",
      "total": 74893950976, "used": 17825792, "processes": []},
     {"gi": 9, "ci": 0, "uuid": "MIG-cccccccc-0000-5000-8000-000000000000", "profile": "1g.18gb",
      "total": 17179869184, "used": 9437184, "processes": []}]}]}
JSON
else
  cat >"$tmp/state.json" <<'JSON'
{"driver_version": "550.54.14",
 "gpus": [{"name": "NVIDIA GeForce RTX 3090", "uuid": "GPU-0000aaaa", "total": 25769803776,
           "used": 419430400, "processes": []}]}
JSON
fi
export FAKE_NVML_STATE=$tmp/state.json
export VRAMD_NVML_LIBRARY=$PWD/$build/libnvidia-ml-fake.so
export PATH=$PWD/$build/fake-bin:$PATH
HOLD_BIN=$PWD/tests/gpu/fake_hold.py ALLOW_FAKE_NVML=1 BUILD_DIR=$build tests/gpu/run.sh

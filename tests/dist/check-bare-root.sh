#!/usr/bin/env bash
# Runs dist/ in a minimal Debian 12 root (debootstrap --variant=minbase: no compiler, no -dev
# packages, no libraries but what minbase's own tools need) and checks that `vramd status`
# answers with a clear error when no daemon runs, that `vramd demo` starts there and serves
# the status of its simulated GPU, and that `vramd status` then reads it.
# Usage: check-bare-root.sh DIST_DIR ROOT_CACHE. Needs root and debootstrap (exit 77 without);
# builds the root once from deb.debian.org (the network is needed only then).
set -euo pipefail
dist=$(realpath "${1:-dist}")
root=${2:-build-dist/bookworm-root}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [[ $(id -u) -ne 0 ]]; then echo "skip: needs root (chroot)"; exit 77; fi
if ! command -v debootstrap >/dev/null; then echo "skip: debootstrap not installed"; exit 77; fi
[[ -x "$dist/vramd" ]] || { echo "FAIL: $dist/vramd missing (make dist)"; exit 1; }
if [[ ! -x "$root/bin/sh" ]]; then
  echo "building $root (debootstrap minbase bookworm from $mirror)"
  mkdir -p "$root"
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 ||
    { echo "FAIL: debootstrap (see $root.log)"; exit 1; }
fi
rm -rf "$root/opt/vramd"
mkdir -p "$root/opt/vramd"
cp -a "$dist/." "$root/opt/vramd/"
mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
trap 'umount "$root/proc" 2>/dev/null || true' EXIT
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }

echo "--- in the root, vramd needs:"
in_root ldd /opt/vramd/vramd
in_root /opt/vramd/vramd --version
set +e
out=$(in_root /opt/vramd/vramd status --url http://127.0.0.1:7971 2>&1)
rc=$?
set -e
echo "vramd status (no daemon): exit $rc: $out"
[[ $rc -ne 0 && -n "$out" ]] || { echo "FAIL: status without a daemon should fail clearly"; exit 1; }

# exec: $! is then vramd itself (chroot and env exec too), which stops its stand-ins on TERM.
(exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  /opt/vramd/vramd demo --listen 127.0.0.1:7971 --duration 20) >"$root.demo.log" 2>&1 &
demo=$!
ok=0
for _ in $(seq 1 30); do
  sleep 0.5
  if out=$(in_root /opt/vramd/vramd status --url http://127.0.0.1:7971 2>&1) &&
     grep -q "GPU 0" <<<"$out"; then
    ok=1
    break
  fi
done
kill "$demo" 2>/dev/null || true
wait "$demo" 2>/dev/null || true
echo "--- vramd status against vramd demo in the bare root:"
echo "$out"
if [[ $ok -ne 1 ]]; then
  echo "FAIL: vramd demo did not serve a status; its log:"
  cat "$root.demo.log"
  exit 1
fi
echo "PASS: dist/ runs in a minimal Debian 12 root"

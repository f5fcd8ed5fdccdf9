#!/usr/bin/env bash
# Checks that the binaries in DIR (default dist/) need nothing but glibc: every shared library
# ldd names is one of glibc's, and no symbol asks for a glibc newer than Debian 12's (2.36).
# Exit 77 (skipped) when DIR has no vramd: `make dist` builds it.
set -euo pipefail
dir=${1:-dist}
max_glibc=2.36
if [[ ! -x "$dir/vramd" ]]; then
  echo "skip: $dir/vramd is not built (make dist)"
  exit 77
fi
status=0
for f in "$dir/vramd" "$dir/fake-gpu-server" "$dir/libnvidia-ml-fake.so"; do
  [[ -e "$f" ]] || { echo "FAIL: $f missing"; status=1; continue; }
  # linux-vdso and ld-linux come with the kernel and glibc; the rest must be glibc's own.
  others=$(ldd "$f" | awk '{print $1}' |
    grep -Ev '^(linux-vdso\.so\.1|/lib64/ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1)$' || true)
  if [[ -n "$others" ]]; then
    echo "FAIL: $f needs non-glibc libraries: ${others//$'\n'/ }"
    status=1
  fi
  newest=$(objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
  if [[ -n "$newest" && "$(printf '%s\n%s\n' "$newest" "$max_glibc" | sort -V | tail -n 1)" != "$max_glibc" ]]; then
    echo "FAIL: $f needs glibc $newest (newer than $max_glibc)"
    status=1
  fi
  echo "$f: $(ldd "$f" | awk '{print $1}' | tr '\n' ' ')(glibc >= ${newest:-?})"
done
# The dashboard is inside the binary, not beside it.
if ! grep -q 'uPlot' "$dir/vramd"; then
  echo "FAIL: $dir/vramd has no dashboard embedded"
  status=1
fi
exit $status

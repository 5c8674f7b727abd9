#!/bin/sh
# Run a command as on an AVX2-only x86 CPU (no AVX-512, no VNNI), for benchmarks: README.md.
#   bench/avx2_only/run.sh .venv/bin/python bench/guard_bench.py --latency --cpu-note "..."
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -shared -fPIC -o "$work/cpuid_avx2.so" "$here/cpuid_avx2.c"
grep -q ' cpuid_fault' /proc/cpuinfo || { echo "run.sh: this CPU has no CPUID faulting (cpuid_fault)" >&2; exit 2; }
sed -E 's/ (avx512[a-z0-9_]*|avx_vnni|amx[a-z0-9_]*)//g' /proc/cpuinfo > "$work/cpuinfo"
unshare -m sh -c 'w=$1; shift; mount --bind "$w/cpuinfo" /proc/cpuinfo && LD_PRELOAD="$w/cpuid_avx2.so" "$@"' sh "$work" "$@"

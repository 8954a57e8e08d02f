#!/usr/bin/env bash
# bench-alternate.sh: compare builds of a package's benchmarks on this
# noisy machine. Runs each compiled test binary in turn, N times, and
# prints per benchmark and binary the median ns/op (with its range) and
# the median of the cpu-ns/op metric where the benchmark reports one.
#
# usage: bench/scripts/bench-alternate.sh 'BENCH REGEXP' N BINARY...
#        each BINARY from `go test -c -o BINARY ./PKG`, one per variant;
#        they run in the package directory of the first (PKG below).
# env:   PKG (package directory to run in; default transport)
#        BENCHTIME (-test.benchtime; default 20000x)
set -euo pipefail
re=${1:?usage: $0 'BENCH REGEXP' N BINARY...}
n=${2:?usage: $0 'BENCH REGEXP' N BINARY...}
shift 2
[ $# -gt 0 ] || { echo "usage: $0 'BENCH REGEXP' N BINARY..." >&2; exit 1; }
bins=()
for b in "$@"; do bins+=("$(realpath "$b")"); done
cd "$(dirname "$0")/../../${PKG:-transport}"
for i in $(seq 1 "$n"); do
	for b in "${bins[@]}"; do
		"$b" -test.run '^$' -test.bench "$re" -test.benchtime "${BENCHTIME:-20000x}" | awk -v v="$(basename "$b")" '
		/^Benchmark/ {
			cpu = ""
			for (i = 4; i <= NF; i++) if ($i == "cpu-ns/op") cpu = $(i - 1)
			print v, $1, $3, cpu
		}'
	done
done | python3 -c '
import collections, statistics, sys
runs = collections.defaultdict(lambda: ([], []))
for line in sys.stdin:
    f = line.split()
    runs[(f[1], f[0])][0].append(float(f[2]))
    if len(f) > 3:
        runs[(f[1], f[0])][1].append(float(f[3]))
for (bench, variant), (ns, cpu) in sorted(runs.items()):
    c = f"  cpu-ns/op median {statistics.median(cpu):.0f}" if cpu else ""
    print(f"{bench} {variant}: {len(ns)} runs, ns/op median {statistics.median(ns):.0f} ({min(ns):.0f}-{max(ns):.0f}){c}")
'

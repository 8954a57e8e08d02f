#!/usr/bin/env bash
# testbed-perf-ratio.sh: braid perf over every path of an emulated testbed
# against k plain TCP connections striped by hand (braid perf
# --tcp-baseline, one connection per path), alternating, in one run.
# Prints one line per repetition: both rates (Mbit/s) and braid's ratio.
# Needs root (network namespaces); the testbed gets a name of its own and
# is removed on exit, failure included.
#
# usage: bench/scripts/testbed-perf-ratio.sh NETS [reps] [seconds] [extra braid perf client flags]
#        NETS is braid testbed's --nets, e.g. 250M,250M,250M,250M
# env:   BRAID (braid binary; default: go build ./cmd/braid into a temp dir)
#        BRAID_OLD (optional: a second braid binary, run as "old" in the
#        same repetitions, to compare two builds side by side)
set -euo pipefail
nets=${1:?usage: $0 NETS [reps] [seconds] [braid perf flags]}
reps=${2:-3}
secs=${3:-5}
shift $(( $# > 3 ? 3 : $# ))
extra=("$@")
[ "$(id -u)" = 0 ] || { echo "needs root: it creates network namespaces" >&2; exit 1; }
command -v jq >/dev/null || { echo "jq is required (apt-get install jq)" >&2; exit 1; }
tmp=$(mktemp -d)
name=pr$$
pids=()
if [ -z "${BRAID:-}" ]; then
	(cd "$(dirname "$0")/../.." && go build -o "$tmp/braid" ./cmd/braid)
	BRAID=$tmp/braid
fi
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	"$BRAID" testbed down --name $name >/dev/null 2>&1 || true
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
export BRAID_KEY=${BRAID_KEY:-testbed-perf-ratio-benchmark-key-0123456789}

# Full duplex, as the bulk figures this script made were measured (each
# direction its own rate; the testbed's default is half duplex now).
"$BRAID" testbed up --name $name --hosts a,b --nets "$nets" --full-duplex >/dev/null
addrs=$("$BRAID" testbed show --name $name | grep -o '10\.[0-9]*\.0\.2' | sort -u | paste -sd,)
"$BRAID" testbed exec --name $name b -- "$BRAID" perf -s -p 5500 --insecure-plaintext >"$tmp/srv.log" 2>&1 &
pids+=($!)
impls="tcp braid"
if [ -n "${BRAID_OLD:-}" ]; then
	"$BRAID" testbed exec --name $name b -- "$BRAID_OLD" perf -s -p 5501 --insecure-plaintext >"$tmp/old.log" 2>&1 &
	pids+=($!)
	impls="tcp old braid"
fi
sleep 1.5

# run IMPL: Mbit/s received in one run.
run() {
	local bin=$BRAID port=5500 flags=(--insecure-plaintext)
	case $1 in
	tcp) flags+=(--tcp-baseline) ;;
	old) bin=$BRAID_OLD port=5501 ;;
	esac
	"$BRAID" testbed exec --name $name a -- "$bin" perf -c "$addrs" -p $port "${flags[@]}" -t "$secs" -J "${extra[@]}" >"$tmp/out.json" 2>"$tmp/cli.log" ||
		{ cat "$tmp/cli.log" >&2; return 1; }
	jq '.end.sum_received.bits_per_second / 1e6' "$tmp/out.json"
}

echo "testbed $nets, servers at $addrs, $reps x $secs s, plaintext"
for i in $(seq 1 "$reps"); do
	line="rep $i"
	for impl in $impls; do
		m=$(run $impl)
		[ $impl = tcp ] && t=$m
		line+=$(awk -v i=$impl -v m="$m" -v t="$t" 'BEGIN { printf "  %s %.1f Mbit/s", i, m; if (i != "tcp") printf " (%.3f)", m / t }')
	done
	echo "$line"
done

#!/usr/bin/env bash
# loopback-iperf3.sh: braid perf against iperf3 on loopback, one path, one
# stream, interleaved, in one run. Prints one line per repetition and a
# summary: throughput (Gbit/s) and CPU per byte of both ends together
# (seconds of user+system CPU per GB delivered), and braid's ratios to
# iperf3. braid runs with --insecure-plaintext: AES-256-GCM alone runs at
# about 2.4 GB/s per core here, so encrypted loopback measures the cipher
# (docs/benchmarks.md, "Encryption cost").
#
# usage: bench/scripts/loopback-iperf3.sh [reps] [seconds] [extra braid perf client flags]
# env:   BRAID (braid binary; default: go build ./cmd/braid into a temp dir)
#        BRAID_OLD (optional: a second braid binary, e.g. a build of main,
#        run as "old" in the same repetitions, to compare two builds side
#        by side against the same iperf3 runs)
# iperf3 comes from Debian's archive (apt-get install iperf3) if missing.
set -euo pipefail
reps=${1:-5}
secs=${2:-4}
shift $(( $# > 2 ? 2 : $# ))
extra=("$@")
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

if ! command -v iperf3 >/dev/null; then
	if [ "$(id -u)" != 0 ]; then
		echo "iperf3 is missing; install it (apt-get install iperf3) or run as root" >&2
		exit 1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y iperf3 >"$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log" >&2; exit 1; }
fi
for t in jq awk; do command -v $t >/dev/null || { echo "$t is required" >&2; exit 1; }; done
if [ -z "${BRAID:-}" ]; then
	(cd "$(dirname "$0")/../.." && go build -o "$tmp/braid" ./cmd/braid)
	BRAID=$tmp/braid
fi
export BRAID_KEY=${BRAID_KEY:-loopback-iperf3-benchmark-key-0123456789}

# Free ports on loopback.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
bport=$(port)
iport=$(port)
"$BRAID" perf -s --listen 127.0.0.1:$bport --insecure-plaintext >"$tmp/braid-srv.log" 2>&1 &
bpid=$!
pids+=($bpid)
impls="iperf3 braid"
if [ -n "${BRAID_OLD:-}" ]; then
	oport=$(port)
	"$BRAID_OLD" perf -s --listen 127.0.0.1:$oport --insecure-plaintext >"$tmp/old-srv.log" 2>&1 &
	opid=$!
	pids+=($opid)
	impls="iperf3 old braid"
fi
iperf3 -s -p $iport >"$tmp/iperf3-srv.log" 2>&1 &
ipid=$!
pids+=($ipid)
sleep 0.5

tck=$(getconf CLK_TCK)
# cpu PID: user+system CPU seconds of a process so far.
cpu() { awk -v t=$tck '{ print ($14 + $15) / t }' /proc/$1/stat; }

printf '%-4s %-7s %10s %12s\n' rep impl Gbit/s "CPU s/GB"
for i in $(seq 1 "$reps"); do
	for impl in $impls; do
		if [ $impl = iperf3 ]; then
			s0=$(cpu $ipid)
			/usr/bin/time -f '%U %S' -o "$tmp/time" iperf3 -c 127.0.0.1 -p $iport -t "$secs" -J >"$tmp/out.json"
			s1=$(cpu $ipid)
			bytes=$(jq '.end.sum_received.bytes' "$tmp/out.json")
			gbps=$(jq '.end.sum_received.bits_per_second / 1e9' "$tmp/out.json")
		else
			bin=$BRAID pid=$bpid p=$bport
			[ $impl = old ] && bin=$BRAID_OLD pid=$opid p=$oport
			s0=$(cpu $pid)
			/usr/bin/time -f '%U %S' -o "$tmp/time" "$bin" perf -c 127.0.0.1:$p --insecure-plaintext --time "$secs" --json "${extra[@]}" >"$tmp/out.json" 2>"$tmp/cli.log"
			s1=$(cpu $pid)
			# iperf3-shaped JSON, like iperf3's own.
			bytes=$(jq '.end.sum_received.bytes' "$tmp/out.json")
			gbps=$(jq '.end.sum_received.bits_per_second / 1e9' "$tmp/out.json")
		fi
		ccpu=$(awk '{ print $1 + $2 }' "$tmp/time")
		spg=$(awk -v a="$s0" -v b="$s1" -v c="$ccpu" -v n="$bytes" 'BEGIN { printf "%.3f", (b - a + c) / (n / 1e9) }')
		printf '%-4s %-7s %10.2f %12s\n' "$i" $impl "$gbps" "$spg"
		echo "$i $impl $gbps $spg" >>"$tmp/results"
	done
done
for impl in braid old; do
	grep -q " $impl " "$tmp/results" || continue
	awk -v impl=$impl '
	$2 == "iperf3" { ig[$1] = $3; ic[$1] = $4 }
	$2 == impl { bg[$1] = $3; bc[$1] = $4 }
	END {
		tmin = cmin = 1e9; tmax = cmax = 0
		for (i in bg) {
			t = bg[i] / ig[i]; c = bc[i] / ic[i]
			if (t < tmin) tmin = t; if (t > tmax) tmax = t
			if (c < cmin) cmin = c; if (c > cmax) cmax = c
			n++
		}
		printf "%s / iperf3 throughput: %.2f-%.2f; CPU per byte %s / iperf3: %.2f-%.2f (%d repetitions)\n", impl, tmin, tmax, impl, cmin, cmax, n
	}' "$tmp/results"
done
if grep -q " old " "$tmp/results"; then
	awk '
	$2 == "old"   { og[$1] = $3; oc[$1] = $4 }
	$2 == "braid" { bg[$1] = $3; bc[$1] = $4 }
	END {
		tmin = cmin = 1e9; tmax = cmax = 0
		for (i in bg) {
			t = bg[i] / og[i]; c = bc[i] / oc[i]
			if (t < tmin) tmin = t; if (t > tmax) tmax = t
			if (c < cmin) cmin = c; if (c > cmax) cmax = c
		}
		printf "braid / old throughput: %.2f-%.2f; CPU per byte braid / old: %.2f-%.2f\n", tmin, tmax, cmin, cmax
	}' "$tmp/results"
fi

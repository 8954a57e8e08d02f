#!/usr/bin/env bash
# loopback-perfstat.sh: what one braid perf run on loopback (one path, one
# stream, plaintext) costs per GB delivered, by perf stat, on each end:
# CPU time (task-clock, ms), context switches, and the system calls that
# name the wake-ups (futex: a goroutine handed to a sleeping thread;
# epoll_pwait: the network poller; readv/writev: the channel's reads and
# writes; setsockopt: SO_RCVLOWAT changes). Run it for two builds in
# turn, several times, to compare them side by side.
#
# usage: bench/scripts/loopback-perfstat.sh BRAID [seconds] [extra braid perf client flags]
# Needs perf (Debian: linux-perf) and jq, and perf_event access (root, or
# kernel.perf_event_paranoid <= 1).
set -euo pipefail
braid=${1:?usage: $0 BRAID [seconds] [flags]}
secs=${2:-3}
shift $(( $# > 2 ? 2 : $# ))
extra=("$@")
for t in perf jq python3; do command -v $t >/dev/null || { echo "$t is required" >&2; exit 1; }; done
tmp=$(mktemp -d)
spid=
cleanup() {
	[ -n "$spid" ] && kill "$spid" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
export BRAID_KEY=${BRAID_KEY:-loopback-iperf3-benchmark-key-0123456789}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ev=task-clock,context-switches,syscalls:sys_enter_futex,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_readv,syscalls:sys_enter_writev,syscalls:sys_enter_setsockopt
"$braid" perf -s --listen 127.0.0.1:$port --insecure-plaintext -1 >"$tmp/srv.log" 2>&1 &
spid=$!
sleep 0.5
perf stat -x, -e $ev -p $spid -o "$tmp/srv.stat" &
ppid=$!
perf stat -x, -e $ev -o "$tmp/cli.stat" "$braid" perf -c 127.0.0.1:$port --insecure-plaintext --time "$secs" --json "${extra[@]}" >"$tmp/out.json" 2>"$tmp/cli.log"
sleep 0.3
kill -INT $ppid 2>/dev/null || true  # it ends by itself when the server does
wait $ppid 2>/dev/null || true
bytes=$(jq '.end.sum_received.bytes' "$tmp/out.json")
printf 'Gbit/s %.2f  (per GB delivered below)\n' "$(jq '.end.sum_received.bits_per_second / 1e9' "$tmp/out.json")"
for side in srv cli; do
	name=receiver; [ $side = cli ] && name=sender
	grep -v '^#' "$tmp/$side.stat" | awk -F, -v n="$bytes" -v who=$name '
		NF > 2 { sub("syscalls:sys_enter_", "", $3); printf "%s %s=%.0f ", who, $3, $1 / (n / 1e9) }
		END { print "" }'
done

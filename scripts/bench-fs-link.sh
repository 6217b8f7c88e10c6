#!/usr/bin/env bash
# bench-fs-link.sh: the file system benchmark's data set through a network
# link of a set rate, as the seeds' experiment ran it (nodes on 10 Gigabit
# Ethernet), rather than on loopback, where reading 32 MiB files is bound
# by this machine's memory copies and not by a network.
#
# A tyr server runs in a network namespace of its own, reached from the
# bench through a veth pair whose two ends are shaped by tc's token bucket
# (tbf) to RATE. `tyr bench fs` measures tyrfs-native over that link and a
# directory on the local disk (the physical reference, not behind the
# link), and writes bench/results/fs-link-DATE.md (and its JSON lines).
# Needs root (ip netns, tc).
#
#   scripts/bench-fs-link.sh [SECONDS]     # per measurement, default 5
#   RATE=10gbit DATA_SET=256MiB CLIENTS=1,16 scripts/bench-fs-link.sh
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-5}
rate=${RATE:-10gbit}
data_set=${DATA_SET:-256MiB}
clients=${CLIENTS:-1,16}
make -s build
mkdir -p build
dir=$(mktemp -d "$PWD/build/bench-fs-link-XXXXXX") # on the project's disk
mkdir -p "$dir/local"
ns=tyrlink$$ host=tyrl$$
addr_host=10.79.0.1 addr_ns=10.79.0.2
server=
cleanup() {
	if [[ -n $server ]]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
	ip netns del "$ns" 2>/dev/null || true # takes the veth pair with it
	rm -rf --one-file-system "$dir"
}
trap cleanup EXIT
ip netns add "$ns"
ip -n "$ns" link set lo up
ip link add "$host" type veth peer name eth0 netns "$ns"
ip addr add "$addr_host/24" dev "$host"
ip link set "$host" up
ip -n "$ns" addr add "$addr_ns/24" dev eth0
ip -n "$ns" link set eth0 up
# The bucket holds what the link sends in a few milliseconds at the rate:
# tbf needs at least a timer tick's worth.
tc qdisc replace dev "$host" root tbf rate "$rate" burst 8mb latency 20ms
tc -n "$ns" qdisc replace dev eth0 root tbf rate "$rate" burst 8mb latency 20ms
port=7420
ip netns exec "$ns" bin/tyr server --data "$dir/tyr" --listen "$addr_ns:$port" --log-level warn >"$dir/tyr.log" 2>&1 &
server=$!
for _ in $(seq 300); do
	python3 -c "import socket; socket.create_connection(('$addr_ns', $port), 1)" 2>/dev/null && break
	sleep 0.1
done
out=bench/results/fs-link-$(date +%F)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date +%s)
bin/tyr bench fs --endpoint "$addr_ns:$port" --data-set "$data_set" --clients "$clients" \
	--duration "${duration}s" --op-timeout 5m --dir "local-ext4=$dir/local" --json >"$out.jsonl"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
{
	echo "# TýrFS through a $rate link, $(date +%F)"
	echo
	echo "\`scripts/bench-fs-link.sh $duration\` (RATE=$rate, DATA_SET=$data_set, CLIENTS=$clients): \`tyr bench fs\`,"
	echo "a data set of $data_set read whole as 32 MiB files and as 32 KiB files, then empty and 4 KiB files"
	echo "created, stat'ed, read and deleted, ${duration} s per measurement, every read checked byte for byte."
	echo "One tyr server (sync on) in a network namespace of its own, its data on the local disk, reached"
	echo "through a veth pair shaped to $rate each way by tc's token bucket (tbf, 8 MB burst), as the"
	echo "seeds' file system experiment ran on 10 Gigabit Ethernet; tyrfs-native is the tyrfs package"
	echo "over that link. local-ext4 is a directory on the same disk, read from the page cache, not"
	echo "behind the link: the physical reference. No distributed peer in this run."
	echo
	echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) of memory,"
	echo "load average (1, 5, 15 min) $load_before before the run and $load_after after it;"
	echo "the run took $(( $(date +%s) - start )) s."
	echo
	bin/tyr bench report "$out.jsonl"
} >"$out.md"
echo "wrote $out.md"

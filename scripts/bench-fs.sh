#!/usr/bin/env bash
# bench-fs.sh: the file system benchmark, one run. Starts a tyr server on
# 127.0.0.1 with its data on the project's disk, mounts a keyspace of it
# with `tyr mount` three times (strict: --cache 0; directories cached for
# 1 s: --cache 0 --dir-cache 1s; names, attributes and pages cached for
# 1 s, each open checking the file's version: --cache 1s, the default). `tyr bench fs` reads a data set stored as 32 MiB files
# and as 32 KiB files with 1 and 16 readers, and creates, stats, reads and
# deletes empty and 4 KiB files, on: a directory on the local disk (the
# physical reference), the tyr mounts and tyrfs-native (the tyrfs package
# over the Go client). Then, unless CEPH=0, it starts a CephFS cluster with
# one MDS (../shared/peers/ceph/setup.sh --fs, mounted with ceph-fuse by
# its mount.sh, torn down with teardown.sh --purge at the end) and runs the
# same workloads on it. Ceph starts only once tyr's measurements are done:
# after its own create and delete phases CephFS keeps working in the
# background (its MDS purges deleted files' objects, flushes its journal),
# which would land on the next system's measurement. Writes
# bench/results/fs-DATE.md (and its JSON lines).
#
#   scripts/bench-fs.sh [SECONDS]          # per measurement, default 5
#   DATA_SET=1GiB CLIENTS=1,16 CEPH=0 scripts/bench-fs.sh 10
#   CREATE=trunc scripts/bench-fs.sh   # creates open O_CREAT|O_TRUNC, as fopen "w"
#   SYNC=0 scripts/bench-fs.sh         # tyr's keyspaces with sync off: commits
#                                      # acknowledged once written, before the fsync
#   OUT=bench/results/fs-NAME scripts/bench-fs.sh   # another name for the results
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-5}
data_set=${DATA_SET:-256MiB}
clients=${CLIENTS:-1,16}
ceph=${CEPH:-1}
create=${CREATE:-excl}
case $create in
excl) create_flags=() create_open="O_CREAT|O_EXCL" suffix="" ;;
trunc) create_flags=(--create-trunc) create_open="O_CREAT|O_TRUNC" suffix=-trunc ;;
*) echo "CREATE=$create: want excl or trunc" >&2; exit 2 ;;
esac
case ${SYNC:-1} in
1) sync_flags=() sync_word=on ;;
0) sync_flags=(--sync=false) sync_word=off suffix=$suffix-nosync ;;
*) echo "SYNC=$SYNC: want 1 or 0" >&2; exit 2 ;;
esac
cephdir=${CEPH_PEER_DIR:-$(cd .. && pwd)/shared/peers/ceph}
[[ -d $cephdir ]] || cephdir=/work/shared/peers/ceph
make -s build
mkdir -p build
dir=$(mktemp -d "$PWD/build/bench-fs-XXXXXX") # on the project's disk
mnt=$dir/mnt dcmnt=$dir/mnt-dircache cmnt=$dir/mnt-cache cephmnt=$dir/cephfs
mkdir -p "$dir/local" "$mnt" "$dcmnt" "$cmnt"
pids=()
ceph_started=0
cleanup() {
	for m in "$mnt" "$dcmnt" "$cmnt"; do
		if mountpoint -q "$m"; then fusermount3 -u "$m" || true; fi
	done
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	if [[ $ceph_started == 1 ]]; then
		"$cephdir/umount.sh" --force "$cephmnt" || true
		"$cephdir/teardown.sh" --purge || true
		# A ceph-mds on this run's configuration has been seen running
		# again seconds after teardown stopped it: stop what this run's
		# Ceph left, by PID, once it has had the time to.
		sleep 10
		for p in $(pgrep -x ceph-mds || true); do
			if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "-c /tmp/cephpeer/ceph.conf"; then
				kill "$p" 2>/dev/null || true
			fi
		done
	fi
	rm -rf --one-file-system "$dir"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 300); do python3 -c "import socket; socket.create_connection(('127.0.0.1', $1), 1)" 2>/dev/null && return; sleep 0.1; done; echo "nothing on port $1" >&2; exit 1; }
port=$(free_port)
bin/tyr server --data "$dir/tyr" --listen "127.0.0.1:$port" --log-level warn >"$dir/tyr.log" 2>&1 &
pids+=($!)
wait_port "$port"
# Each mount in a keyspace of its own, so the two never see each other's
# files.
mount_tyr() { # KEYSPACE MOUNTPOINT LOG [FLAGS...]
	local ks=$1 m=$2 log=$3
	shift 3
	if [[ $sync_word == off ]]; then
		bin/tyr keyspace create --sync=false --endpoint "127.0.0.1:$port" "$ks" >/dev/null
	fi
	bin/tyr mount --create "$@" --endpoint "127.0.0.1:$port" "$ks" "$m" >"$log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do mountpoint -q "$m" && break; sleep 0.1; done
	mountpoint -q "$m" || { echo "tyr mount did not come up:" >&2; cat "$log" >&2; exit 1; }
}
mount_tyr benchfs "$mnt" "$dir/mount.log" --cache 0
mount_tyr benchfs-dircache "$dcmnt" "$dir/mount-dircache.log" --cache 0 --dir-cache 1s
mount_tyr benchfs-cache "$cmnt" "$dir/mount-cache.log" --cache 1s
if [[ $ceph == 1 && -e /tmp/cephpeer ]]; then
	echo "/tmp/cephpeer exists: a Ceph cluster is in use; run with CEPH=0 or tear it down first" >&2
	exit 1
fi
out=${OUT:-bench/results/fs-$(date +%F)$suffix}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date +%s)
bench() { # SYSTEM FLAGS...
	bin/tyr bench fs --endpoint "127.0.0.1:$port" --data-set "$data_set" --clients "$clients" \
		--duration "${duration}s" --op-timeout 5m "${create_flags[@]}" "${sync_flags[@]}" "$@" --json
}
bench --dir "local-ext4=$dir/local" --mount "tyr-mount=$mnt" --mount "tyr-mount-dircache=$dcmnt" \
	--mount "tyr-mount-cache=$cmnt" >"$out.jsonl"
if [[ $ceph == 1 ]]; then
	ceph_started=1
	"$cephdir/setup.sh" --fs >"$dir/ceph-setup.log" 2>&1 || { tail -20 "$dir/ceph-setup.log" >&2; exit 1; }
	"$cephdir/mount.sh" "$cephmnt"
	bench --native "" --distributed "cephfs=$cephmnt" >>"$out.jsonl"
fi
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
{
	echo "# TýrFS against the local disk and CephFS, $(date +%F)"
	echo
	echo "\`scripts/bench-fs.sh $duration\` (DATA_SET=$data_set, CLIENTS=$clients): \`tyr bench fs\`, a data set of"
	echo "$data_set stored as 32 MiB files and as 32 KiB files (fs-write: 4 writers, each file created and written"
	echo "whole in one write(2), then closed), read whole as both, then empty and 4 KiB files created, stat'ed,"
	echo "read and deleted (each client in a directory of its own, at most 20,000 files per create phase;"
	echo "a create through a directory is open($create_open), write, close),"
	echo "${duration} s per measurement; every read checked byte for byte. One tyr server (keyspaces' sync $sync_word) with its"
	echo "data on the local disk, mounted by \`tyr mount\` three times: tyr-mount caches nothing in the kernel"
	echo "(\`--cache 0\`), tyr-mount-dircache caches directories' names and attributes for 1 s (\`--cache 0"
	echo "--dir-cache 1s\`), tyr-mount-cache caches names, attributes and pages for 1 s, each open asking the"
	echo "cluster whether the file changed (\`--cache 1s\`, the default, close-to-open); local-ext4 is a directory on the"
	echo "same disk (reads from the page cache); CephFS is one MON, two OSDs (BlueStore on files on the"
	echo "same disk, pools of 2 replicas) and one MDS on this machine, through ceph-fuse, started once"
	echo "tyr's systems and the local disk were measured, and measured alone."
	echo
	echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) of memory,"
	echo "shared with other work: load average (1, 5, 15 min) $load_before before the run and"
	echo "$load_after after it; the run took $(( $(date +%s) - start )) s."
	echo
	bin/tyr bench report "$out.jsonl"
} >"$out.md"
echo "wrote $out.md"

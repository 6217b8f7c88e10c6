#!/usr/bin/env bash
# bench-s3.sh: the S3 object benchmark, one run: `tyr bench object` puts
# and gets whole objects of 4 KiB, 1 MiB and 64 MiB at 1 and 32 clients on
# tyr's native API, on tyr's S3 gateway (tyr server --s3-listen) and on
# versitygw over a POSIX directory on the same disk (the same S3 layer over
# files), and on Ceph's RADOS gateway when CEPH_S3 names it
# (http://ACCESS:SECRET@127.0.0.1:7481, started by
# ../shared/peers/ceph/setup.sh --rgw), and on a second gateway of the same
# server whose buckets do not sync each commit (tyr-s3-nosync), as the
# POSIX back-end does not. Then `tyr bench list` lists pages
# of 1,000 keys from a 1,000-key prefix and from a LIST_KEYS-key prefix
# (default 1,000,000) at 1 and 32 clients on tyr's native API, tyr's
# gateway and versitygw-posix; the objects are stored natively and as
# files, as PutObject would store them, since a million PUTs would take
# longer than the measurement (RGW is left out of it for that reason).
# Writes the reports to bench/results/s3-DATE.md and s3-list-DATE.md.
#
#   scripts/bench-s3.sh [SECONDS]     # per measurement, default 10
#   WORKLOADS=list scripts/bench-s3.sh 5
#   WORKLOADS=object OBJECT_SIZES=1MiB scripts/bench-s3.sh
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-10}
workloads=${WORKLOADS:-object list}
make -s build
vgw=$(sh scripts/versitygw.sh)
dir=$(mktemp -d "$PWD/build/bench-s3-XXXXXX") # on the project's disk
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null || true; done; rm -rf "$dir"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 300); do python3 -c "import socket; socket.create_connection(('127.0.0.1', $1), 1)" 2>/dev/null && return; sleep 0.1; done; echo "nothing on port $1" >&2; exit 1; }
key=bench-access secret=bench-secret-key
tyr_port=$(free_port) tyr_s3=$(free_port) nosync_s3=$(free_port) posix_s3=$(free_port)
bin/tyr server --data "$dir/tyr" --listen "127.0.0.1:$tyr_port" --log-level warn \
	--s3-listen "127.0.0.1:$tyr_s3" --s3-access-key $key --s3-secret-key $secret >"$dir/tyr.log" 2>&1 &
pids+=($!)
wait_port "$tyr_port"
# A second gateway on the same server whose buckets do not sync each
# commit, as the POSIX back-end does not: the cost of durability apart.
bin/tyr s3 --endpoint "127.0.0.1:$tyr_port" --listen "127.0.0.1:$nosync_s3" --s3-sync=false \
	--s3-access-key $key --s3-secret-key $secret >"$dir/tyr-nosync.log" 2>&1 &
pids+=($!)
mkdir -p "$dir/posix"
ROOT_ACCESS_KEY=$key ROOT_SECRET_KEY=$secret "$vgw" --port "127.0.0.1:$posix_s3" posix "$dir/posix" >"$dir/posix.log" 2>&1 &
pids+=($!)
wait_port "$tyr_s3"
wait_port "$nosync_s3"
wait_port "$posix_s3"
peers=(--s3 "tyr-s3=http://127.0.0.1:$tyr_s3" --s3 "tyr-s3-nosync=http://127.0.0.1:$nosync_s3"
	--s3 "versitygw-posix=http://127.0.0.1:$posix_s3")
[[ -n ${CEPH_S3:-} ]] && peers+=(--s3 "ceph-rgw=$CEPH_S3")
if [[ $workloads == *object* ]]; then
out=bench/results/s3-$(date +%F)
bin/tyr bench object --endpoint "127.0.0.1:$tyr_port" --object-sizes "${OBJECT_SIZES:-4KiB,1MiB,64MiB}" --clients 1,32 \
	--duration "${duration}s" --op-timeout 3m --s3-access-key $key --s3-secret-key $secret "${peers[@]}" --json >"$out.json"
bin/tyr bench report --base versitygw-posix "$out.json" >"$out.md"
echo "wrote $out.md"
fi
if [[ $workloads == *list* ]]; then
out=bench/results/s3-list-$(date +%F)
bin/tyr bench list --endpoint "127.0.0.1:$tyr_port" --clients 1,32 --list-keys "${LIST_KEYS:-1000000}" \
	--duration "${duration}s" --op-timeout 3m --s3-access-key $key --s3-secret-key $secret \
	--s3 "tyr-s3=http://127.0.0.1:$tyr_s3" --s3 "versitygw-posix=http://127.0.0.1:$posix_s3" \
	--s3-fill tyr-s3=native --s3-fill "versitygw-posix=$dir/posix" --json >"$out.json"
bin/tyr bench report --base versitygw-posix "$out.json" >"$out.md"
echo "wrote $out.md"
fi

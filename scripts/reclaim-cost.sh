#!/usr/bin/env bash
# The cost of reclaiming removed data to foreground writes, on one server:
# `tyr bench write` alone, then the same run while RECLAIM_MIB of blobs in
# another keyspace are deleted 3 s into it. Prints both results, the
# ratio, and how long the data directory took to give the space back.
# Usage: scripts/reclaim-cost.sh [RECLAIM_MIB (default 1024)]
set -euo pipefail
mib=${1:-1024}
tyr=${TYR:-bin/tyr}
dir=$(mktemp -d /tmp/tyr-reclaim-XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ep=127.0.0.1:$port
"$tyr" server --data "$dir/data" --listen "$ep" --ready-file "$dir/ready" >"$dir/log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -s "$dir/ready" ] && break; sleep 0.1; done
export TYR_ENDPOINT=$ep
"$tyr" keyspace create bulk >/dev/null
head -c $((64 << 20)) /dev/urandom >"$dir/blob"
for i in $(seq 1 $((mib / 64))); do "$tyr" put "bulk/b$i" "$dir/blob" >/dev/null; done
sleep 5
echo "data directory with ${mib} MiB: $(du -sm "$dir/data" | cut -f1) MiB"
bench() { "$tyr" bench write --clients 8 --duration 20s --seed 1 "$@" | tail -n +1; }
echo "== writes alone"; bench
echo "== writes while ${mib} MiB are deleted at 3 s"
( sleep 3
  start=$(date +%s.%N)
  for i in $(seq 1 $((mib / 64))); do "$tyr" rm "bulk/b$i"; done
  while [ "$(du -sm "$dir/data" | cut -f1)" -gt 200 ]; do sleep 0.2; done
  echo "deleted at 3 s; the data directory was below 200 MiB $(echo "$(date +%s.%N) - $start" | bc) s later: $(du -sm "$dir/data" | cut -f1) MiB"
) &
del=$!
bench
wait $del
"$tyr" keyspace info bulk

#!/usr/bin/env bash
# Measures one tyr node against real peers on this machine, side by side in
# one run, under the seeds' workloads: the hot counter and MonALISA (events
# appended with per-minute aggregates updated in the same transaction), the
# bank (transfers between random accounts, each a serializable transaction
# of two balances, retried on conflict where the system aborts), and 4 KiB
# reads against etcd; with the machine's own limits (loopback round trips
# and stream, fsync rate) measured in the same run. The peers, all
# durable:
#
#   PostgreSQL 15   fsync=on, synchronous_commit=on
#   etcd            defaults (WAL fsynced per raft entry)
#   Redis           appendonly yes, appendfsync always (INCRBY on the counter;
#                   WATCH, then MULTI/EXEC in the bank)
#   ZooKeeper+Redis the seeds' lock-based baseline: read-modify-write in the
#                   durable Redis under ZooKeeper locks (defaults: transaction
#                   log fsynced)
#
# Missing peers are installed from apt (etcd-server, zookeeper, redis-server,
# postgresql-15). Every server listens on 127.0.0.1 only, keeps its data in a
# temporary directory, and is stopped by its PID when the script exits,
# however it exits.
#
# Environment:
#   BENCH_DURATION         time per workload, system and client count (10s)
#   BENCH_LIMITS_DURATION  time per machine limit and client count (3s)
#   BENCH_CLIENTS          client counts (1,8,32)
#
# Output: bench/out/peers/results.jsonl (one JSON object per measurement),
# bench/out/peers/env.txt, and the report bench/results/peers-<UTC date>.md
# with its plots bench/results/peers-<UTC date>-<workload>.png; the report is
# also printed.
set -euo pipefail

cd "$(dirname "$0")/.."

BIN=bin/tyr
OUT=bench/out/peers
DURATION=${BENCH_DURATION:-10s}
LIMITS_DURATION=${BENCH_LIMITS_DURATION:-3s}
CLIENTS=${BENCH_CLIENTS:-1,8,32}

PIDS=()
TMP=$(mktemp -d "${TMPDIR:-/tmp}/tyr-bench-peers.XXXXXX")

log() { echo "bench-peers: $*" >&2; }

cleanup() {
	local status=$?
	for pid in "${PIDS[@]}"; do
		stop_pid "$pid"
	done
	rm -rf "$TMP"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "building $BIN"
go build -o "$BIN" ./cmd/tyr

. scripts/bench-lib.sh

install_peers etcd-server zookeeper redis-server postgresql-15

mkdir -p "$OUT" bench/results
: >"$OUT/results.jsonl"
START=$(date -u +%s)

start_tyr
start_redis redis --save '' --appendonly yes --appendfsync always
start_postgres
start_etcd
start_zookeeper

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "tyr: commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' with uncommitted changes')"
	echo "postgres: $("$PG_BIN/postgres" --version)"
	echo "etcd: $(etcd --version | head -n 1)"
	echo "redis: $(redis-server --version)"
	echo "zookeeper: $(dpkg-query -W -f '${Version}' zookeeper 2>/dev/null || echo unknown), java $(java -version 2>&1 | head -n 1)"
	echo "nproc: $(nproc); memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
	echo "data directories: $(df -T "$TMP" | awk 'NR == 2 {print $2 " on " $1}') (all servers and the fsync limit)"
	echo "uptime before: $(uptime)"
	echo "settings: duration $DURATION per point (limits $LIMITS_DURATION), clients $CLIENTS; tyr keyspace sync on, MVCC on"
} >"$OUT/env.txt"

bench() {
	"$BIN" bench "$@" --clients "$CLIENTS" --json | tee -a "$OUT/results.jsonl"
}

bench limits --duration "$LIMITS_DURATION" --dir "$TMP"
bench counter --endpoint "$TYR_ADDR" --duration "$DURATION" \
	--postgres "$PG_URL" --etcd "127.0.0.1:$ETCD_PORT" \
	--zookeeper "127.0.0.1:$ZK_PORT" --zk-redis "127.0.0.1:$REDIS_PORT" \
	--peer redis --peer-addr "127.0.0.1:$REDIS_PORT"
bench monalisa --endpoint "$TYR_ADDR" --duration "$DURATION" \
	--postgres "$PG_URL" --zookeeper "127.0.0.1:$ZK_PORT" --zk-redis "127.0.0.1:$REDIS_PORT"
bench bank --endpoint "$TYR_ADDR" --duration "$DURATION" \
	--postgres "$PG_URL" --etcd "127.0.0.1:$ETCD_PORT" \
	--zookeeper "127.0.0.1:$ZK_PORT" --zk-redis "127.0.0.1:$REDIS_PORT" \
	--peer redis --peer-addr "127.0.0.1:$REDIS_PORT"
bench read --endpoint "$TYR_ADDR" --duration "$DURATION" --value-size 4096 --etcd "127.0.0.1:$ETCD_PORT"

{
	echo "uptime after: $(uptime)"
	echo "run time: $(($(date -u +%s) - START)) s"
} >>"$OUT/env.txt"

NAME=peers-$(date -u +%Y-%m-%d)
REPORT=bench/results/$NAME.md
{
	echo "# One tyr node against PostgreSQL, etcd, Redis and ZooKeeper-locked Redis, one run"
	echo
	echo "Produced by \`make bench-peers\` (scripts/bench-peers.sh): every server on loopback on this machine, one"
	echo "after the other within each client count, each client with its own connection, every system durable"
	echo "(an acknowledged write is on disk). tyr is measured with atomic ops in the commit (\`tyr\`) and with"
	echo "transactional read-modify-write (\`tyr-rmw\`); ratios are tyr/peer. How each workload maps onto each"
	echo "peer is in the notes at the end and in bench/results/README.md."
	echo
	sed 's/^/- /' "$OUT/env.txt"
	echo
	"$BIN" bench report --plots "bench/results/$NAME" "$OUT/results.jsonl"
} >"$REPORT"

echo
cat "$REPORT"
log "report written to $REPORT"

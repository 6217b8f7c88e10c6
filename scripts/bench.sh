#!/usr/bin/env bash
# The whole benchmark suite in one run (`make bench`): a 3-node local tyr
# cluster (tyr cluster up --sync, keyspaces of replication 3, sync on)
# side by side with its peers, all on this machine, each peer durable
# unless named memory-only:
#
#   redis-durable     Redis, appendonly yes, appendfsync always
#   redis-memory      Redis, no persistence (memory-only)
#   postgres          PostgreSQL 15, fsync=on, synchronous_commit=on
#   etcd              etcd, defaults (WAL fsynced per raft entry)
#   zk-redis-durable  read-modify-write in redis-durable under ZooKeeper locks
#
# Workloads, in this order, at BENCH_CLIENTS clients each:
#   limits     the machine's loopback round trips, loopback stream, fsyncs
#   counter    tyr atomic add and transactional read-modify-write; Redis
#              INCRBY, PostgreSQL, etcd, ZooKeeper-locked Redis
#   monalisa   tyr atomic and read-modify-write; PostgreSQL, ZooKeeper-locked Redis
#   bank       tyr, PostgreSQL, etcd, Redis, ZooKeeper-locked Redis
#   write      4 KiB, --direct; durable and memory-only Redis
#   read       1 KiB, 800 B and 100 KiB values, keys by a power law,
#              --direct; memory-only Redis (GET)
#   object     whole objects of 4 KiB to 64 MiB put then got, at
#              BENCH_OBJECT_CLIENTS; Redis without persistence
#   isolation  tyr alone, at BENCH_ISOLATION_CLIENTS: readers and writers
#              at 95/5, 75/25, 50/50, 25/75, 5/95
#   stream     one BENCH_STREAM_SIZE value put then got, replication 3
#              (tyr) against memory-only Redis, and replication 1 (tyr-rf1)
# and the peak resident memory (VmHWM) of each tyr node at the end.
#
# Peers missing from this machine are installed from apt. Every server
# listens on 127.0.0.1 only, keeps its data in a temporary directory and
# is stopped by its PID (the cluster by tyr cluster down, which uses the
# nodes' pid files) when the script exits, however it exits.
#
# Environment:
#   BENCH_DURATION           time per workload, system and client count (5s)
#   BENCH_LIMITS_DURATION    time per machine limit and client count (2s)
#   BENCH_CLIENTS            client counts (1,8,32)
#   BENCH_ISOLATION_CLIENTS  client counts of the isolation workload (32)
#   BENCH_OBJECT_CLIENTS     client counts of the object workload (1,8)
#   BENCH_STREAM_SIZE        size of the streamed value (1GiB)
#   BENCH_REPORT             where the report goes
#                            (bench/results/bench-<UTC date>.md)
#
# Output: bench/out/suite/results.jsonl (one JSON object per measurement),
# bench/out/suite/env.txt, and the report with its plots
# (<report without .md>-<workload>.png); the report is also printed.
set -euo pipefail

cd "$(dirname "$0")/.."

BIN=bin/tyr
OUT=bench/out/suite
DURATION=${BENCH_DURATION:-5s}
LIMITS_DURATION=${BENCH_LIMITS_DURATION:-2s}
CLIENTS=${BENCH_CLIENTS:-1,8,32}
ISOLATION_CLIENTS=${BENCH_ISOLATION_CLIENTS:-32}
OBJECT_CLIENTS=${BENCH_OBJECT_CLIENTS:-1,8}
STREAM_SIZE=${BENCH_STREAM_SIZE:-1GiB}
REPORT=${BENCH_REPORT:-bench/results/bench-$(date -u +%Y-%m-%d).md}
NODES=3
BUDGET=900 # seconds: the suite is meant to fit in 15 minutes on 2 cores

PIDS=()
CLUSTER_DIR=
TMP=$(mktemp -d "${TMPDIR:-/tmp}/tyr-bench.XXXXXX")

log() { echo "bench: $*" >&2; }

cleanup() {
	local status=$?
	if [[ -n $CLUSTER_DIR ]]; then
		"$BIN" cluster down --dir "$CLUSTER_DIR" >&2 || true
	fi
	for pid in "${PIDS[@]}"; do
		stop_pid "$pid"
	done
	rm -rf "$TMP"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

START=$(date -u +%s)
log "building $BIN"
go build -o "$BIN" ./cmd/tyr

. scripts/bench-lib.sh

install_peers etcd-server zookeeper redis-server postgresql-15

mkdir -p "$OUT" "$(dirname "$REPORT")"
: >"$OUT/results.jsonl"

# Load before anything of the suite runs.
LOAD_BEFORE=$(uptime)

CLUSTER_DIR=$TMP/cluster
log "starting a $NODES-node cluster with tyr cluster up --sync"
"$BIN" cluster up --nodes "$NODES" --dir "$CLUSTER_DIR" --base-port 0 --sync --metrics >"$TMP/endpoints"
mapfile -t endpoints <"$TMP/endpoints"
EP=${endpoints[0]}
node_pids=()
metrics=()
for k in $(seq 1 "$NODES"); do
	node_pids+=("$(<"$CLUSTER_DIR/node$k/pid")")
	metrics+=("$(sed -n 's/.*"metrics": "\([^"]*\)".*/\1/p' "$CLUSTER_DIR/node$k/node.json")")
done
METRICS=$(IFS=,; echo "${metrics[*]}")
log "cluster: endpoints ${endpoints[*]}, pids ${node_pids[*]}"

start_redis redis-durable --save '' --appendonly yes --appendfsync always
DURABLE=127.0.0.1:$REDIS_PORT
start_redis redis-memory --save '' --appendonly no
MEMORY=127.0.0.1:$REDIS_PORT
start_postgres
start_etcd
start_zookeeper

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "tyr: commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' with uncommitted changes'), $(go version | cut -d' ' -f3)"
	echo "tyr cluster: $NODES nodes from \`tyr cluster up --sync\` (every keyspace sync on, MVCC on, 64 MiB chunks, replication $NODES; tyr-rf1: replication 1)"
	echo "postgres: $("$PG_BIN/postgres" --version), fsync=on synchronous_commit=on"
	echo "etcd: $(etcd --version | head -n 1), defaults"
	echo "redis: $(redis-server --version | cut -d' ' -f1-3); redis-durable appendonly yes appendfsync always; redis-memory no persistence"
	echo "zookeeper: $(dpkg-query -W -f '${Version}' zookeeper 2>/dev/null || echo unknown), defaults, java $(java -version 2>&1 | head -n 1 | cut -d'"' -f2)"
	echo "nproc: $(nproc); memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
	echo "data directories: $(df -T "$TMP" | awk 'NR == 2 {print $2 " on " $1}') (all servers and the fsync limit)"
	echo "load before: $LOAD_BEFORE"
	echo "settings: $DURATION per point (limits $LIMITS_DURATION), clients $CLIENTS (isolation $ISOLATION_CLIENTS, object $OBJECT_CLIENTS), stream $STREAM_SIZE"
} >"$OUT/env.txt"

# node_hwm K prints node K's peak resident memory so far in bytes (VmHWM,
# the kernel's high-water mark since the process started), or nothing if
# the node is gone.
node_hwm() {
	awk '/^VmHWM:/ {printf "%.0f\n", $2 * 1024}' "/proc/${node_pids[$(($1 - 1))]}/status" 2>/dev/null || true
}

# bench WORKLOAD ARGS... runs one workload, then notes the nodes' peak
# memory so far, so that the report shows which workload raised it.
bench() {
	"$BIN" bench "$@" --json >>"$OUT/results.jsonl"
	local label=$1 k hwm
	if [[ $1 == read ]]; then label+=" $(sed -n 's/.*--value-size \([^ ]*\).*/\1/p' <<<"$*")"; fi
	if [[ " $* " == *" --replication 1 "* ]]; then label+=" (replication 1)"; fi
	local row="| $label |"
	for k in $(seq 1 "$NODES"); do
		hwm=$(node_hwm "$k")
		if [[ -n $hwm ]]; then row+=" $((hwm >> 20)) |"; else row+=" gone |"; fi
	done
	echo "$row" >>"$OUT/memory.md"
}
{
	echo "| after | $(seq -s ' | ' -f 'node%g' 1 "$NODES") |"
	echo "|---|$(printf -- '---:|%.0s' $(seq 1 "$NODES"))"
} >"$OUT/memory.md"
# Every tyr result carries what the nodes counted during it: chain
# messages, Deliver calls, requests served and WAL syncs, per operation.
TYR=(--endpoint "$EP" --replication "$NODES" --metrics-addr "$METRICS")
# isolation and stream take no --metrics-addr.
TYR_PLAIN=(--endpoint "$EP" --replication "$NODES")
ZK=(--zookeeper "127.0.0.1:$ZK_PORT" --zk-redis "$DURABLE")

bench limits --clients "$CLIENTS" --duration "$LIMITS_DURATION" --dir "$TMP"
bench counter "${TYR[@]}" --clients "$CLIENTS" --duration "$DURATION" \
	--postgres "$PG_URL" --etcd "127.0.0.1:$ETCD_PORT" "${ZK[@]}" --peer redis --peer-addr "$DURABLE"
bench monalisa "${TYR[@]}" --clients "$CLIENTS" --duration "$DURATION" --postgres "$PG_URL" "${ZK[@]}"
bench bank "${TYR[@]}" --clients "$CLIENTS" --duration "$DURATION" \
	--postgres "$PG_URL" --etcd "127.0.0.1:$ETCD_PORT" "${ZK[@]}" --peer redis --peer-addr "$DURABLE"
bench write "${TYR[@]}" --direct --clients "$CLIENTS" --duration "$DURATION" --value-size 4KiB \
	--peer redis --peer-addr "$DURABLE" --peer-addr "$MEMORY"
# 10,000 values of 1 KiB and of 800 B; 1,000 of 100 KiB (100 MB a copy).
for spec in 1KiB:10000 800B:10000 100KiB:1000; do
	bench read "${TYR[@]}" --direct --clients "$CLIENTS" --duration "$DURATION" \
		--value-size "${spec%%:*}" --read-keys "${spec##*:}" --peer redis --peer-addr "$MEMORY"
done
# A put of 64 MiB at replication 3 takes seconds: a longer deadline.
bench object "${TYR[@]}" --direct --clients "$OBJECT_CLIENTS" --duration "$DURATION" --op-timeout 120s \
	--peer redis --peer-addr "$MEMORY"
bench isolation "${TYR_PLAIN[@]}" --direct --clients "$ISOLATION_CLIENTS" --duration "$DURATION" \
	--value-size 1KiB --read-keys 10000
bench stream "${TYR_PLAIN[@]}" --stream-size "$STREAM_SIZE" --peer redis --peer-addr "$MEMORY"
bench stream --endpoint "$EP" --replication 1 --system tyr-rf1 --stream-size "$STREAM_SIZE"

# Each node's peak resident memory since it started, as the kernel kept it.
for k in $(seq 1 "$NODES"); do
	hwm=$(node_hwm "$k")
	if [[ -z $hwm ]]; then
		log "node$k (pid ${node_pids[$((k - 1))]}) is gone: no peak memory"
		continue
	fi
	printf '{"workload":"memory","system":"tyr node%d","peak_rss_bytes":%d}\n' "$k" "$hwm" >>"$OUT/results.jsonl"
done

ELAPSED=$(($(date -u +%s) - START))
{
	echo "load after: $(uptime)"
	echo "run time: $ELAPSED s, build and server start included"
} >>"$OUT/env.txt"

NAME=$(basename "$REPORT" .md)
{
	echo "# tyr bench: a ${NODES}-node cluster against Redis, PostgreSQL, etcd and ZooKeeper-locked Redis, one run"
	echo
	echo "Produced by \`make bench\` (scripts/bench.sh): tyr as a ${NODES}-node local cluster (\`tyr cluster up --sync\`,"
	echo "keyspaces of replication ${NODES}, sync on) and every peer on loopback on this machine, one system after"
	echo "the other within each client count, each client with its own connection. Every system is durable (an"
	echo "acknowledged write is on disk) but \`redis-memory\`, Redis without persistence. Ratios are tyr/peer. tyr's"
	echo "counter and monalisa run with atomic ops in the commit (\`tyr\`) and as transactional read-modify-write"
	echo "(\`tyr-rmw\`); write, read and isolation send each request to the node serving its blob (\`--direct\`);"
	echo "reads pick keys by a power law (exponent 1); \`tyr-rf1\` is the same cluster with a keyspace of one"
	echo "replica. How each workload maps onto each system is in bench/results/README.md and the notes below."
	echo
	sed 's/^/- /' "$OUT/env.txt"
	echo
	echo "Peak resident memory (VmHWM) of each tyr node after each workload, in MiB:"
	echo
	cat "$OUT/memory.md"
	echo
	"$BIN" bench report --targets --plots "$(dirname "$REPORT")/$NAME" "$OUT/results.jsonl"
} >"$REPORT"

echo
cat "$REPORT"
log "report written to $REPORT"
log "the suite took $ELAPSED s (budget $BUDGET s)"
if ((ELAPSED > BUDGET)); then
	log "over budget by $((ELAPSED - BUDGET)) s"
fi

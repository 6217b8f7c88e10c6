#!/usr/bin/env bash
# Measures a 3-node local cluster with a replication-3 keyspace against a
# single node, one after the other in one run (never both at once), with
# the chain messages between the nodes per acknowledged operation, read
# from the nodes' metrics around each measurement. Keyspaces are sync on.
# Every server listens on 127.0.0.1 only, keeps its data in a temporary
# directory, and is stopped by its PID (the cluster with tyr cluster down)
# when the script exits, however it exits.
#
# Usage: scripts/bench-cluster.sh [io|txn]
#   io   (the default) 4 KiB writes and 4 KiB direct reads (each sent to the
#        node that serves the blob) at 1, 16 and 64 clients; report
#        bench/results/cluster-<UTC date>.md
#   txn  transactions: the hot counter with atomic adds and as
#        transactional read-modify-write, and the bank (transfers between
#        random accounts, each a serializable transaction of two balances,
#        whose sum is checked afterwards), at 1, 8 and 32 clients, with the
#        aborts per committed operation; report
#        bench/results/txn-<UTC date>.md
#
# Environment:
#   BENCH_DURATION  time per workload, deployment and client count (10s)
#   BENCH_CLIENTS   client counts (io: 1,16,64; txn: 1,8,32)
#   BENCH_ACCOUNTS  txn: the bank's accounts (100), 10 per blob
#
# Output: bench/out/cluster/results.jsonl (bench/out/txn/ for txn; one JSON
# object per measurement), env.txt next to it, and the report, which is
# also printed.
set -euo pipefail

cd "$(dirname "$0")/.."

MODE=${1:-io}
case $MODE in
io)
	OUT=bench/out/cluster
	DEFAULT_CLIENTS=1,16,64
	;;
txn)
	OUT=bench/out/txn
	DEFAULT_CLIENTS=1,8,32
	;;
*)
	echo "usage: $0 [io|txn]" >&2
	exit 2
	;;
esac

BIN=bin/tyr
DURATION=${BENCH_DURATION:-10s}
CLIENTS=${BENCH_CLIENTS:-$DEFAULT_CLIENTS}
ACCOUNTS=${BENCH_ACCOUNTS:-100}
ACCOUNTS_PER_BLOB=10
VALUE_SIZE=4096
NODES=3
ONE=tyr-1node
MANY=tyr-${NODES}node

SERVER_PID=
CLUSTER_DIR=
TMP=$(mktemp -d "${TMPDIR:-/tmp}/tyr-bench-cluster.XXXXXX")

log() { echo "bench-cluster: $*" >&2; }

stop_server() {
	if [[ -n $SERVER_PID ]]; then
		kill "$SERVER_PID" 2>/dev/null || true
		wait "$SERVER_PID" 2>/dev/null || true
		SERVER_PID=
	fi
}

stop_cluster() {
	if [[ -n $CLUSTER_DIR ]]; then
		"$BIN" cluster down --dir "$CLUSTER_DIR" >&2 || true
		CLUSTER_DIR=
	fi
}

cleanup() {
	local status=$?
	stop_server
	stop_cluster
	rm -rf "$TMP"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "building $BIN"
go build -o "$BIN" ./cmd/tyr

. scripts/bench-lib.sh

# peer_messages ADDR... prints the sum of tyr_peer_messages_sent_total
# over the nodes' metrics endpoints.
peer_messages() {
	local addr sum=0 v
	for addr in "$@"; do
		v=$(curl -fsS "http://$addr/metrics" | awk '$1 == "tyr_peer_messages_sent_total" {print $2}')
		sum=$(awk -v a="$sum" -v b="${v:-0}" 'BEGIN {printf "%.0f", a + b}')
	done
	echo "$sum"
}

# measure SYSTEM REPLICATION ENDPOINT METRICS runs the mode's workloads
# against one deployment. METRICS is a comma-separated list of its nodes'
# metrics addresses.
measure() {
	local system=$1 rf=$2 endpoint=$3 metrics=$4 before after workload
	local -a addrs args
	IFS=, read -r -a addrs <<<"$metrics"
	local -a workloads=(write read)
	if [[ $MODE == txn ]]; then workloads=(counter bank); fi
	for workload in "${workloads[@]}"; do
		case $workload in
		write | read) args=(--direct --value-size "$VALUE_SIZE") ;;
		# The counter with atomic adds (SYSTEM) and as read-modify-write
		# (SYSTEM-rmw), each measured in turn.
		counter) args=(--agg atomic,rmw) ;;
		bank) args=(--accounts "$ACCOUNTS" --accounts-per-blob "$ACCOUNTS_PER_BLOB") ;;
		esac
		before=$(peer_messages "${addrs[@]}")
		"$BIN" bench "$workload" --endpoint "$endpoint" --system "$system" --replication "$rf" "${args[@]}" \
			--metrics-addr "$metrics" --clients "$CLIENTS" --duration "$DURATION" \
			--json | tee -a "$OUT/results.jsonl"
		after=$(peer_messages "${addrs[@]}")
		echo "$system: peer messages during the whole $workload command (setup and cleanup included): $((after - before))" \
			>>"$OUT/env.txt"
	done
}

mkdir -p "$OUT" bench/results
: >"$OUT/results.jsonl"
START=$(date -u +%s)
{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "tyr: commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' with uncommitted changes'), $("$BIN" --help | sed -n 1p)"
	echo "nproc: $(nproc); memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
	echo "uptime before: $(uptime)"
	if [[ $MODE == txn ]]; then
		echo "settings: duration $DURATION, clients $CLIENTS, bank of $ACCOUNTS accounts, $ACCOUNTS_PER_BLOB per blob, keyspaces sync on, MVCC on, 64 MiB chunks"
	else
		echo "settings: duration $DURATION, clients $CLIENTS, value size $VALUE_SIZE, keyspaces sync on, MVCC on, 64 MiB chunks"
	fi
} >"$OUT/env.txt"

# One node.
dir=$TMP/single
mkdir -p "$dir"
metrics=127.0.0.1:$(free_port)
"$BIN" server --data "$dir/data" --listen 127.0.0.1:0 --ready-file "$dir/addr" --metrics-listen "$metrics" \
	--log-level warn 2>"$dir/server.log" &
SERVER_PID=$!
for _ in $(seq 1 300); do
	[[ -s $dir/addr ]] && break
	if ! kill -0 "$SERVER_PID" 2>/dev/null; then
		break
	fi
	sleep 0.1
done
if [[ ! -s $dir/addr ]]; then
	log "tyr server did not start"
	cat "$dir/server.log" >&2 || true
	exit 1
fi
log "$ONE: tyr server on $(<"$dir/addr") (pid $SERVER_PID), metrics on $metrics"
measure "$ONE" 1 "$(<"$dir/addr")" "$metrics"
stop_server

# The cluster, once the single node is gone.
CLUSTER_DIR=$TMP/cluster
log "$MANY: starting with tyr cluster up"
"$BIN" cluster up --nodes "$NODES" --dir "$CLUSTER_DIR" --base-port 0 --sync --metrics >"$TMP/endpoints"
mapfile -t endpoints <"$TMP/endpoints"
metrics=
for k in $(seq 1 "$NODES"); do
	m=$(sed -n 's/.*"metrics": *"\([^"]*\)".*/\1/p' "$CLUSTER_DIR/node$k/node.json")
	if [[ -z $m ]]; then
		log "node$k has no metrics address in its node.json"
		exit 1
	fi
	metrics+=${metrics:+,}$m
done
log "$MANY: endpoints ${endpoints[*]}, metrics $metrics"
"$BIN" cluster status --dir "$CLUSTER_DIR" >&2
measure "$MANY" "$NODES" "${endpoints[0]}" "$metrics"
stop_cluster

{
	echo "uptime after: $(uptime)"
	echo "run time: $(($(date -u +%s) - START)) s"
} >>"$OUT/env.txt"

if [[ $MODE == txn ]]; then
	REPORT=bench/results/txn-$(date -u +%Y-%m-%d).md
else
	REPORT=bench/results/cluster-$(date -u +%Y-%m-%d).md
fi
{
	if [[ $MODE == txn ]]; then
		echo "# Transactions on a ${NODES}-node cluster (replication ${NODES}) vs one node, one run"
		echo
		echo "Produced by \`make bench-txn\` (scripts/bench-cluster.sh txn): the single node first, then the ${NODES}-node"
		echo "cluster from \`tyr cluster up --sync --metrics\`, never both at once, every server on loopback on this machine."
		echo "**counter**: every client adds 1 to one 8-byte counter, with an atomic add applied on the server (\`${MANY}\`,"
		echo "\`${ONE}\`) and as a transaction reading the counter and writing it back (\`${MANY}-rmw\`, \`${ONE}-rmw\`),"
		echo "retried on conflict; the ${MANY}/${MANY}-rmw column is the atomic add's speed-up on the cluster."
		echo "**bank**: $ACCOUNTS accounts, $ACCOUNTS_PER_BLOB 8-byte balances per blob; each operation moves 1 to 100 between two"
		echo "random accounts in one transaction (read both, write both, commit), retried on conflict; the balances'"
		echo "sum is checked after the run. Ratios are ${MANY} over each other system. Aborts/op are the aborted"
		echo "attempts per committed operation. Peer messages/op are the chain messages all nodes sent each other"
		echo "during a measurement over its committed operations, aborted attempts' included."
	else
		echo "# ${NODES}-node cluster (replication ${NODES}) vs one node, one run"
		echo
		echo "Produced by \`make bench-cluster\` (scripts/bench-cluster.sh): the single node first, then the ${NODES}-node"
		echo "cluster from \`tyr cluster up --sync --metrics\`, never both at once, every server on loopback on this machine."
		echo "Writes are 4 KiB to pre-created blobs; reads are 4 KiB from preloaded blobs; both with \`--direct\` (each"
		echo "request sent to the node serving its blob). Ratios are ${MANY}/${ONE}. Peer messages/op are the chain"
		echo "messages all nodes sent each other during a measurement (tyr_peer_messages_sent_total, retransmissions"
		echo "included) over its acknowledged operations; requests served/op is 1.00 when no request was forwarded."
	fi
	echo
	sed 's/^/- /' "$OUT/env.txt"
	echo
	"$BIN" bench report --base "$MANY" "$OUT/results.jsonl"
} >"$REPORT"

echo
cat "$REPORT"
log "report written to $REPORT"

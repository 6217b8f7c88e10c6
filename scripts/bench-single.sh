#!/usr/bin/env bash
# Measures one tyr server against Redis on this machine, side by side in one
# run: Redis with an fsync per write (the durability tyr gives with sync on)
# and Redis in memory only (an upper bound). Every server listens on
# 127.0.0.1 only, keeps its data in a temporary directory, and is stopped by
# its PID when the script exits, however it exits.
#
# Environment:
#   BENCH_DURATION     time per workload, system and client count (5s)
#   BENCH_STREAM_SIZE  size of the streamed value (1GiB)
#   BENCH_CLIENTS      client counts for write and read (1,16,64)
#
# Output: bench/out/results.jsonl (one JSON object per measurement),
# bench/out/env.txt (versions and machine load) and bench/out/summary.md
# (tyr/peer ratios), which is also printed.
set -euo pipefail

cd "$(dirname "$0")/.."

BIN=bin/tyr
OUT=bench/out
DURATION=${BENCH_DURATION:-5s}
STREAM_SIZE=${BENCH_STREAM_SIZE:-1GiB}
CLIENTS=${BENCH_CLIENTS:-1,16,64}
VALUE_SIZE=4096

PIDS=()
TMP=$(mktemp -d "${TMPDIR:-/tmp}/tyr-bench.XXXXXX")

cleanup() {
	local status=$?
	for pid in "${PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$TMP"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "bench-single: $*" >&2; }

# A stale binary without the bench command is rebuilt as well as a missing
# one, since the script cannot run without it.
if [[ ! -x $BIN ]] || ! "$BIN" bench --help >/dev/null 2>&1; then
	log "building $BIN"
	go build -o "$BIN" ./cmd/tyr
fi

if ! command -v redis-server >/dev/null; then
	log "installing redis-server"
	SUDO=()
	if [[ $(id -u) -ne 0 ]]; then SUDO=(sudo); fi
	"${SUDO[@]}" apt-get update -qq
	"${SUDO[@]}" apt-get install -y -qq redis-server >/dev/null
fi

. scripts/bench-lib.sh

mkdir -p "$OUT"
: >"$OUT/results.jsonl"

start_tyr
start_redis redis-durable --appendonly yes --appendfsync always --save ''
DURABLE_PORT=$REDIS_PORT
start_redis redis-memory --save '' --appendonly no
MEMORY_PORT=$REDIS_PORT

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "tyr: commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $("$BIN" --help | sed -n 1p)"
	echo "redis: $(redis-server --version)"
	echo "nproc: $(nproc)"
	echo "uptime before: $(uptime)"
	echo "settings: duration $DURATION, clients $CLIENTS, value size $VALUE_SIZE, stream size $STREAM_SIZE"
} >"$OUT/env.txt"

for workload in write read; do
	"$BIN" bench "$workload" --endpoint "$TYR_ADDR" --clients "$CLIENTS" \
		--value-size "$VALUE_SIZE" --duration "$DURATION" --json \
		--peer redis --peer-addr "127.0.0.1:$DURABLE_PORT" --peer-addr "127.0.0.1:$MEMORY_PORT" |
		tee -a "$OUT/results.jsonl"
done
# The stream runs against the in-memory Redis only, as an upper bound on
# moving one large value through a single server.
"$BIN" bench stream --endpoint "$TYR_ADDR" --stream-size "$STREAM_SIZE" --json \
	--peer redis --peer-addr "127.0.0.1:$MEMORY_PORT" |
	tee -a "$OUT/results.jsonl"

# One hot counter: tyr's atomic add and transactional read-modify-write
# against INCRBY on the durable Redis (appendfsync always).
"$BIN" bench counter --endpoint "$TYR_ADDR" --clients "1,32" --duration "$DURATION" --json \
	--peer redis --peer-addr "127.0.0.1:$DURABLE_PORT" |
	tee -a "$OUT/results.jsonl"

echo "uptime after: $(uptime)" >>"$OUT/env.txt"

{
	echo "# tyr bench: one node, against Redis"
	echo
	sed 's/^/- /' "$OUT/env.txt"
	echo
	"$BIN" bench report "$OUT/results.jsonl"
} >"$OUT/summary.md"

echo
cat "$OUT/summary.md"

#!/usr/bin/env bash
# profile.sh: where the nodes' CPU goes under the read-path workloads of
# `make bench` (`make profile`). It starts a 3-node cluster as make bench
# does (tyr cluster up --sync, replication 3), runs each workload with tyr
# bench, takes a CPU profile of every node while it runs, and writes the
# hottest functions, over the three nodes together, to
# bench/results/profiles-DATE.md (PROFILE_REPORT overrides). No peer runs:
# the ratios come from make bench; this says where a node spends its time.
#
#   read 1KiB, read 100KiB   32 clients, --direct, power-law keys
#   readers beside writers   16 readers (read 1KiB) and 16 writers (write
#                            4KiB) at once, as the isolation workload's
#                            50/50 mix
#   stream get               a 4 GiB value at replication 1, profiled
#                            from the end of its put
#   object put 16MiB         8 clients; the nodes' heaps (not CPU) and
#                            resident memory in the middle of it
#
#   counter, 4 KiB writes    32 clients each: the commit path (the
#                            "commit" set)
#
# Environment: PROFILE_SECONDS (default 10) per profile; PROFILE_SETS, the
# sets to run: "read" (every workload above but the commit path) and
# "commit" (default: both).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-bin/tyr}
SECONDS_PER=${PROFILE_SECONDS:-10}
SETS=" ${PROFILE_SETS:-read commit} "
REPORT=${PROFILE_REPORT:-bench/results/profiles-$(date -u +%Y-%m-%d).md}
NODES=3
TMP=$(mktemp -d "${TMPDIR:-/tmp}/tyr-profile.XXXXXX")
CLUSTER_DIR=$TMP/cluster
JOBS=()

log() { echo "profile: $*" >&2; }

cleanup() {
	local status=$?
	for pid in "${JOBS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	"$BIN" cluster down --dir "$CLUSTER_DIR" >&2 || true
	rm -rf "$TMP"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

go build -o "$BIN" ./cmd/tyr
"$BIN" cluster up --nodes "$NODES" --dir "$CLUSTER_DIR" --base-port 0 --sync --metrics >"$TMP/endpoints"
mapfile -t endpoints <"$TMP/endpoints"
EP=${endpoints[0]}
metrics=()
for k in $(seq 1 "$NODES"); do
	metrics+=("$(sed -n 's/.*"metrics": "\([^"]*\)".*/\1/p' "$CLUSTER_DIR/node$k/node.json")")
done

# capture NAME: a CPU profile of every node at once, for SECONDS_PER.
capture() {
	local name=$1 k pids=()
	for k in $(seq 1 "$NODES"); do
		curl -sf -o "$TMP/$name.node$k.pprof" "http://${metrics[k - 1]}/debug/pprof/profile?seconds=$SECONDS_PER" &
		pids+=($!)
	done
	wait "${pids[@]}"
}

# report NAME TITLE WHAT: the top of NAME's profiles, merged over the nodes.
report() {
	{
		echo "## $2"
		echo
		echo "$3"
		echo
		echo '```'
		go tool pprof -top -nodecount=25 "$TMP/$1".node*.pprof 2>/dev/null | sed -n '/^Showing\|^ *flat/,$p'
		echo '```'
		echo
		echo 'Cumulative, the largest subtrees:'
		echo
		echo '```'
		go tool pprof -top -cum -nodecount=25 "$TMP/$1".node*.pprof 2>/dev/null | sed -n '/^ *flat/,$p'
		echo '```'
		echo
	} >>"$REPORT"
}

# result FILE: tyr's result line in FILE, as tyr bench --json wrote it.
result() { grep -m1 '"system":"tyr' "$1" | tr -d '\n'; }

# during SETTLE NAME CMD...: runs CMD, waits SETTLE seconds (its load), then
# captures NAME's profiles, and waits for CMD.
during() {
	local settle=$1 name=$2
	shift 2
	"$@" >"$TMP/$name.out" 2>&1 &
	local pid=$!
	JOBS+=("$pid")
	sleep "$settle"
	capture "$name"
	wait "$pid"
}

RUN=$((SECONDS_PER + 25)) # seconds each workload runs: loading, settling, the profile
READ=(--endpoint "$EP" --replication "$NODES" --direct --duration "${RUN}s" --json)

mkdir -p "$(dirname "$REPORT")"
{
	echo "# CPU profiles of the nodes:$SETS"
	echo
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ); tyr: commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' with uncommitted changes'); nproc $(nproc); load before: $(uptime | sed 's/.*load average: //')"
	echo
	echo "\`make profile\` (scripts/profile.sh): a cluster of $NODES nodes from \`tyr cluster up --sync\`, replication $NODES unless said,"
	echo "the clients on the same machine. Each table is one profile of ${SECONDS_PER} s of every node, merged: flat is the"
	echo "time in the function itself, cum with what it calls, as a share of all the samples of the three nodes."
	echo
} >"$REPORT"

# want SET: whether PROFILE_SETS asks for SET.
want() { [[ $SETS == *" $1 "* ]]; }

if want read; then
	log "read 1KiB"
	during 20 read1k "$BIN" bench read "${READ[@]}" --clients 32 --value-size 1KiB --read-keys 10000
	report read1k "1 KiB reads, 32 clients" "$(result "$TMP/read1k.out" || true)"

	log "read 100KiB"
	during 20 read100k "$BIN" bench read "${READ[@]}" --clients 32 --value-size 100KiB --read-keys 1000
	report read100k "100 KiB reads, 32 clients" "$(result "$TMP/read100k.out" || true)"

	log "readers beside writers"
	"$BIN" bench read "${READ[@]}" --clients 16 --value-size 1KiB --read-keys 10000 >"$TMP/mixr.out" 2>&1 &
	readers=$!
	JOBS+=("$readers")
	during 20 mixed "$BIN" bench write "${READ[@]}" --clients 16 --value-size 4KiB
	wait "$readers"
	report mixed "16 readers (1 KiB) beside 16 writers (4 KiB)" \
		"readers: $(result "$TMP/mixr.out" || true); writers: $(result "$TMP/mixed.out" || true)"

	log "stream get"
	# The get follows the put; the profile starts once the put's result is out.
	"$BIN" bench stream --endpoint "$EP" --replication 1 --stream-size 4GiB --json >"$TMP/stream.out" 2>&1 &
	pid=$!
	JOBS+=("$pid")
	until grep -q '"workload":"stream-put"' "$TMP/stream.out" 2>/dev/null; do
		if ! kill -0 "$pid" 2>/dev/null; then
			break
		fi
		sleep 0.2
	done
	SECONDS_PER=3 capture stream
	wait "$pid"
	report stream "Stream get of 4 GiB, replication 1 (3 s from the end of the put)" "$(grep '"workload":"stream-get"' "$TMP/stream.out" | tr -d '\n')"

	log "object put 16MiB"
	# Memory, not CPU: the heap of every node in the middle of 8 clients'
	# puts of 16 MiB objects, where make bench finds the nodes' peak.
	"$BIN" bench object --endpoint "$EP" --replication "$NODES" --direct --clients 8 --object-sizes 16MiB \
		--duration "${RUN}s" --op-timeout 120s --json >"$TMP/object.out" 2>&1 &
	pid=$!
	JOBS+=("$pid")
	sleep 15
	for k in $(seq 1 "$NODES"); do
		curl -sf -o "$TMP/heap.node$k.pprof" "http://${metrics[k - 1]}/debug/pprof/heap"
		rss[k]=$(awk '/VmRSS/ {print int($2 / 1024)}' "/proc/$(<"$CLUSTER_DIR/node$k/pid")/status")
	done
	wait "$pid"
	{
		echo "## Heap during puts of 16 MiB objects, 8 clients"
		echo
		echo "$(result "$TMP/object.out" || true)"
		echo
		echo "Resident memory when the heap was taken (MiB): $(for k in $(seq 1 "$NODES"); do printf 'node%d %s  ' "$k" "${rss[k]}"; done)"
		echo
		for k in $(seq 1 "$NODES"); do
			echo "node$k, in-use heap:"
			echo
			echo '```'
			go tool pprof -sample_index=inuse_space -top -nodecount=15 "$TMP/heap.node$k.pprof" 2>/dev/null | sed -n '/^Showing\|^ *flat/,$p'
			echo '```'
			echo
		done
	} >>"$REPORT"
fi

if want commit; then
	COMMIT=(--endpoint "$EP" --replication "$NODES" --metrics-addr "$(IFS=,; echo "${metrics[*]}")" --duration "${RUN}s" --json)
	log "counter"
	during 15 counter "$BIN" bench counter "${COMMIT[@]}" --clients 32
	report counter "Counter, atomic adds, 32 clients" "$(result "$TMP/counter.out" || true)"
	log "write 4KiB"
	during 15 write "$BIN" bench write "${COMMIT[@]}" --direct --clients 32 --value-size 4KiB
	report write "4 KiB writes, 32 clients" "$(result "$TMP/write.out" || true)"
fi

log "report: $REPORT"

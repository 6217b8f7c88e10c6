# Shared by the bench scripts (sourced, not run). The caller defines log,
# BIN (the tyr binary), TMP (a temporary directory it removes) and PIDS
# (the servers it stops on exit).

# free_port prints a port on 127.0.0.1 that nothing listens on now. Another
# process may take it before the server binds it; the server then fails to
# start and the script stops with its log.
free_port() {
	local port
	for _ in $(seq 1 200); do
		port=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return 0
		fi
	done
	log "no free port found"
	return 1
}

# wait_for NAME PID LOG CHECK... runs CHECK until it succeeds, for up to 30
# s, and fails with the server's log if it does not or the server exits.
wait_for() {
	local name=$1 pid=$2 logfile=$3
	shift 3
	for _ in $(seq 1 300); do
		if "$@" 2>/dev/null; then
			log "$name up (pid $pid)"
			return 0
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			break
		fi
		sleep 0.1
	done
	log "$name did not start"
	tail -n 30 "$logfile" >&2 || true
	return 1
}

# start_tyr starts one tyr server on 127.0.0.1 and sets TYR_ADDR.
start_tyr() {
	local dir=$TMP/tyr
	mkdir -p "$dir"
	"$BIN" server --data "$dir/data" --listen 127.0.0.1:0 --ready-file "$dir/addr" \
		--log-level warn 2>"$dir/server.log" &
	local pid=$!
	PIDS+=("$pid")
	wait_for "tyr" "$pid" "$dir/server.log" test -s "$dir/addr"
	TYR_ADDR=$(<"$dir/addr")
}

redis_ping() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf 'PING\r\n' >&3
		read -r -t 2 line <&3 || exit 1
		[[ $line == +PONG* ]]
	)
}

# start_redis NAME ARGS... starts a Redis server with ARGS and sets
# REDIS_PORT. It runs in the script's own shell, not in a command
# substitution, so the server's PID is recorded for cleanup.
start_redis() {
	local name=$1
	shift
	local dir=$TMP/$name
	mkdir -p "$dir"
	REDIS_PORT=$(free_port)
	redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --protected-mode yes --daemonize no \
		--dir "$dir" --logfile "$dir/redis.log" "$@" &
	local pid=$!
	PIDS+=("$pid")
	wait_for "$name on 127.0.0.1:$REDIS_PORT" "$pid" "$dir/redis.log" redis_ping "$REDIS_PORT"
}

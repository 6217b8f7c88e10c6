# Shared by the bench scripts (sourced, not run). The caller defines log,
# BIN (the tyr binary), TMP (a temporary directory it removes) and PIDS
# (the servers it stops on exit, with stop_pid).

PG_BIN=/usr/lib/postgresql/15/bin

# stop_pid PID stops one server this script started and waits until it is
# gone: not every server is a child of this shell (PostgreSQL runs under
# its own user), so wait alone cannot tell.
stop_pid() {
	local pid=$1
	kill "$pid" 2>/dev/null || return 0
	for _ in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	wait "$pid" 2>/dev/null || true
}

# install_peers PACKAGE... installs from apt those of the peers' Debian
# packages (etcd-server, zookeeper, redis-server, postgresql-15) whose
# server is missing.
install_peers() {
	local -a missing=() sudo=()
	local pkg
	for pkg in "$@"; do
		case $pkg in
		etcd-server) command -v etcd >/dev/null || missing+=("$pkg") ;;
		zookeeper) [[ -x /usr/share/zookeeper/bin/zkServer.sh ]] || missing+=("$pkg") ;;
		redis-server) command -v redis-server >/dev/null || missing+=("$pkg") ;;
		postgresql-15) [[ -x $PG_BIN/postgres ]] || missing+=("$pkg") ;;
		esac
	done
	if ((${#missing[@]} == 0)); then
		return 0
	fi
	if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
	log "installing ${missing[*]}"
	"${sudo[@]}" apt-get update -qq
	"${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
}


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

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1"); }

# PostgreSQL refuses to run as root, so as root its directory belongs to
# the postgres user and it runs as that user (setpriv execs, so the PID is
# the server's own).
start_postgres() {
	local dir=$TMP/pg
	local -a as=()
	mkdir -p "$dir"
	if [[ $(id -u) -eq 0 ]]; then
		chmod 711 "$TMP"
		chown postgres: "$dir"
		as=(setpriv --reuid=postgres --regid=postgres --init-groups --)
	fi
	PG_PORT=$(free_port)
	"${as[@]}" "$PG_BIN/initdb" -D "$dir/data" -U bench --auth=trust --no-sync >"$dir/initdb.log" 2>&1 ||
		{
			cat "$dir/initdb.log" >&2
			return 1
		}
	"${as[@]}" "$PG_BIN/postgres" -D "$dir/data" -p "$PG_PORT" -c listen_addresses=127.0.0.1 \
		-c unix_socket_directories="$dir" -c fsync=on -c synchronous_commit=on -c max_connections=200 \
		>"$dir/postgres.log" 2>&1 &
	local pid=$!
	PIDS+=("$pid")
	wait_for "postgres on 127.0.0.1:$PG_PORT" "$pid" "$dir/postgres.log" \
		"$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"
	PG_URL="postgres://bench@127.0.0.1:$PG_PORT/postgres?sslmode=disable"
}

start_etcd() {
	local dir=$TMP/etcd
	mkdir -p "$dir"
	ETCD_PORT=$(free_port)
	local peer_port
	peer_port=$(free_port)
	etcd --name bench --data-dir "$dir/data" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
		--initial-cluster "bench=http://127.0.0.1:$peer_port" --logger zap --log-level warn \
		>"$dir/etcd.log" 2>&1 &
	local pid=$!
	PIDS+=("$pid")
	wait_for "etcd on 127.0.0.1:$ETCD_PORT" "$pid" "$dir/etcd.log" \
		curl -fsS -o /dev/null "http://127.0.0.1:$ETCD_PORT/health"
}

# ZooKeeper runs standalone with its defaults but for where it listens: the
# client port on 127.0.0.1, no admin server and no JMX (both would listen on
# every interface), and srvr allowed so the bench can ask its version.
# zkServer.sh execs java, so the PID is the server's own.
start_zookeeper() {
	local dir=$TMP/zookeeper
	mkdir -p "$dir/data"
	ZK_PORT=$(free_port)
	cat >"$dir/zoo.cfg" <<-EOF
		tickTime=2000
		dataDir=$dir/data
		clientPort=$ZK_PORT
		clientPortAddress=127.0.0.1
		admin.enableServer=false
		4lw.commands.whitelist=srvr
	EOF
	JMXDISABLE=true JVMFLAGS="-Xmx512m" /usr/share/zookeeper/bin/zkServer.sh start-foreground "$dir/zoo.cfg" \
		>"$dir/zookeeper.log" 2>&1 &
	local pid=$!
	PIDS+=("$pid")
	wait_for "zookeeper on 127.0.0.1:$ZK_PORT" "$pid" "$dir/zookeeper.log" listening "$ZK_PORT"
}

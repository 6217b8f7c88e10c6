#!/bin/sh
# s3-compat.sh: runs versitygw's S3 compatibility suite (`versitygw test
# full-flow`, the version go.mod names) against tyr's S3 gateway on a
# fresh server, prints the pass and fail counts, and fails when a test
# fails that tests/s3compat/known-failures.txt does not list, or passes
# though it does (so the list stays true). The suite runs in its
# --azure-test-mode, which skips the checksum tests that crash it when a
# server computes no checksums.
#
#   scripts/s3-compat.sh            # bin/tyr, or $TYR_BIN
#   S3COMPAT_LOG=FILE scripts/...   # keep the suite's output
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
tyr=${TYR_BIN:-$root/bin/tyr}
known=$root/tests/s3compat/known-failures.txt
. "$root/scripts/known-failures.sh"
vgw=$(sh "$root/scripts/versitygw.sh")
version=${vgw##*versitygw-}

work=$(mktemp -d)
pid=""
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$tyr" server --data "$work/data" --listen 127.0.0.1:0 --gossip-listen 127.0.0.1:0 --log-level warn \
	--min-free 0 --ready-file "$work/ready" --s3-listen "127.0.0.1:$port" \
	--s3-access-key compat-access --s3-secret-key compat-secret >"$work/server.log" 2>&1 &
pid=$!
i=0
until python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null; do
	i=$((i + 1))
	if [ $i -gt 300 ] || ! kill -0 "$pid" 2>/dev/null; then
		echo "s3-compat: the gateway did not start" >&2
		cat "$work/server.log" >&2
		exit 1
	fi
	sleep 0.1
done

# The suite's own TLS settings would choke on a CA bundle from the
# environment; it talks plain HTTP on loopback.
(cd "$work" && env -u AWS_CA_BUNDLE "$vgw" test --access compat-access --secret compat-secret \
	--endpoint "http://127.0.0.1:$port" full-flow --azure-test-mode >"$work/suite.log" 2>&1) || true
sed 's/\x1b\[[0-9;]*m//g' "$work/suite.log" >"$work/suite.txt"
[ -n "${S3COMPAT_LOG:-}" ] && cp "$work/suite.txt" "$S3COMPAT_LOG"
grep '^PASS ' "$work/suite.txt" | awk '{print $2}' | sort -u >"$work/passed"
grep '^FAIL ' "$work/suite.txt" | awk '{print $2}' | sed 's/:$//' | sort -u >"$work/failed"
passed=$(wc -l <"$work/passed")
failed=$(wc -l <"$work/failed")
if [ "$passed" -lt 100 ]; then
	echo "s3-compat: only $passed tests passed; the suite did not run through:" >&2
	tail -20 "$work/suite.txt" >&2
	exit 1
fi
echo "s3-compat: versitygw $version full-flow: $passed passed, $failed failed"
show() { grep "^FAIL $1" "$work/suite.txt"; }
check_known s3-compat "$known" "$work/failed" show

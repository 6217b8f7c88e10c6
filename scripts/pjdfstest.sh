#!/bin/sh
# pjdfstest.sh: runs pjdfstest (the crates.io package, built once into
# build/pjdfstest-VERSION by cargo) on a TýrFS mount of a fresh server,
# prints the pass, fail and skip counts, and fails when a test fails that
# tests/pjdfstest/known-failures.txt does not list, or passes though it
# does (so the list stays true). Runs as root (pjdfstest switches users);
# needs /dev/fuse and fusermount3 (scripts/deps.sh installs fuse3).
#
#   scripts/pjdfstest.sh               # bin/tyr, or $TYR_BIN
#   PJDFSTEST_LOG=FILE scripts/...     # keep the suite's output
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
tyr=${TYR_BIN:-$root/bin/tyr}
known=$root/tests/pjdfstest/known-failures.txt
version=0.2.2
. "$root/scripts/known-failures.sh"
suite=$root/build/pjdfstest-$version/bin/pjdfstest
if [ ! -x "$suite" ]; then
	cargo install --quiet --locked --root "$root/build/pjdfstest-$version" pjdfstest --version "$version"
fi

work=$(mktemp -d)
chmod 755 "$work" # the users the suite switches to walk into the mount
pid="" mpid=""
cleanup() {
	if [ -n "$mpid" ]; then
		fusermount3 -u "$work/mnt" 2>/dev/null || true
		kill "$mpid" 2>/dev/null || true
		wait "$mpid" 2>/dev/null || true
	fi
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

"$tyr" server --data "$work/data" --listen 127.0.0.1:0 --gossip-listen 127.0.0.1:0 --log-level warn \
	--min-free 0 --ready-file "$work/ready" >"$work/server.log" 2>&1 &
pid=$!
i=0
until [ -s "$work/ready" ]; do
	i=$((i + 1))
	if [ $i -gt 300 ] || ! kill -0 "$pid" 2>/dev/null; then
		echo "pjdfstest: the server did not start" >&2
		cat "$work/server.log" >&2
		exit 1
	fi
	sleep 0.1
done
mkdir "$work/mnt"
"$tyr" --endpoint "$(cat "$work/ready")" mount pjdfstest "$work/mnt" --create --allow-other >"$work/mount.log" 2>&1 &
mpid=$!
i=0
until grep -qs " $work/mnt fuse" /proc/mounts; do
	i=$((i + 1))
	if [ $i -gt 300 ] || ! kill -0 "$mpid" 2>/dev/null; then
		echo "pjdfstest: the mount did not come up" >&2
		cat "$work/mount.log" >&2
		exit 1
	fi
	sleep 0.1
done

(cd "$work/mnt" && "$suite" -c "$root/tests/pjdfstest/pjdfstest.toml" -p "$work/mnt" >"$work/suite.txt" 2>&1) || true
[ -n "${PJDFSTEST_LOG:-}" ] && cp "$work/suite.txt" "$PJDFSTEST_LOG"
# Result lines are "NAME  ok|FAILED|skipped".
awk '$NF == "ok" && NF == 2 {print $1}' "$work/suite.txt" | sort -u >"$work/passed"
awk '$NF == "FAILED" && NF == 2 {print $1}' "$work/suite.txt" | sort -u >"$work/failed"
awk '$NF == "skipped" && NF == 2 {print $1}' "$work/suite.txt" | sort -u >"$work/skipped"
passed=$(wc -l <"$work/passed")
failed=$(wc -l <"$work/failed")
skipped=$(wc -l <"$work/skipped")
if [ "$passed" -lt 100 ]; then
	echo "pjdfstest: only $passed tests passed; the suite did not run through:" >&2
	tail -30 "$work/suite.txt" >&2
	exit 1
fi
echo "pjdfstest: $version on a TýrFS mount: $passed passed, $failed failed, $skipped skipped"
show() { grep -A2 "^$1 " "$work/suite.txt"; }
check_known pjdfstest "$known" "$work/failed" show

#!/bin/sh
# pjdfstest.sh: runs pjdfstest (the crates.io package, built once into
# build/pjdfstest-VERSION by cargo) on a TýrFS mount of a fresh server,
# twice: on a mount as `tyr mount` makes one by default (--cache 1s) and
# on one that caches nothing (--cache 0), each with a directory of the
# local disk as the second file system the tests of renames and links
# across file systems need. It runs in a mount namespace of its own, where
# tyr is the mount helper on the standard PATH (a link named tyrfs, bound
# over /usr/local/sbin), so that the suite's `mount -o remount,ro` works as
# on a machine with tyr installed. For each it prints the pass,
# fail and skip counts, and fails when a test fails that
# tests/pjdfstest/known-failures.txt does not list, or passes though it
# does (so the list stays true). Runs as root (pjdfstest switches users);
# needs /dev/fuse and fusermount3 (scripts/deps.sh installs fuse3).
#
#   scripts/pjdfstest.sh               # bin/tyr, or $TYR_BIN
#   PJDFSTEST_LOG=FILE scripts/...     # keep the suite's outputs (FILE.KEYSPACE)
set -eu
if [ -z "${PJDFSTEST_NS:-}" ]; then
	PJDFSTEST_NS=1 exec unshare --mount --propagation private sh "$0" "$@"
fi
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
# The second file system (-s), writable by the users the suite switches to.
mkdir "$work/secondary" && chmod 777 "$work/secondary"
chmod 755 "$work" # the users the suite switches to walk into the mount
sed 's/^allow_remount = false$/allow_remount = true/' "$root/tests/pjdfstest/pjdfstest.toml" >"$work/remount.toml"
grep -q '^allow_remount = true$' "$work/remount.toml"
# The mount helper, seen only in this mount namespace.
mkdir "$work/helper" && ln -s "$tyr" "$work/helper/tyrfs"
mount --bind "$work/helper" /usr/local/sbin
pid="" mpid="" mnt=""
cleanup() {
	if [ -n "$mpid" ]; then
		fusermount3 -u "$mnt" 2>/dev/null || true
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
# await PID LOG WHAT CHECK...: waits up to 30 s for CHECK to succeed while
# process PID runs; else says WHAT did not come up, shows LOG and exits.
await() {
	_pid=$1 _log=$2 _what=$3
	shift 3
	_i=0
	until "$@"; do
		_i=$((_i + 1))
		if [ $_i -gt 300 ] || ! kill -0 "$_pid" 2>/dev/null; then
			echo "pjdfstest: $_what did not come up" >&2
			cat "$_log" >&2
			exit 1
		fi
		sleep 0.1
	done
}
await "$pid" "$work/server.log" "the server" test -s "$work/ready"
# run_suite NAME FLAGS...: the suite on a new mount of keyspace NAME made with
# FLAGS, unmounted after.
run_suite() {
	ks=$1
	shift
	mnt=$work/mnt-$ks
	mkdir "$mnt"
	"$tyr" --endpoint "$(cat "$work/ready")" mount "$ks" "$mnt" --create --allow-other "$@" >"$work/mount.log" 2>&1 &
	mpid=$!
	await "$mpid" "$work/mount.log" "the mount" grep -qs " $mnt fuse" /proc/mounts
	(cd "$mnt" && "$suite" -c "$root/tests/pjdfstest/pjdfstest.toml" -p "$mnt" -s "$work/secondary" >"$work/suite.txt" 2>&1) || true
	# Then the tests that remount it read-only and back (erofs), which the
	# first pass skips, alone (see pjdfstest.toml).
	(cd "$mnt" && "$suite" -c "$work/remount.toml" -p "$mnt" -s "$work/secondary" erofs >>"$work/suite.txt" 2>&1) || true
	[ -n "${PJDFSTEST_LOG:-}" ] && cp "$work/suite.txt" "$PJDFSTEST_LOG.$ks"
	fusermount3 -u "$mnt" 2>/dev/null || true
	kill "$mpid" 2>/dev/null || true
	wait "$mpid" 2>/dev/null || true
	mpid=""
	# Result lines are "NAME  ok|FAILED|skipped".
	awk '$NF == "ok" && NF == 2 {print $1}' "$work/suite.txt" | sort -u >"$work/passed"
	awk '$NF == "FAILED" && NF == 2 {print $1}' "$work/suite.txt" | sort -u >"$work/failed"
	# A test the first pass skipped and the second ran counts as run.
	awk '$NF == "skipped" && NF == 2 {print $1}' "$work/suite.txt" | sort -u | comm -23 - "$work/passed" | comm -23 - "$work/failed" >"$work/skipped"
	passed=$(wc -l <"$work/passed")
	failed=$(wc -l <"$work/failed")
	skipped=$(wc -l <"$work/skipped")
	if [ "$passed" -lt 100 ]; then
		echo "pjdfstest: only $passed tests passed on a mount with $*; the suite did not run through:" >&2
		tail -30 "$work/suite.txt" >&2
		exit 1
	fi
	echo "pjdfstest: $version on a TýrFS mount with $*: $passed passed, $failed failed, $skipped skipped"
	check_known pjdfstest "$known" "$work/failed" show
}
show() { grep -A2 "^$1 " "$work/suite.txt"; }
run_suite pjdfstest-cache --cache 1s
run_suite pjdfstest-strict --cache 0

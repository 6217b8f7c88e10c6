#!/bin/sh
# versitygw.sh: builds versitygw (the version go.mod names) into
# build/versitygw-VERSION when it is not there yet, and prints its path.
# The S3 compatibility suite and the S3 benchmark's POSIX peer run it.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
version=$(cd "$root" && go list -m -f '{{.Version}}' github.com/versity/versitygw)
bin=$root/build/versitygw-$version
if [ ! -x "$bin" ]; then
	echo "building versitygw $version" >&2
	tmp=$(mktemp -d)
	GOBIN="$tmp" go install "github.com/versity/versitygw/cmd/versitygw@$version"
	mkdir -p "$root/build"
	mv "$tmp/versitygw" "$bin"
	rmdir "$tmp"
fi
echo "$bin"

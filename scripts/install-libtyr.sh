#!/bin/sh
# install-libtyr.sh PREFIX: builds libtyr, the Go client as a C shared
# library, and installs
#   PREFIX/lib/libtyr.so
#   PREFIX/include/tyr.h            (libtyr/tyr.h, the API's header)
#   PREFIX/lib/pkgconfig/tyr.pc
# so that `pkg-config --cflags --libs tyr` (with PKG_CONFIG_PATH holding
# PREFIX/lib/pkgconfig unless PREFIX is a system one) compiles a program
# against it. GO names the go command (default: go). The Version of the
# .pc file is the header's TYR_API_VERSION.
set -eu

if [ $# -ne 1 ] || [ -z "$1" ]; then
	echo "usage: $0 PREFIX" >&2
	exit 2
fi
prefix=$1
case $prefix in
/*) ;;
*) prefix=$(pwd)/$prefix ;;
esac

root=$(cd "$(dirname "$0")/.." && pwd)
go=${GO:-go}

version=$(sed -n 's/^#define TYR_API_VERSION \([0-9][0-9]*\).*/\1/p' "$root/libtyr/tyr.h")
if [ -z "$version" ]; then
	echo "install-libtyr.sh: no TYR_API_VERSION in $root/libtyr/tyr.h" >&2
	exit 1
fi

build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT

# cgo also writes a generated libtyr.h next to the library; it is not
# installed: tyr.h is the API.
(cd "$root" && "$go" build -buildmode=c-shared -trimpath -o "$build/libtyr.so" ./libtyr)

install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0755 "$build/libtyr.so" "$prefix/lib/libtyr.so"
install -m 0644 "$root/libtyr/tyr.h" "$prefix/include/tyr.h"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" \
	"$root/libtyr/tyr.pc.in" >"$build/tyr.pc"
install -m 0644 "$build/tyr.pc" "$prefix/lib/pkgconfig/tyr.pc"

echo "installed libtyr $version in $prefix"

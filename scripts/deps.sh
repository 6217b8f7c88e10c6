#!/bin/sh
# deps.sh: installs the Debian packages the tests of the C API and of the
# Python package need when they are missing: a C compiler (gcc),
# pkg-config, MPICH (mpicc, mpiexec), Python 3 with venv and pip,
# rclone (an S3 client the S3 tests drive), and FUSE 3 (fusermount3, for
# TýrFS's mount and its tests). Uses
# apt-get, as root or through sudo; does nothing when all are present.
set -eu

missing=""
need() { # need COMMAND PACKAGE...
	cmd=$1
	shift
	if ! command -v "$cmd" >/dev/null 2>&1; then
		missing="$missing $*"
	fi
}
need gcc gcc libc6-dev
need pkg-config pkg-config
need mpicc mpich libmpich-dev
need mpiexec mpich
need python3 python3 python3-venv python3-pip
need rclone rclone
need fusermount3 fuse3

# mpicc is there but not the MPI headers (libmpich-dev without mpich, or
# the reverse): ask for both.
if [ -z "$missing" ] && ! echo '#include <mpi.h>' | mpicc -E -x c - >/dev/null 2>&1; then
	missing="mpich libmpich-dev"
fi

# Debian's python3 comes without venv's pip (ensurepip).
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
	missing="$missing python3-venv python3-pip"
fi

[ -z "$missing" ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
	sudo=""
elif command -v sudo >/dev/null 2>&1; then
	sudo="sudo"
else
	echo "deps.sh: missing packages:$missing; run as root or install sudo" >&2
	exit 1
fi

echo "deps.sh: installing$missing"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
# shellcheck disable=SC2086 # one word per package
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null

#!/usr/bin/env bash
# The Python client against the Go client (python/bench/bench.py) on one
# fresh server: 4 KiB writes and 1 KiB reads at 1 and 16 threads and
# processes, and a stream of STREAM (default 1GiB), each beside the same
# `tyr bench` workload in the same run. Installs the package into the virtual
# environment of `make python` (build/venv), made if missing.
# Usage: scripts/bench-python.sh [DURATION_SECONDS (default 10)]
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-10}
py=build/venv/bin/python
[[ -x $py ]] || python3 -m venv build/venv
$py -m pip install -q --disable-pip-version-check .
make -s build
dir=$(mktemp -d /tmp/tyr-pybench-XXXXXX)
port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ep=127.0.0.1:$port
bin/tyr server --data "$dir/data" --listen "$ep" --ready-file "$dir/ready" >"$dir/log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [[ -s $dir/ready ]] && break; sleep 0.1; done
$py python/bench/bench.py --endpoint "$ep" --tyr bin/tyr --duration "$duration" --stream-size "${STREAM:-1GiB}"

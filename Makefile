# tyr — build, run and test. `make run` and `make test` are all a newcomer needs.
GO          ?= go
BIN         := bin/tyr
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.7.0
FUZZTIME    ?= 20000x
PREFIX      ?= /usr/local

.PHONY: build install libtyr install-libtyr deps python s3compat fstest run test unit lint fuzz fuzz-long gc-soak crash-long sim ring-sim torture bench profile bench-peers bench-cluster bench-txn bench-fs bench-fs-link proto clean

build:
	$(GO) build -o $(BIN) ./cmd/tyr

# `make install PREFIX=/usr/local` installs tyr, and a link to it named
# tyrfs: the program mount(8) runs (through mount.fuse3) for a file system
# of type fuse.tyrfs, so that TýrFS mounts can come from /etc/fstab.
install: build
	install -D -m 755 $(BIN) $(DESTDIR)$(PREFIX)/bin/tyr
	ln -sf tyr $(DESTDIR)$(PREFIX)/bin/tyrfs

# libtyr: the Go client as a C shared library; tyr.h is its API.
# `make install-libtyr PREFIX=/usr/local` installs the library, tyr.h and
# a pkg-config file (scripts/install-libtyr.sh).
libtyr:
	$(GO) build -buildmode=c-shared -o build/libtyr.so ./libtyr

install-libtyr:
	GO=$(GO) sh scripts/install-libtyr.sh $(PREFIX)

# Builds and starts a local server on an embedded store in ./data, with
# the S3 API on 127.0.0.1:7480 under development credentials (printed;
# S3_ACCESS_KEY and S3_SECRET_KEY change them).
S3_ACCESS_KEY ?= tyr-dev
S3_SECRET_KEY ?= tyr-dev-secret
run: build
	@echo "S3 API: http://127.0.0.1:7480  access key: $(S3_ACCESS_KEY)  secret key: $(S3_SECRET_KEY)"
	TYR_S3_ACCESS_KEY=$(S3_ACCESS_KEY) TYR_S3_SECRET_KEY=$(S3_SECRET_KEY) \
		$(BIN) server --data ./data --listen 127.0.0.1:7420 --s3-listen 127.0.0.1:7480

# The CI target: the packages the tests need, static checks, all tests
# under the race detector, the Python package's tests (the S3 gateway's
# among them), versitygw's S3 compatibility suite, and a brief run of every
# fuzz target.
test: deps lint unit python s3compat fstest fuzz

# pjdfstest (crates.io, built by cargo into build/) on a TýrFS mount,
# compared with the known failures in tests/pjdfstest/known-failures.txt
# (scripts/pjdfstest.sh). Needs root and /dev/fuse.
fstest: build
	TYR_BIN=$(CURDIR)/$(BIN) sh scripts/pjdfstest.sh

# versitygw's S3 suite against the gateway, compared with the known
# failures in tests/s3compat/known-failures.txt (scripts/s3-compat.sh).
s3compat: build
	TYR_BIN=$(CURDIR)/$(BIN) sh scripts/s3-compat.sh

# The Debian packages of the C API's tests and of a Python virtual
# environment, installed when missing (scripts/deps.sh).
deps:
	sh scripts/deps.sh

# The Python package as a user installs it: a fresh virtual environment in
# build/venv, `pip install .[test]` from the repository (which builds
# libtyr), `import tyr` from outside the repository, pyflakes' checks
# (ruff) and mypy over the package, then pytest against real servers and a
# 3-node cluster (python/tests).
VENV := build/venv
python: build
	rm -rf $(VENV)
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check '.[test]'
	cd / && $(CURDIR)/$(VENV)/bin/python -c "import tyr; print('tyr', tyr.__version__, 'from', tyr.__file__)"
	$(VENV)/bin/pip install -q --disable-pip-version-check ruff mypy
	$(VENV)/bin/ruff check -q --no-cache --select F,E9 python
	cd python && ../$(VENV)/bin/mypy --cache-dir=/dev/null --ignore-missing-imports tyr
	TYR_BIN=$(CURDIR)/$(BIN) $(VENV)/bin/python -m pytest -q -p no:cacheprovider python/tests

unit:
	$(GO) test -race -count=1 -timeout 45m ./...

lint:
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1)

# Each fuzz target for FUZZTIME: 20,000 inputs in `make test` (5-15 s here);
# `make fuzz-long` runs 10m each. A count, not a duration, in `make test`:
# with a duration, Go 1.26's fuzzing coordinator may report its own stop as
# "context deadline exceeded" on a loaded machine (go.dev/issue/75804, fixed
# in Go 1.27); such a failure writes no failing input under testdata/fuzz.
fuzz:
	$(GO) test ./internal/server -run '^$$' -fuzz '^FuzzDecodeCommit$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/server -run '^$$' -fuzz '^FuzzRequests$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/node -run '^$$' -fuzz '^FuzzPeerMessage$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/node -run '^$$' -fuzz '^FuzzPeerRequests$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/node -run '^$$' -fuzz '^FuzzPutRing$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/node -run '^$$' -fuzz '^FuzzDecommission$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/membership -run '^$$' -fuzz '^FuzzDecodeState$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/frame -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)

fuzz-long:
	$(MAKE) fuzz FUZZTIME=10m

# 10,000 overwrites of a 1 MiB blob: the data directory stays bounded.
gc-soak:
	TYR_GC_OVERWRITES=10000 $(GO) test -count=1 -timeout 60m -run 'TestVersionGCBounded' -v ./tests/e2e/

# 50 rounds of kill -9 after acknowledged writes (3 rounds run in `make test`).
crash-long:
	TYR_CRASH_ROUNDS=50 $(GO) test -count=1 -timeout 60m -run 'TestCrash' -v ./tests/e2e/

# kill -9 and SIGSTOP/SIGCONT against a real server, then against a 4-node
# cluster (2 replicas of each chunk, one node at a time), then partitions
# and lossy links against a cluster in network namespaces (root only), under
# a concurrent register workload for TORTURE each (default 30m); the recorded
# histories are checked for linearizability and serializability. Each test
# runs independent fault schedules back to back, each on a fresh server or
# cluster from a seed of its own and checked on its own, of
# TYR_TORTURE_SCHEDULE each (default 45s): TORTURE=10m runs about 30 in all
# (12 or 13 on the server, 8 or 9 on each cluster). A failure prints the
# command that replays its schedule (TYR_TORTURE_SEED, one schedule). 20 s
# runs of each, one schedule, are part of `make test`.
TORTURE ?= 30m
torture:
	TYR_TORTURE_DURATION=$(TORTURE) $(GO) test -race -count=1 -timeout 240m -run 'TestTorture(Cluster|Partition)?$$' -v ./tests/torture/

# Seeded simulation of the chain-commit core over a faulty network, with
# crashes, catch-up, version GC and ring changes.
# `make sim` runs SEEDS seeds (default 10000); `make sim SEED=n` replays one
# seed with a full event trace. 200 seeds also run in `make test`.
SEEDS ?= 10000
sim:
ifdef SEED
	$(GO) test ./internal/sim -count=1 -run 'TestSim$$' -sim.seed=$(SEED) -sim.trace $(if $(MOVES),-sim.moves) -v
else
	$(GO) test ./internal/sim -count=1 -timeout 60m -run 'TestSim$$' -sim.seeds=$(SEEDS) $(if $(FIRST),-sim.first=$(FIRST)) $(if $(MOVES),-sim.moves) -v
endif

# The placement simulation of load-aware ring weights (internal/balance):
# 256 and 1,024 nodes of capacities 1:2:4 holding Pareto-sized blobs, three
# seeds each; asserts max/mean utilization <= 1.05 and the movement bounds,
# and prints the table of bench/results/ring-<date>.md. A 256-node run is
# part of `make test`.
ring-sim:
	TYR_RING_SIM=1 $(GO) test ./internal/balance -count=1 -timeout 30m -run 'TestSimulateLoadAware$$' -v

# The whole suite in one run, in about 10 minutes (at most 15) on 2 cores:
# a 3-node cluster (replication 3, sync on) against durable and in-memory
# Redis, PostgreSQL, etcd and ZooKeeper-locked Redis (installed from apt if
# missing) under counter, monalisa, bank, write, read (1 KiB, 800 B,
# 100 KiB), isolation and a 1 GiB stream, with the machine's limits and
# each node's peak memory. Writes bench/results/bench-<date>.md, its PNG
# plots, and the issue's targets, met or not.
bench: build
	scripts/bench.sh

# CPU profiles of a 3-node cluster's nodes under the read-path workloads
# (reads of 1 KiB and 100 KiB, readers beside writers, a stream get; their
# heaps under large puts) and the commit path (counter, 4 KiB writes), as
# pprof top tables in bench/results/profiles-DATE.md; PROFILE_SETS=read or
# commit for one set.
profile: build
	scripts/profile.sh

# One node against PostgreSQL, etcd, durable Redis and ZooKeeper-locked
# Redis (installed from apt if missing): counter, MonALISA and bank at 1, 8
# and 32 clients, reads against etcd, and the machine's limits, in one run.
# Writes bench/results/peers-<date>.md and its PNG plots.
bench-peers: build
	scripts/bench-peers.sh

# A 3-node cluster (replication 3) against one node, one after the other:
# 4 KiB writes and direct reads at 1, 16 and 64 clients, and peer messages
# per write. Writes bench/results/cluster-<date>.md.
bench-cluster: build
	scripts/bench-cluster.sh

# The same cluster against one node under transactions: the hot counter
# (atomic add and read-modify-write) and the bank at 1, 8 and 32 clients,
# with aborts per committed operation. Writes bench/results/txn-<date>.md.
bench-txn: build
	scripts/bench-cluster.sh txn

# TýrFS (tyr mount and the tyrfs package) against a directory on the local
# disk and CephFS (ceph-fuse; CEPH=0 leaves it out): a data set read as
# 32 MiB and as 32 KiB files, and create/stat/delete rates. Writes
# bench/results/fs-<date>.md.
bench-fs: build deps
	scripts/bench-fs.sh

# The same data set through a network link shaped to RATE (default 10gbit,
# as the seeds' experiment ran), tyr's server in a network namespace of
# its own (needs root). Writes bench/results/fs-link-<date>.md.
bench-fs-link: build
	scripts/bench-fs-link.sh

proto:
	protoc --go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative api/tyrpb/tyr.proto api/peerpb/peer.proto

clean:
	rm -rf bin

/*
 * mpi_blocks.c: MPI ranks writing one shared blob in blocks, each rank
 * through a different node of a tyr cluster, as an HPC code spread over
 * nodes would.
 *
 *   mpicc -o mpi_blocks mpi_blocks.c $(pkg-config --cflags --libs tyr)
 *   mpiexec -n 4 ./mpi_blocks ENDPOINTS [KEYSPACE [BLOCK_BYTES]]
 *
 * ENDPOINTS is a comma-separated list of nodes (host:port,...); rank r
 * connects to the (r mod n)-th. KEYSPACE (default "mpi-blocks") is
 * created if it does not exist, with 2 replicas when there are two
 * endpoints or more. BLOCK_BYTES defaults to 1 MiB.
 *
 *  1. Rank 0 creates the blob, empty (replacing one of an earlier run).
 *  2. Each rank writes its block at offset rank * BLOCK_BYTES with
 *     tyr_write: data of a pattern of its own.
 *  3. Each rank reads back every block, not only its own, and checks it
 *     byte for byte; rank 0 checks the blob's size.
 *
 * Barriers separate the steps. The exit status is 0 when every check of
 * every rank passed, 1 otherwise.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tyr.h>

static int rank, nranks;

/* check reports a failed call or check of this rank; returns 1 if failed. */
static int failed(int bad, const char *what, const tyr_status *st)
{
	if (bad)
		fprintf(stderr, "rank %d: %s%s%s\n", rank, what, st ? ": " : "",
		        st ? st->message : "");
	return bad;
}

/* The byte at offset i of rank r's block: differs between ranks and
 * along the block. */
static uint8_t block_byte(int r, size_t i)
{
	uint32_t x = (uint32_t)(i / 4) * 2654435761u ^ (uint32_t)(r + 1) * 0x9E3779B9u;
	x ^= x >> 15;
	return (uint8_t)(x >> (8 * (i % 4))) ^ (uint8_t)r;
}

/* endpoint_for picks the (r mod n)-th of the comma-separated list. */
static char *endpoint_for(const char *list, int r)
{
	int n = 1;
	for (const char *p = list; *p; p++)
		n += *p == ',';
	int want = r % n;
	const char *p = list;
	for (int k = 0; k < want; k++)
		p = strchr(p, ',') + 1;
	size_t len = strcspn(p, ",");
	char *e = malloc(len + 1);
	memcpy(e, p, len);
	e[len] = 0;
	return e;
}

/* all_ok combines every rank's verdict. */
static int all_ok(int ok)
{
	int all = 0;
	MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
	return all;
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (argc < 2) {
		if (rank == 0)
			fprintf(stderr, "usage: %s ENDPOINTS [KEYSPACE [BLOCK_BYTES]]\n", argv[0]);
		MPI_Finalize();
		return 2;
	}
	const char *ks = argc > 2 ? argv[2] : "mpi-blocks";
	size_t block = argc > 3 ? strtoull(argv[3], NULL, 10) : (size_t)1 << 20;
	const char *key = "shared/blocks";
	int nendpoints = 1;
	for (const char *p = argv[1]; *p; p++)
		nendpoints += *p == ',';

	char *endpoint = endpoint_for(argv[1], rank);
	tyr_status st;
	tyr_client c = 0;
	int ok = !failed(tyr_connect(endpoint, 60000, 0, &c, &st) != TYR_OK, "connect", &st);
	char host[256] = "?";
	gethostname(host, sizeof host);
	printf("rank %d/%d on %s: node %s\n", rank, nranks, host, endpoint);
	fflush(stdout);

	/* 1. The keyspace, if missing, and the blob, by rank 0. */
	if (ok && rank == 0) {
		tyr_keyspace_config cfg = {.chunk_size = 256 << 10,
		                           .replication = nendpoints > 1 ? 2 : 1,
		                           .mvcc = 1, .sync = 0};
		int rc = tyr_keyspace_create(c, ks, &cfg, NULL, &st);
		ok = !failed(rc != TYR_OK && rc != TYR_EXISTS, "keyspace create", &st);
	}
	if (!all_ok(ok))
		goto out;
	/* A keyspace reaches the other nodes by gossip: each rank waits until
	 * its node has it (a minute at most). */
	tyr_keyspace_info info;
	int rc = TYR_NOT_FOUND;
	for (int tries = 0; tries < 600 && rc == TYR_NOT_FOUND; tries++) {
		rc = tyr_keyspace_get(c, ks, &info, &st);
		if (rc == TYR_NOT_FOUND)
			usleep(100 * 1000);
	}
	ok = !failed(rc != TYR_OK, "keyspace on this rank's node", &st);
	if (!all_ok(ok))
		goto out;
	if (rank == 0)
		ok = !failed(tyr_put(c, ks, key, NULL, 0, &st) != TYR_OK, "create the blob", &st);
	if (!all_ok(ok)) /* the barrier: the blob exists for everyone */
		goto out;

	/* 2. Each rank writes its block. */
	uint8_t *buf = malloc(block);
	for (size_t i = 0; i < block; i++)
		buf[i] = block_byte(rank, i);
	tyr_op_result res;
	ok = !failed(tyr_write(c, ks, key, (uint64_t)rank * block, buf, block, 0, &res, &st) != TYR_OK,
	             "write my block", &st);
	if (!all_ok(ok))
		goto out_buf;

	/* 3. Everyone reads every block back. */
	int bad_blocks = 0;
	for (int r = 0; r < nranks; r++) {
		size_t n = 0;
		memset(buf, 0, block);
		if (failed(tyr_read(c, ks, key, (uint64_t)r * block, buf, block, &n, &st) != TYR_OK,
		           "read a block", &st)) {
			bad_blocks++;
			continue;
		}
		if (n != block) {
			fprintf(stderr, "rank %d: block %d: read %zu bytes, want %zu\n", rank, r, n, block);
			bad_blocks++;
			continue;
		}
		for (size_t i = 0; i < block; i++) {
			if (buf[i] != block_byte(r, i)) {
				fprintf(stderr, "rank %d: block %d: byte %zu is 0x%02x, want 0x%02x\n", rank,
				        r, i, buf[i], block_byte(r, i));
				bad_blocks++;
				break;
			}
		}
	}
	ok = bad_blocks == 0;
	if (rank == 0) {
		tyr_blob_info bi;
		if (failed(tyr_stat(c, ks, key, &bi, &st) != TYR_OK, "stat", &st)) {
			ok = 0;
		} else if (bi.size != (uint64_t)nranks * block) {
			fprintf(stderr, "rank 0: blob of %llu bytes, want %llu\n",
			        (unsigned long long)bi.size, (unsigned long long)nranks * block);
			ok = 0;
		}
	}
	printf("rank %d: %d of %d blocks as written\n", rank, nranks - bad_blocks, nranks);
	fflush(stdout);
	ok = all_ok(ok);
	if (rank == 0)
		printf("%s: %d ranks, blocks of %zu bytes, blob %s/%s\n", ok ? "PASS" : "FAIL", nranks,
		       block, ks, key);

out_buf:
	free(buf);
out:
	ok = all_ok(ok);
	if (c)
		tyr_close(c);
	free(endpoint);
	MPI_Finalize();
	return ok ? 0 : 1;
}

/*
 * example.c: a tour of tyr's C API.
 *
 *   cc -o example example.c $(pkg-config --cflags --libs tyr)
 *   ./example [ENDPOINT]          (default: TYR_ENDPOINT, or 127.0.0.1:7420)
 *
 * It creates a keyspace, puts and gets a blob, moves money between two
 * accounts in a transaction, lists what it wrote, shows how errors look,
 * and drops the keyspace again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tyr.h>

/* die prints a failed call's status and exits. */
static void die(const char *what, int rc, const tyr_status *st)
{
	fprintf(stderr, "%s: %s: %s\n", what, tyr_code_name(rc), st->message);
	exit(1);
}

#define TRY(what, call)                         \
	do {                                    \
		int rc_ = (call);               \
		if (rc_ != TYR_OK)              \
			die(what, rc_, &st);    \
	} while (0)

/* Accounts are 8-byte little-endian balances. */
static uint64_t get_u64(const unsigned char *b)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | b[i];
	return v;
}

static void set_u64(unsigned char *b, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(v >> (8 * i));
}

/* wait_keyspace waits until every node of the cluster has keyspace ks: a
 * new keyspace reaches the other nodes by gossip, usually within
 * milliseconds, and a node refuses blobs of a keyspace it does not know
 * yet. The members are in the cluster status, a JSON object. */
static void wait_keyspace(tyr_client c, const char *ks)
{
	tyr_status st;
	char *status;
	TRY("cluster status", tyr_cluster_status_json(c, &status, &st));
	const char *field = "\"RPCAddr\":\"";
	for (char *p = strstr(status, field); p; p = strstr(p, field)) {
		char addr[256];
		p += strlen(field);
		size_t n = strcspn(p, "\"");
		snprintf(addr, sizeof addr, "%.*s", (int)n, p);
		tyr_client node;
		TRY("connect", tyr_connect(addr, 2000, TYR_CONNECT_NO_ROUTING, &node, &st));
		for (int tries = 0; tries < 600; tries++) { /* a minute at most */
			tyr_keyspace_info info;
			if (tyr_keyspace_get(node, ks, &info, NULL) != TYR_NOT_FOUND)
				break;
			usleep(100 * 1000);
		}
		tyr_close(node);
	}
	tyr_free(status);
}

struct transfer {
	const char *from, *to;
	uint64_t amount;
};

/* The body of a transaction: tyr_run_tx runs it again if another client
 * changed an account in between, so it has no effects but on tx. */
static int transfer(tyr_tx tx, void *arg)
{
	struct transfer *t = arg;
	unsigned char a[8], b[8];
	size_t n;
	int rc;
	if ((rc = tyr_tx_read(tx, t->from, 0, a, 8, &n, NULL)) != TYR_OK ||
	    (rc = tyr_tx_read(tx, t->to, 0, b, 8, &n, NULL)) != TYR_OK)
		return rc;
	if (get_u64(a) < t->amount)
		return TYR_OUT_OF_RANGE; /* gives up: nothing is written */
	set_u64(a, get_u64(a) - t->amount);
	set_u64(b, get_u64(b) + t->amount);
	if ((rc = tyr_tx_write(tx, t->from, 0, a, 8, NULL)) != TYR_OK)
		return rc;
	return tyr_tx_write(tx, t->to, 0, b, 8, NULL);
}

int main(int argc, char **argv)
{
	const char *endpoint = argc > 1 ? argv[1] : getenv("TYR_ENDPOINT");
	tyr_status st;
	tyr_client c;
	char ks[64];
	snprintf(ks, sizeof ks, "example-%d", (int)getpid());

	/* Connect: nothing is sent until the first call. Every call of this
	 * client has a deadline of 10 s. */
	TRY("connect", tyr_connect(endpoint, 10000, 0, &c, &st));

	/* A keyspace of 64 KiB chunks, one replica of each. */
	tyr_keyspace_config cfg = {.chunk_size = 64 << 10, .replication = 1, .mvcc = 1, .sync = 1};
	TRY("keyspace create", tyr_keyspace_create(c, ks, &cfg, NULL, &st));
	wait_keyspace(c, ks);
	printf("created keyspace %s\n", ks);

	/* Put a blob and read it back. */
	const char *text = "hello from C";
	TRY("put", tyr_put(c, ks, "greetings/hello", text, strlen(text), &st));
	void *data;
	size_t len;
	TRY("get", tyr_get(c, ks, "greetings/hello", &data, &len, &st));
	printf("get greetings/hello: %.*s\n", (int)len, (char *)data);
	tyr_free(data);

	/* Append returns where the data landed. */
	uint64_t off;
	TRY("append", tyr_append(c, ks, "greetings/hello", "!", 1, &off, &st));
	printf("appended at offset %llu\n", (unsigned long long)off);

	/* Two accounts, then a transfer in a transaction. */
	unsigned char balance[8];
	set_u64(balance, 100);
	TRY("put alice", tyr_put(c, ks, "accounts/alice", balance, 8, &st));
	set_u64(balance, 5);
	TRY("put bob", tyr_put(c, ks, "accounts/bob", balance, 8, &st));

	struct transfer t = {"accounts/alice", "accounts/bob", 30};
	TRY("transfer", tyr_run_tx(c, ks, transfer, &t, 0, &st));
	/* An atomic add needs no transaction. */
	uint64_t bob;
	TRY("atomic add", tyr_atomic(c, ks, "accounts/bob", 0, 8, TYR_FUNC_ADD, 1, &bob, &st));
	printf("transferred 30 from alice to bob, plus 1 to bob: bob has %llu\n",
	       (unsigned long long)bob);

	/* A transfer that cannot be made is given up, changing nothing. */
	struct transfer too_much = {"accounts/bob", "accounts/alice", 1000};
	int rc = tyr_run_tx(c, ks, transfer, &too_much, 0, &st);
	printf("transfer of 1000 from bob: %s\n", tyr_code_name(rc));

	/* List, page by page (pages of 2 to show the paging). */
	printf("blobs:\n");
	char *after = NULL;
	do {
		tyr_blob_info *blobs;
		size_t n;
		char *next;
		TRY("list", tyr_list(c, ks, NULL, after, 2, &blobs, &n, &next, &st));
		for (size_t i = 0; i < n; i++)
			printf("  %-20s %llu bytes\n", blobs[i].key, (unsigned long long)blobs[i].size);
		tyr_free(blobs);
		tyr_free(after);
		after = next;
	} while (after != NULL);

	/* Errors: a code, flags and a message. */
	tyr_blob_info info;
	rc = tyr_stat(c, ks, "no/such/blob", &info, &st);
	printf("stat of a missing blob: code %d (%s), retryable %s: %s\n", rc, tyr_code_name(rc),
	       st.flags & TYR_FLAG_RETRYABLE ? "yes" : "no", st.message);
	rc = tyr_create(c, ks, "greetings/hello", &st);
	printf("create of an existing blob: %s, refused %s\n", tyr_code_name(rc),
	       st.flags & TYR_FLAG_REFUSED ? "yes" : "no");

	TRY("keyspace drop", tyr_keyspace_drop(c, ks, &st));
	tyr_close(c);
	printf("dropped keyspace %s\n", ks);
	return 0;
}

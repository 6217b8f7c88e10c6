/*
 * tyr_test.c: a test of the whole C API of libtyr (tyr.h) against a
 * running server or cluster.
 *
 *   tyr_test [ENDPOINT [KEYSPACE]]
 *
 * ENDPOINT (or TYR_ENDPOINT; default 127.0.0.1:7420) is the node to
 * connect to. KEYSPACE (or TYR_KEYSPACE) is an existing keyspace to put
 * the test's blobs in, under a prefix of this run; without one the test
 * creates a keyspace of its own and drops it at the end. TYR_TEST_NODES,
 * if set, is the number of nodes the cluster status must list.
 *
 * Every check prints what it expected and what it got, and the program
 * exits with status 1, at the first one that fails; 0 when all passed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <tyr.h>

#define MiB (1u << 20)

/* ---- checks ---------------------------------------------------------- */

static const char *section = "start";
static int checks;
static pthread_mutex_t checks_mu = PTHREAD_MUTEX_INITIALIZER;

static void failf(int line, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "tyr_test.c:%d: FAIL in %s: ", line, section);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void counted(void)
{
	pthread_mutex_lock(&checks_mu);
	checks++;
	pthread_mutex_unlock(&checks_mu);
}

#define CHECK(cond, ...)                                                  \
	do {                                                              \
		counted();                                                \
		if (!(cond))                                              \
			failf(__LINE__, "(" #cond ") " __VA_ARGS__);      \
	} while (0)

/* The status of the calls of the main thread. */
static tyr_status st;

static void reset_status(tyr_status *s)
{
	memset(s, 0, sizeof *s);
	s->code = -1;
	s->flags = 0xdeadu;
	strcpy(s->message, "(not written)");
}

/* OK(call) runs a call that passes &st and requires TYR_OK, with st
 * saying so too. */
#define OK(call)                                                           \
	do {                                                               \
		reset_status(&st);                                         \
		int rc_ = (call);                                          \
		counted();                                                 \
		if (rc_ != TYR_OK)                                         \
			failf(__LINE__, "%s: %s (%d): %s", #call,          \
			      tyr_code_name(rc_), rc_, st.message);        \
		if (st.code != TYR_OK)                                     \
			failf(__LINE__, "%s returned TYR_OK, st.code %d",  \
			      #call, st.code);                             \
	} while (0)

/* FAILS(code, call) requires the call to fail with code, st to hold the
 * same code and a message. */
#define FAILS(want_, call)                                                 \
	do {                                                              \
		reset_status(&st);                                        \
		int rc_ = (call);                                         \
		counted();                                                \
		if (rc_ != (want_))                                       \
			failf(__LINE__, "%s: got %s (%d) \"%s\", want %s", \
			      #call, tyr_code_name(rc_), rc_, st.message, \
			      tyr_code_name(want_));                      \
		if (st.code != rc_)                                       \
			failf(__LINE__, "%s: st.code %d, returned %d",    \
			      #call, st.code, rc_);                       \
		if (st.message[0] == 0 ||                                 \
		    strcmp(st.message, "(not written)") == 0)             \
			failf(__LINE__, "%s: no message in st", #call);   \
	} while (0)

#define HAS_FLAG(f) ((st.flags & (f)) != 0)

/* ---- data ------------------------------------------------------------ */

/* pattern fills buf with n bytes that depend on seed and on the absolute
 * offset of each byte, so any misplaced part shows. */
static void pattern(uint8_t *buf, size_t n, uint64_t seed, uint64_t offset)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t x = (offset + i) / 8 * 0x9E3779B97F4A7C15ull ^ seed;
		x ^= x >> 29;
		x *= 0xBF58476D1CE4E5B9ull;
		x ^= x >> 32;
		buf[i] = (uint8_t)(x >> (8 * ((offset + i) % 8)));
	}
}

/* same requires got[0:n] == want[0:n], naming the first difference. */
static void same_at(int line, const char *what, const void *got,
                    const void *want, size_t n)
{
	const uint8_t *g = got, *w = want;
	counted();
	for (size_t i = 0; i < n; i++)
		if (g[i] != w[i])
			failf(line, "%s: byte %zu of %zu is 0x%02x, want 0x%02x",
			      what, i, n, g[i], w[i]);
}
#define SAME(what, got, want, n) same_at(__LINE__, what, got, want, n)

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p) {
		fprintf(stderr, "out of memory (%zu bytes)\n", n);
		exit(1);
	}
	return p;
}

static uint64_t le64(const uint8_t *b)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | b[i];
	return v;
}

static void put_le64(uint8_t *b, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(v >> (8 * i));
}

/* ---- the run's names --------------------------------------------------- */

static tyr_client c; /* the client of most checks */
/* Clients that send every request to the endpoint, the second reading
 * over gRPC rather than the data path. */
static tyr_client c_direct, c_grpc;
static const char *endpoint;
static char ks[TYR_KEYSPACE_NAME_BYTES_MAX + 1];
static char prefix[64];

/* K returns the key name under the run's prefix, in memory of its own
 * that lives as long as the program. */
static const char *K(const char *name)
{
	char *b = xmalloc(strlen(prefix) + strlen(name) + 1);
	strcpy(b, prefix);
	strcat(b, name);
	return b;
}

/* get requires key's content to be want[0:n]. */
static void expect_content(int line, const char *key, const void *want,
                           size_t n)
{
	void *data = (void *)1;
	size_t len = 12345;
	reset_status(&st);
	int rc = tyr_get(c, ks, key, &data, &len, &st);
	counted();
	if (rc != TYR_OK)
		failf(line, "tyr_get %s: %s: %s", key, tyr_code_name(rc),
		      st.message);
	if (len != n)
		failf(line, "tyr_get %s: %zu bytes, want %zu", key, len, n);
	if (n == 0 && data != NULL)
		failf(line, "tyr_get %s: empty blob, data not NULL", key);
	if (n > 0)
		same_at(line, key, data, want, n);
	tyr_free(data);
}
#define CONTENT(key, want, n) expect_content(__LINE__, key, want, n)

static void expect_absent(int line, const char *key)
{
	tyr_blob_info bi;
	reset_status(&st);
	int rc = tyr_stat(c, ks, key, &bi, &st);
	counted();
	if (rc != TYR_NOT_FOUND)
		failf(line, "tyr_stat %s: %s, want not found", key,
		      tyr_code_name(rc));
}
#define ABSENT(key) expect_absent(__LINE__, key)

static uint64_t size_of(const char *key)
{
	tyr_blob_info bi;
	OK(tyr_stat(c, ks, key, &bi, &st));
	return bi.size;
}

/* ---- sections ---------------------------------------------------------- */

static void test_codes(void)
{
	section = "codes and version";
	CHECK(tyr_api_version() == TYR_API_VERSION, "library version %d, header %d",
	      tyr_api_version(), TYR_API_VERSION);
	CHECK(strcmp(tyr_code_name(TYR_NOT_FOUND), "not found") == 0, "got \"%s\"",
	      tyr_code_name(TYR_NOT_FOUND));
	CHECK(strcmp(tyr_code_name(TYR_CONFLICT), "conflict") == 0, "got \"%s\"",
	      tyr_code_name(TYR_CONFLICT));
	CHECK(strcmp(tyr_code_name(TYR_INVALID_ARGUMENT), "invalid argument") == 0,
	      "got \"%s\"", tyr_code_name(TYR_INVALID_ARGUMENT));
	for (int i = TYR_OK; i <= TYR_UNKNOWN; i++) {
		const char *a = tyr_code_name(i);
		CHECK(a != NULL && a[0] != 0, "code %d has no name", i);
		for (int j = TYR_OK; j < i; j++)
			CHECK(strcmp(a, tyr_code_name(j)) != 0,
			      "codes %d and %d are both named \"%s\"", i, j, a);
	}
	CHECK(tyr_code_name(1000) != NULL, "no name for an unknown code");
	tyr_free(NULL); /* must be harmless */
}

/* A loopback port nothing listens on: bound, then released. */
static int dead_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof a;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
		perror("dead_port");
		exit(1);
	}
	close(fd);
	return ntohs(a.sin_port);
}

static void test_connect(void)
{
	section = "connect";
	c = 0;
	OK(tyr_connect(endpoint, 60000, 0, &c, &st));
	CHECK(c != 0, "handle 0");
	OK(tyr_ready(c, &st));

	/* Each flag of tyr_connect gives a working client. */
	c_direct = c_grpc = 0;
	OK(tyr_connect(endpoint, 60000, TYR_CONNECT_NO_ROUTING, &c_direct, &st));
	OK(tyr_connect(endpoint, 60000,
	               TYR_CONNECT_NO_ROUTING | TYR_CONNECT_NO_DATA_PATH, &c_grpc, &st));
	CHECK(c_direct != 0 && c_grpc != 0 && c_direct != c && c_grpc != c && c_direct != c_grpc,
	      "handles %llu %llu %llu", (unsigned long long)c, (unsigned long long)c_direct,
	      (unsigned long long)c_grpc);
	OK(tyr_ready(c_direct, &st));
	OK(tyr_ready(c_grpc, &st));

	/* Stale and invalid client handles. */
	tyr_client c2 = 0;
	OK(tyr_connect(endpoint, 60000, 0, &c2, &st));
	CHECK(tyr_close(c2) == TYR_OK, "close");
	FAILS(TYR_INVALID_ARGUMENT, tyr_ready(c2, &st));
	CHECK(tyr_close(c2) == TYR_INVALID_ARGUMENT, "second close");
	FAILS(TYR_INVALID_ARGUMENT, tyr_ready(0, &st));
	CHECK(tyr_ready(0, NULL) == TYR_INVALID_ARGUMENT, "NULL st");
	CHECK(tyr_close(0) == TYR_INVALID_ARGUMENT, "close of 0");
	FAILS(TYR_INVALID_ARGUMENT, tyr_ready(c + 1000000, &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_connect(endpoint, 1000, 0, NULL, &st));

	/* Nothing listens: connect succeeds (it does not wait), the first
	 * call fails as unavailable (or at its deadline) and may be
	 * retried. */
	char dead[64];
	snprintf(dead, sizeof dead, "127.0.0.1:%d", dead_port());
	tyr_client cd = 0;
	OK(tyr_connect(dead, 3000, 0, &cd, &st));
	reset_status(&st);
	int rc = tyr_ready(cd, &st);
	CHECK(rc == TYR_UNAVAILABLE || rc == TYR_TIMEOUT,
	      "tyr_ready of %s: %s: %s", dead, tyr_code_name(rc), st.message);
	CHECK(st.code == rc && st.message[0] != 0, "st.code %d", st.code);
	if (rc == TYR_UNAVAILABLE)
		CHECK(HAS_FLAG(TYR_FLAG_RETRYABLE), "flags %#x", st.flags);
	CHECK(tyr_close(cd) == TYR_OK, "close");
}

static void test_keyspaces(void)
{
	section = "keyspaces";
	char name[40], name2[48];
	snprintf(name, sizeof name, "ctest-ks-%d-%ld", (int)getpid(), (long)time(NULL) % 100000);
	snprintf(name2, sizeof name2, "%s-d", name);

	tyr_keyspace_config cfg = {.chunk_size = 4096, .replication = 1, .mvcc = 1, .sync = 0};
	tyr_keyspace_info info;
	memset(&info, 0, sizeof info);
	OK(tyr_keyspace_create(c, name, &cfg, &info, &st));
	CHECK(strcmp(info.name, name) == 0, "name \"%s\"", info.name);
	CHECK(info.config.chunk_size == 4096, "chunk size %llu",
	      (unsigned long long)info.config.chunk_size);
	CHECK(info.config.replication == 1 && info.config.mvcc == 1 && info.config.sync == 0,
	      "config %u %d %d", info.config.replication, info.config.mvcc, info.config.sync);
	int64_t now_ns = (int64_t)time(NULL) * 1000000000;
	CHECK(info.created_ns > now_ns - 3600ll * 1000000000 &&
	          info.created_ns < now_ns + 3600ll * 1000000000,
	      "created_ns %lld, now %lld", (long long)info.created_ns, (long long)now_ns);

	/* Again: exists, refused; info untouched. */
	tyr_keyspace_info before = info;
	FAILS(TYR_EXISTS, tyr_keyspace_create(c, name, &cfg, &info, &st));
	CHECK(memcmp(&before, &info, sizeof info) == 0, "info written on failure");
	CHECK(HAS_FLAG(TYR_FLAG_REFUSED) && !HAS_FLAG(TYR_FLAG_RETRYABLE),
	      "flags %#x", st.flags);

	/* NULL cfg: the defaults; NULL info. */
	OK(tyr_keyspace_create(c, name2, NULL, NULL, &st));
	tyr_keyspace_info got;
	OK(tyr_keyspace_get(c, name2, &got, &st));
	CHECK(strcmp(got.name, name2) == 0, "name \"%s\"", got.name);
	CHECK(got.config.chunk_size == 64 * MiB && got.config.replication == 1 &&
	          got.config.mvcc == 1 && got.config.sync == 1,
	      "defaults: chunk %llu replication %u mvcc %d sync %d",
	      (unsigned long long)got.config.chunk_size, got.config.replication,
	      got.config.mvcc, got.config.sync);
	OK(tyr_keyspace_get(c, name, &got, &st));
	CHECK(got.config.chunk_size == 4096 && got.config.sync == 0 && got.blobs == 0,
	      "chunk %llu sync %d blobs %llu", (unsigned long long)got.config.chunk_size,
	      got.config.sync, (unsigned long long)got.blobs);
	CHECK(got.created_ns == info.created_ns, "created %lld vs %lld",
	      (long long)got.created_ns, (long long)info.created_ns);

	tyr_keyspace_info *list = NULL;
	size_t n = 0;
	OK(tyr_keyspace_list(c, &list, &n, &st));
	int seen = 0, seen_main = 0;
	for (size_t i = 0; i < n; i++) {
		if (i > 0)
			CHECK(strcmp(list[i - 1].name, list[i].name) < 0,
			      "not by name: \"%s\" then \"%s\"", list[i - 1].name, list[i].name);
		if (strcmp(list[i].name, name) == 0) {
			seen++;
			CHECK(list[i].config.chunk_size == 4096, "listed chunk size %llu",
			      (unsigned long long)list[i].config.chunk_size);
		}
		seen += strcmp(list[i].name, name2) == 0;
		seen_main += strcmp(list[i].name, ks) == 0;
	}
	CHECK(seen == 2 && seen_main == 1, "%zu keyspaces listed, ours seen %d, %s seen %d",
	      n, seen, ks, seen_main);
	tyr_free(list);

	/* Invalid names. */
	char longname[TYR_KEYSPACE_NAME_BYTES_MAX + 2];
	memset(longname, 'a', sizeof longname - 1);
	longname[sizeof longname - 1] = 0;
	FAILS(TYR_INVALID_ARGUMENT, tyr_keyspace_create(c, longname, NULL, NULL, &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_keyspace_create(c, "Bad/Name", NULL, NULL, &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_keyspace_create(c, NULL, NULL, NULL, &st));
	CHECK(tyr_keyspace_create(c, "x", NULL, NULL, NULL) == TYR_INVALID_ARGUMENT,
	      "NULL st");

	OK(tyr_keyspace_drop(c, name, &st));
	OK(tyr_keyspace_drop(c, name2, &st));
	memset(&got, 0x5a, sizeof got);
	before = got;
	FAILS(TYR_NOT_FOUND, tyr_keyspace_get(c, name, &got, &st));
	CHECK(memcmp(&before, &got, sizeof got) == 0, "out written on failure");
	FAILS(TYR_NOT_FOUND, tyr_keyspace_drop(c, name, &st));
	CHECK(tyr_keyspace_drop(c, name2, NULL) == TYR_NOT_FOUND, "NULL st");

	OK(tyr_keyspace_list(c, &list, &n, &st));
	for (size_t i = 0; i < n; i++)
		CHECK(strcmp(list[i].name, name) != 0 && strcmp(list[i].name, name2) != 0,
		      "dropped keyspace %s still listed", list[i].name);
	tyr_free(list);
}

static void test_blobs(void)
{
	section = "blob calls";
	const char *b = K("blob/b1");
	tyr_blob_info bi, bi2;

	OK(tyr_create(c, ks, b, &st));
	FAILS(TYR_EXISTS, tyr_create(c, ks, b, &st));
	CHECK(HAS_FLAG(TYR_FLAG_REFUSED) && !HAS_FLAG(TYR_FLAG_RETRYABLE) &&
	          !HAS_FLAG(TYR_FLAG_OUTCOME_UNKNOWN),
	      "flags %#x", st.flags);
	CHECK(tyr_create(c, ks, b, NULL) == TYR_EXISTS, "NULL st");

	memset(&bi, 0, sizeof bi);
	bi.key = "sentinel";
	OK(tyr_stat(c, ks, b, &bi, &st));
	CHECK(bi.key == NULL && bi.size == 0 && bi.version > 0, "key %p size %llu version %llu",
	      (const void *)bi.key, (unsigned long long)bi.size, (unsigned long long)bi.version);
	CHECK(bi.created_ns > 0 && bi.modified_ns >= bi.created_ns, "created %lld modified %lld",
	      (long long)bi.created_ns, (long long)bi.modified_ns);
	CONTENT(b, "", 0);

	/* write */
	tyr_op_result res;
	memset(&res, 0, sizeof res);
	OK(tyr_write(c, ks, b, 0, "hello", 5, 0, &res, &st));
	CHECK(res.offset == 0 && res.size == 5 && res.version > bi.version,
	      "offset %llu size %llu version %llu (before %llu)", (unsigned long long)res.offset,
	      (unsigned long long)res.size, (unsigned long long)res.version,
	      (unsigned long long)bi.version);
	OK(tyr_stat(c, ks, b, &bi2, &st));
	CHECK(bi2.version == res.version && bi2.size == 5 && bi2.modified_ns >= bi.modified_ns,
	      "stat version %llu size %llu", (unsigned long long)bi2.version,
	      (unsigned long long)bi2.size);
	const char *missing = K("blob/missing");
	memset(&res, 0x33, sizeof res);
	tyr_op_result res_before = res;
	FAILS(TYR_NOT_FOUND, tyr_write(c, ks, missing, 0, "x", 1, 0, &res, &st));
	CHECK(memcmp(&res, &res_before, sizeof res) == 0, "result written on failure");
	ABSENT(missing);
	OK(tyr_write(c, ks, K("blob/created"), 3, "abc", 3, 1, NULL, &st));
	CONTENT(K("blob/created"), "\0\0\0abc", 6);

	/* append */
	uint64_t off = 999;
	OK(tyr_append(c, ks, b, " world", 6, &off, &st));
	CHECK(off == 5, "appended at %llu", (unsigned long long)off);
	OK(tyr_append(c, ks, b, "!", 1, NULL, &st));
	CONTENT(b, "hello world!", 12);
	off = 4242;
	FAILS(TYR_NOT_FOUND, tyr_append(c, ks, missing, "x", 1, &off, &st));
	CHECK(off == 4242, "offset written on failure");
	ABSENT(missing);
	uint8_t *big = xmalloc(TYR_PAYLOAD_BYTES_MAX + 1);
	memset(big, 'z', TYR_PAYLOAD_BYTES_MAX + 1);
	FAILS(TYR_TOO_LARGE, tyr_append(c, ks, b, big, TYR_PAYLOAD_BYTES_MAX + 1, &off, &st));
	CHECK(HAS_FLAG(TYR_FLAG_REFUSED) && !HAS_FLAG(TYR_FLAG_RETRYABLE), "flags %#x", st.flags);
	CHECK(size_of(b) == 12, "a refused append changed the size");
	OK(tyr_append(c, ks, b, big, TYR_PAYLOAD_BYTES_MAX, &off, &st)); /* the limit itself */
	CHECK(off == 12 && size_of(b) == 12 + TYR_PAYLOAD_BYTES_MAX, "offset %llu",
	      (unsigned long long)off);
	free(big);

	/* read */
	char buf[64];
	size_t n = 999;
	OK(tyr_truncate(c, ks, b, 12, &st));
	OK(tyr_read(c, ks, b, 0, buf, sizeof buf, &n, &st));
	CHECK(n == 12 && memcmp(buf, "hello world!", 12) == 0, "read %zu bytes \"%.*s\"", n,
	      (int)n, buf);
	OK(tyr_read(c, ks, b, 6, buf, 5, &n, &st));
	CHECK(n == 5 && memcmp(buf, "world", 5) == 0, "read %zu bytes \"%.*s\"", n, (int)n, buf);
	OK(tyr_read(c, ks, b, 12, buf, 5, &n, &st));
	CHECK(n == 0, "read at the end: %zu bytes", n);
	n = 31337;
	FAILS(TYR_NOT_FOUND, tyr_read(c, ks, missing, 0, buf, 5, &n, &st));
	CHECK(n == 31337, "n written on failure");

	/* put: small (atomic) and over TYR_PAYLOAD_BYTES_MAX (streamed) */
	OK(tyr_put(c, ks, b, "put data", 8, &st));
	CONTENT(b, "put data", 8);
	OK(tyr_put(c, ks, K("blob/fresh"), "new", 3, &st));
	CONTENT(K("blob/fresh"), "new", 3);
	size_t bign = 5 * MiB + 333;
	big = xmalloc(bign);
	pattern(big, bign, 1, 0);
	OK(tyr_put(c, ks, K("blob/bigput"), big, bign, &st));
	CONTENT(K("blob/bigput"), big, bign);
	OK(tyr_put(c, ks, K("blob/bigput"), "small", 5, &st));
	CONTENT(K("blob/bigput"), "small", 5);
	OK(tyr_put(c, ks, K("blob/bigput"), NULL, 0, &st));
	CONTENT(K("blob/bigput"), "", 0);

	/* write of more than one payload: in parts */
	memset(&res, 0, sizeof res);
	OK(tyr_write(c, ks, K("blob/bigwrite"), 100, big, bign, 1, &res, &st));
	CHECK(res.size == 100 + bign, "size after a write in parts: %llu",
	      (unsigned long long)res.size);
	uint8_t *back = xmalloc(bign + 100);
	n = 0;
	OK(tyr_read(c, ks, K("blob/bigwrite"), 0, back, bign + 100, &n, &st));
	CHECK(n == bign + 100, "read %zu of %zu", n, bign + 100);
	SAME("zeros before the write", back, (uint8_t[100]){0}, 100);
	SAME("a write in parts", back + 100, big, bign);
	free(back);
	free(big);

	/* truncate: shrink, grow with zeros, beyond the limit */
	OK(tyr_truncate(c, ks, b, 3, &st));
	CONTENT(b, "put", 3);
	OK(tyr_truncate(c, ks, b, 6, &st));
	CONTENT(b, "put\0\0\0", 6);
	FAILS(TYR_NOT_FOUND, tyr_truncate(c, ks, missing, 1, &st));
	FAILS(TYR_OUT_OF_RANGE, tyr_truncate(c, ks, b, TYR_BLOB_BYTES_MAX + 1, &st));
	FAILS(TYR_OUT_OF_RANGE, tyr_write(c, ks, b, TYR_BLOB_BYTES_MAX, "x", 1, 0, NULL, &st));
	CHECK(size_of(b) == 6, "size changed by refused calls");

	/* atomics at width 8, in every function */
	const char *ctr = K("blob/ctr");
	OK(tyr_put(c, ks, ctr, (uint8_t[8]){0}, 8, &st));
	struct {
		int fn;
		uint64_t operand, want;
	} steps[] = {
		{TYR_FUNC_ADD, 5, 5},
		{TYR_FUNC_SUB, 2, 3},
		{TYR_FUNC_MUL, 7, 21},
		{TYR_FUNC_AND, 0x1C, 20},
		{TYR_FUNC_OR, 1, 21},
		{TYR_FUNC_XOR, 0xFF, 234},
		{TYR_FUNC_MIN_SIGNED, (uint64_t)-1, (uint64_t)-1},
		{TYR_FUNC_MAX_UNSIGNED, 5, (uint64_t)-1},
		{TYR_FUNC_SET, 100, 100},
		{TYR_FUNC_MAX_SIGNED, (uint64_t)-5, 100},
		{TYR_FUNC_MIN_UNSIGNED, 50, 50},
		{TYR_FUNC_MAX_SIGNED, 70, 70},
		{TYR_FUNC_MIN_SIGNED, 80, 70},
		{TYR_FUNC_MAX_UNSIGNED, 90, 90},
		{TYR_FUNC_SUB, 91, (uint64_t)-1},
		{TYR_FUNC_ADD, 2, 1},
	};
	for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
		uint64_t v = 0xabcdef;
		OK(tyr_atomic(c, ks, ctr, 0, 8, steps[i].fn, steps[i].operand, &v, &st));
		CHECK(v == steps[i].want, "step %zu (func %d, operand %llu): value %llu, want %llu", i,
		      steps[i].fn, (unsigned long long)steps[i].operand, (unsigned long long)v,
		      (unsigned long long)steps[i].want);
	}
	uint8_t le[8];
	OK(tyr_read(c, ks, ctr, 0, le, 8, &n, &st));
	CHECK(n == 8 && le64(le) == 1, "stored value %llu", (unsigned long long)le64(le));
	OK(tyr_atomic(c, ks, ctr, 0, 8, TYR_FUNC_ADD, 1, NULL, &st)); /* NULL value */
	/* width 1 wraps; the other bytes stay */
	OK(tyr_put(c, ks, ctr, "\xfa\x01\x02", 3, &st));
	uint64_t v = 0;
	OK(tyr_atomic(c, ks, ctr, 0, 1, TYR_FUNC_ADD, 10, &v, &st));
	CHECK(v == 4, "width 1: 250+10 = %llu, want 4", (unsigned long long)v);
	OK(tyr_atomic(c, ks, ctr, 1, 2, TYR_FUNC_ADD, 0xFFFF, &v, &st));
	CHECK(v == 0x0200, "width 2: 0x0201+0xffff = %#llx", (unsigned long long)v);
	CONTENT(ctr, "\x04\x00\x02", 3);
	v = 5555;
	FAILS(TYR_INVALID_ARGUMENT, tyr_atomic(c, ks, ctr, 0, 3, TYR_FUNC_ADD, 1, &v, &st));
	CHECK(v == 5555, "value written on failure");
	FAILS(TYR_INVALID_ARGUMENT, tyr_atomic(c, ks, ctr, 0, 8, 99, 1, &v, &st));
	FAILS(TYR_NOT_FOUND, tyr_atomic(c, ks, missing, 0, 8, TYR_FUNC_ADD, 1, &v, &st));

	/* compare-and-swap */
	const char *cas = K("blob/cas");
	OK(tyr_put(c, ks, cas, "AAAABBBB", 8, &st));
	OK(tyr_cas(c, ks, cas, 4, "BBBB", "CCCC", 4, &st));
	CONTENT(cas, "AAAACCCC", 8);
	FAILS(TYR_CONFLICT, tyr_cas(c, ks, cas, 4, "BBBB", "DDDD", 4, &st));
	CHECK(HAS_FLAG(TYR_FLAG_REFUSED) && HAS_FLAG(TYR_FLAG_RETRYABLE) &&
	          !HAS_FLAG(TYR_FLAG_OUTCOME_UNKNOWN),
	      "flags %#x", st.flags);
	CONTENT(cas, "AAAACCCC", 8);

	/* delete */
	OK(tyr_delete(c, ks, cas, &st));
	ABSENT(cas);
	FAILS(TYR_NOT_FOUND, tyr_delete(c, ks, cas, &st));
	FAILS(TYR_NOT_FOUND, tyr_get(c, ks, cas, &(void *){NULL}, &(size_t){0}, &st));

	/* errors of arguments, and NULL st everywhere it is allowed */
	char longkey[TYR_KEY_BYTES_MAX + 2];
	memset(longkey, 'k', sizeof longkey - 1);
	longkey[sizeof longkey - 1] = 0;
	FAILS(TYR_INVALID_ARGUMENT, tyr_create(c, ks, longkey, &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_create(c, ks, "", &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_create(c, ks, NULL, &st));
	/* A NULL keyspace is the empty name, which no keyspace has. */
	FAILS(TYR_NOT_FOUND, tyr_create(c, NULL, b, &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_stat(c, ks, b, NULL, &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_get(c, ks, b, NULL, NULL, &st));
	/* NULL data of a length: refused, whatever the code, not a crash. */
	reset_status(&st);
	CHECK(tyr_write(c, ks, b, 0, NULL, 5, 0, NULL, &st) != TYR_OK && st.code != TYR_OK,
	      "NULL data of 5 bytes written");
	FAILS(TYR_NOT_FOUND, tyr_stat(c, "no-such-keyspace", b, &bi, &st));
	FAILS(TYR_NOT_FOUND, tyr_put(c, "no-such-keyspace", b, "x", 1, &st));
	memset(&bi2, 0x77, sizeof bi2);
	tyr_blob_info bi_before = bi2;
	CHECK(tyr_stat(c, ks, missing, &bi2, NULL) == TYR_NOT_FOUND, "NULL st");
	CHECK(memcmp(&bi2, &bi_before, sizeof bi2) == 0, "stat wrote out on failure");
	CHECK(tyr_put(c, ks, K("blob/nullst"), "q", 1, NULL) == TYR_OK, "NULL st");
	CHECK(tyr_append(c, ks, K("blob/nullst"), "r", 1, NULL, NULL) == TYR_OK, "NULL st");
	CONTENT(K("blob/nullst"), "qr", 2);
	CHECK(tyr_delete(c, ks, K("blob/nullst"), NULL) == TYR_OK, "NULL st");
	CHECK(tyr_delete(c, ks, K("blob/nullst"), NULL) == TYR_NOT_FOUND, "NULL st");
}

static void test_commit(void)
{
	section = "tyr_commit";
	OK(tyr_put(c, ks, K("c/ctr"), (uint8_t[8]){40}, 8, &st));
	OK(tyr_put(c, ks, K("c/cas"), "old!", 4, &st));
	OK(tyr_put(c, ks, K("c/del"), "bye", 3, &st));

	tyr_op ops[] = {
		{.kind = TYR_OP_CREATE, .key = K("c/a")},
		{.kind = TYR_OP_WRITE, .key = K("c/b"), .offset = 2, .data = "wxyz", .len = 4, .create = 1},
		{.kind = TYR_OP_APPEND, .key = K("c/b"), .data = "12", .len = 2},
		{.kind = TYR_OP_APPEND, .key = K("c/c"), .data = "fresh", .len = 5, .create = 1},
		{.kind = TYR_OP_TRUNCATE, .key = K("c/b"), .size = 7},
		{.kind = TYR_OP_ATOMIC, .key = K("c/ctr"), .width = 8, .fn = TYR_FUNC_ADD, .operand = 2},
		{.kind = TYR_OP_CAS, .key = K("c/cas"), .offset = 0, .expected = "old!", .data = "new!", .len = 4},
		{.kind = TYR_OP_DELETE, .key = K("c/del")},
	};
	enum { N = sizeof ops / sizeof ops[0] };
	tyr_op_result r[N];
	memset(r, 0xee, sizeof r);
	OK(tyr_commit(c, ks, ops, N, r, &st));
	CHECK(r[0].size == 0 && r[0].version > 0, "create: size %llu version %llu",
	      (unsigned long long)r[0].size, (unsigned long long)r[0].version);
	/* size and version are the blob's after the whole commit. */
	CHECK(r[1].offset == 2 && r[1].size == 7, "write: offset %llu size %llu",
	      (unsigned long long)r[1].offset, (unsigned long long)r[1].size);
	CHECK(r[2].offset == 6 && r[2].size == 7, "append: offset %llu size %llu",
	      (unsigned long long)r[2].offset, (unsigned long long)r[2].size);
	CHECK(r[3].offset == 0 && r[3].size == 5, "append create: offset %llu size %llu",
	      (unsigned long long)r[3].offset, (unsigned long long)r[3].size);
	CHECK(r[4].size == 7, "truncate: size %llu", (unsigned long long)r[4].size);
	CHECK(r[1].version == r[2].version && r[2].version == r[4].version,
	      "versions of one blob in one commit: %llu %llu %llu", (unsigned long long)r[1].version,
	      (unsigned long long)r[2].version, (unsigned long long)r[4].version);
	CHECK(r[5].value == 42 && r[5].size == 8, "atomic: value %llu",
	      (unsigned long long)r[5].value);
	CHECK(r[6].size == 4 && r[6].version > 0, "cas: size %llu", (unsigned long long)r[6].size);
	CHECK(r[7].version == 0, "delete: version %llu", (unsigned long long)r[7].version);
	CONTENT(K("c/a"), "", 0);
	CONTENT(K("c/b"), "\0\0wxyz1", 7);
	CONTENT(K("c/c"), "fresh", 5);
	uint8_t want[8] = {42};
	CONTENT(K("c/ctr"), want, 8);
	CONTENT(K("c/cas"), "new!", 4);
	ABSENT(K("c/del"));
	tyr_blob_info bi;
	OK(tyr_stat(c, ks, K("c/b"), &bi, &st));
	CHECK(bi.version == r[4].version, "stat version %llu, commit said %llu",
	      (unsigned long long)bi.version, (unsigned long long)r[4].version);

	/* NULL results */
	tyr_op one = {.kind = TYR_OP_APPEND, .key = K("c/c"), .data = "+", .len = 1};
	OK(tyr_commit(c, ks, &one, 1, NULL, &st));
	CONTENT(K("c/c"), "fresh+", 6);

	/* All or none: the last op fails, the first ones do not happen. */
	tyr_op bad[] = {
		{.kind = TYR_OP_WRITE, .key = K("c/none"), .data = "x", .len = 1, .create = 1},
		{.kind = TYR_OP_APPEND, .key = K("c/c"), .data = "y", .len = 1},
		{.kind = TYR_OP_CREATE, .key = K("c/a")},
	};
	memset(r, 0xee, sizeof r);
	tyr_op_result rb[N];
	memcpy(rb, r, sizeof r);
	FAILS(TYR_EXISTS, tyr_commit(c, ks, bad, 3, r, &st));
	CHECK(HAS_FLAG(TYR_FLAG_REFUSED), "flags %#x", st.flags);
	CHECK(memcmp(r, rb, sizeof r) == 0, "results written on failure");
	ABSENT(K("c/none"));
	CONTENT(K("c/c"), "fresh+", 6);
	/* A failed compare-and-swap fails the commit. */
	tyr_op badcas[] = {
		{.kind = TYR_OP_APPEND, .key = K("c/c"), .data = "y", .len = 1},
		{.kind = TYR_OP_CAS, .key = K("c/cas"), .expected = "old!", .data = "zzz!", .len = 4},
	};
	FAILS(TYR_CONFLICT, tyr_commit(c, ks, badcas, 2, NULL, &st));
	CONTENT(K("c/c"), "fresh+", 6);
	CONTENT(K("c/cas"), "new!", 4);
	/* Invalid ops. */
	tyr_op inval[] = {{.kind = 99, .key = K("c/c")}};
	FAILS(TYR_INVALID_ARGUMENT, tyr_commit(c, ks, inval, 1, NULL, &st));
	tyr_op nokey[] = {{.kind = TYR_OP_CREATE, .key = NULL}};
	FAILS(TYR_INVALID_ARGUMENT, tyr_commit(c, ks, nokey, 1, NULL, &st));
	tyr_op width[] = {{.kind = TYR_OP_ATOMIC, .key = K("c/ctr"), .width = 5, .fn = TYR_FUNC_ADD}};
	FAILS(TYR_INVALID_ARGUMENT, tyr_commit(c, ks, width, 1, NULL, &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_commit(c, ks, NULL, 2, NULL, &st));
	CONTENT(K("c/ctr"), want, 8);
}

/* ---- transactions ------------------------------------------------------ */

static void test_tx(void)
{
	section = "transactions";
	tyr_tx tx = 0;
	char buf[64];
	size_t n;
	uint64_t size;

	OK(tyr_put(c, ks, K("tx/x"), "abcdef", 6, &st));
	OK(tyr_put(c, ks, K("tx/gone"), "gone", 4, &st));
	OK(tyr_put(c, ks, K("tx/trunc"), "0123456789", 10, &st));
	OK(tyr_put(c, ks, K("tx/ctr"), (uint8_t[8]){7}, 8, &st));
	OK(tyr_put(c, ks, K("tx/cas"), "yes", 3, &st));

	OK(tyr_tx_begin(c, ks, &tx, &st));
	CHECK(tx != 0, "handle 0");
	OK(tyr_tx_read(tx, K("tx/x"), 0, buf, sizeof buf, &n, &st));
	CHECK(n == 6 && memcmp(buf, "abcdef", 6) == 0, "read \"%.*s\"", (int)n, buf);
	OK(tyr_tx_size(tx, K("tx/x"), &size, &st));
	CHECK(size == 6, "size %llu", (unsigned long long)size);
	OK(tyr_tx_write(tx, K("tx/x"), 0, "XY", 2, &st));
	OK(tyr_tx_read(tx, K("tx/x"), 0, buf, sizeof buf, &n, &st));
	CHECK(n == 6 && memcmp(buf, "XYcdef", 6) == 0, "own write not seen: \"%.*s\"", (int)n, buf);
	OK(tyr_tx_append(tx, K("tx/x"), "gh", 2, &st));
	OK(tyr_tx_size(tx, K("tx/x"), &size, &st));
	CHECK(size == 8, "size after append %llu", (unsigned long long)size);
	OK(tyr_tx_truncate(tx, K("tx/trunc"), 4, &st));
	OK(tyr_tx_size(tx, K("tx/trunc"), &size, &st));
	CHECK(size == 4, "size after truncate %llu", (unsigned long long)size);
	OK(tyr_tx_create(tx, K("tx/new"), &st));
	OK(tyr_tx_size(tx, K("tx/new"), &size, &st));
	CHECK(size == 0, "created size %llu", (unsigned long long)size);
	OK(tyr_tx_delete(tx, K("tx/gone"), &st));
	FAILS(TYR_NOT_FOUND, tyr_tx_size(tx, K("tx/gone"), &size, &st));
	FAILS(TYR_NOT_FOUND, tyr_tx_read(tx, K("tx/absent"), 0, buf, 4, &n, &st));
	tyr_op ops[] = {
		{.kind = TYR_OP_ATOMIC, .key = K("tx/ctr"), .width = 8, .fn = TYR_FUNC_MUL, .operand = 6},
		{.kind = TYR_OP_CAS, .key = K("tx/cas"), .expected = "yes", .data = "YES", .len = 3},
		{.kind = TYR_OP_APPEND, .key = K("tx/appended"), .data = "ap", .len = 2, .create = 1},
	};
	OK(tyr_tx_do(tx, ops, 3, &st));
	OK(tyr_tx_read(tx, K("tx/ctr"), 0, buf, 8, &n, &st));
	CHECK(n == 8 && le64((uint8_t *)buf) == 42, "atomic in view: %llu",
	      (unsigned long long)le64((uint8_t *)buf));
	/* Nothing is sent yet. */
	CONTENT(K("tx/x"), "abcdef", 6);
	ABSENT(K("tx/new"));

	tyr_op_result r[16];
	memset(r, 0xee, sizeof r);
	tyr_op_result sentinel = r[15];
	size_t nops = 0;
	OK(tyr_tx_commit(tx, r, 3, &nops, &st));
	CHECK(nops == 8, "%zu buffered ops, want 8", nops);
	CHECK(r[0].offset == 0 && r[0].size == 8, "write result: offset %llu size %llu",
	      (unsigned long long)r[0].offset, (unsigned long long)r[0].size);
	CHECK(r[1].offset == 6 && r[1].size == 8, "append result: offset %llu size %llu",
	      (unsigned long long)r[1].offset, (unsigned long long)r[1].size);
	CHECK(r[2].size == 4, "truncate result: size %llu", (unsigned long long)r[2].size);
	CHECK(memcmp(&r[3], &sentinel, sizeof sentinel) == 0, "results beyond cap written");
	CONTENT(K("tx/x"), "XYcdefgh", 8);
	CONTENT(K("tx/trunc"), "0123", 4);
	CONTENT(K("tx/new"), "", 0);
	ABSENT(K("tx/gone"));
	CONTENT(K("tx/ctr"), (uint8_t[8]){42}, 8);
	CONTENT(K("tx/cas"), "YES", 3);
	CONTENT(K("tx/appended"), "ap", 2);
	/* Committed: the handle lives until tyr_tx_close, but is done. */
	FAILS(TYR_INVALID_ARGUMENT, tyr_tx_commit(tx, NULL, 0, NULL, &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_tx_write(tx, K("tx/x"), 0, "no", 2, &st));
	tyr_tx_close(tx);
	/* Closed: stale. */
	FAILS(TYR_INVALID_ARGUMENT, tyr_tx_read(tx, K("tx/x"), 0, buf, 4, &n, &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_tx_size(tx, K("tx/x"), &size, &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_tx_write(tx, K("tx/x"), 0, "no", 2, &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_tx_commit(tx, NULL, 0, NULL, &st));
	CHECK(tyr_tx_delete(tx, K("tx/x"), NULL) == TYR_INVALID_ARGUMENT, "NULL st");
	tyr_tx_close(tx); /* twice: harmless */
	tyr_tx_close(0);
	FAILS(TYR_INVALID_ARGUMENT, tyr_tx_begin(0, ks, &tx, &st));

	/* Conflict: a blob read changed before the commit. Repeatable
	 * reads meanwhile. */
	OK(tyr_put(c, ks, K("tx/r"), "v1", 2, &st));
	OK(tyr_tx_begin(c, ks, &tx, &st));
	OK(tyr_tx_read(tx, K("tx/r"), 0, buf, sizeof buf, &n, &st));
	CHECK(n == 2 && memcmp(buf, "v1", 2) == 0, "read \"%.*s\"", (int)n, buf);
	/* An overwrite in place: the version read stays readable (MVCC). */
	OK(tyr_write(c, ks, K("tx/r"), 0, "V2", 2, 0, NULL, &st));
	OK(tyr_tx_read(tx, K("tx/r"), 0, buf, sizeof buf, &n, &st));
	CHECK(n == 2 && memcmp(buf, "v1", 2) == 0, "not a repeatable read: \"%.*s\"", (int)n, buf);
	OK(tyr_tx_write(tx, K("tx/w"), 0, "lost", 4, &st));
	nops = 777;
	FAILS(TYR_CONFLICT, tyr_tx_commit(tx, NULL, 0, &nops, &st));
	CHECK(HAS_FLAG(TYR_FLAG_REFUSED) && HAS_FLAG(TYR_FLAG_RETRYABLE), "flags %#x", st.flags);
	CHECK(nops == 777, "n written on failure");
	tyr_tx_close(tx);
	ABSENT(K("tx/w"));
	CONTENT(K("tx/r"), "V2", 2);

	/* Conflict on a blob read as absent that was created meanwhile. */
	OK(tyr_tx_begin(c, ks, &tx, &st));
	FAILS(TYR_NOT_FOUND, tyr_tx_size(tx, K("tx/phantom"), &size, &st));
	OK(tyr_create(c, ks, K("tx/phantom"), &st));
	OK(tyr_tx_write(tx, K("tx/w"), 0, "lost", 4, &st));
	FAILS(TYR_CONFLICT, tyr_tx_commit(tx, NULL, 0, NULL, &st));
	tyr_tx_close(tx);
	ABSENT(K("tx/w"));

	/* Closed without a commit: rolled back, nothing written. */
	OK(tyr_tx_begin(c, ks, &tx, &st));
	OK(tyr_tx_read(tx, K("tx/r"), 0, buf, 2, &n, &st));
	OK(tyr_tx_write(tx, K("tx/w"), 0, "lost", 4, &st));
	tyr_tx_close(tx);
	ABSENT(K("tx/w"));
	FAILS(TYR_INVALID_ARGUMENT, tyr_tx_commit(tx, NULL, 0, NULL, &st));

	/* Limits. */
	OK(tyr_tx_begin(c, ks, &tx, &st));
	void *huge = xmalloc(TYR_PAYLOAD_BYTES_MAX + 1);
	FAILS(TYR_TOO_LARGE, tyr_tx_read(tx, K("tx/x"), 0, huge, TYR_PAYLOAD_BYTES_MAX + 1, &n, &st));
	free(huge);
	tyr_op *many = calloc(TYR_OPS_PER_TX_MAX + 1, sizeof *many);
	for (size_t i = 0; i <= TYR_OPS_PER_TX_MAX; i++)
		many[i] = (tyr_op){.kind = TYR_OP_ATOMIC, .key = K("tx/ctr"), .width = 8,
		                   .fn = TYR_FUNC_ADD, .operand = 1};
	reset_status(&st);
	int rc = tyr_tx_do(tx, many, TYR_OPS_PER_TX_MAX + 1, &st);
	CHECK(rc == TYR_TOO_LARGE || rc == TYR_INVALID_ARGUMENT, "%d ops in one call: %s",
	      TYR_OPS_PER_TX_MAX + 1, tyr_code_name(rc));
	/* The limit over several calls, and the commit then refused. */
	OK(tyr_tx_do(tx, many, TYR_OPS_PER_TX_MAX, &st));
	FAILS(TYR_TOO_LARGE, tyr_tx_do(tx, many, 1, &st));
	FAILS(TYR_TOO_LARGE, tyr_tx_commit(tx, NULL, 0, NULL, &st));
	free(many);
	tyr_tx_close(tx);
	CONTENT(K("tx/ctr"), (uint8_t[8]){42}, 8);
}

/* run_tx callbacks */

struct incr {
	const char *key;
	int calls;
	int conflict_first; /* return TYR_CONFLICT from the first call */
	int change_first;   /* change key behind the first call's back */
	int give_up;        /* return this code (not OK, not CONFLICT) */
	tyr_tx seen;        /* the handle of the last call */
	tyr_client cl;
	char err[TYR_MESSAGE_BYTES + 64];
};

/* incr_fn adds 1 to the little-endian counter of 8 bytes at key. */
static int incr_fn(tyr_tx tx, void *arg)
{
	struct incr *a = arg;
	tyr_status s;
	uint8_t b[8] = {0};
	size_t n = 0;
	a->calls++;
	a->seen = tx;
	int rc = tyr_tx_read(tx, a->key, 0, b, 8, &n, &s);
	if (rc != TYR_OK) {
		if (rc != TYR_CONFLICT)
			snprintf(a->err, sizeof a->err, "tyr_tx_read: %s", s.message);
		return rc;
	}
	if (n != 8) {
		snprintf(a->err, sizeof a->err, "read %zu bytes", n);
		return TYR_UNKNOWN;
	}
	put_le64(b, le64(b) + 1);
	rc = tyr_tx_write(tx, a->key, 0, b, 8, &s);
	if (rc != TYR_OK) {
		snprintf(a->err, sizeof a->err, "tyr_tx_write: %s", s.message);
		return rc;
	}
	if (a->calls == 1 && a->conflict_first)
		return TYR_CONFLICT;
	if (a->calls == 1 && a->change_first) {
		/* A write behind the transaction's back: its commit conflicts. */
		rc = tyr_atomic(a->cl, ks, a->key, 0, 8, TYR_FUNC_ADD, 100, NULL, &s);
		if (rc != TYR_OK) {
			snprintf(a->err, sizeof a->err, "tyr_atomic: %s", s.message);
			return TYR_UNKNOWN;
		}
	}
	if (a->give_up)
		return a->give_up;
	return TYR_OK;
}

static uint64_t counter(const char *key)
{
	uint8_t b[8];
	size_t n = 0;
	OK(tyr_read(c, ks, key, 0, b, 8, &n, &st));
	CHECK(n == 8, "counter %s of %zu bytes", key, n);
	return le64(b);
}

static int always_conflict(tyr_tx tx, void *arg)
{
	(void)tx;
	(*(int *)arg)++;
	return TYR_CONFLICT;
}

static void test_run_tx(void)
{
	section = "tyr_run_tx";
	const char *key = K("run/ctr");
	OK(tyr_put(c, ks, key, (uint8_t[8]){0}, 8, &st));

	struct incr a = {.key = key, .cl = c};
	OK(tyr_run_tx(c, ks, incr_fn, &a, 0, &st));
	CHECK(a.calls == 1 && a.err[0] == 0, "calls %d: %s", a.calls, a.err);
	CHECK(counter(key) == 1, "counter %llu", (unsigned long long)counter(key));
	/* The handle is valid only during the call. */
	FAILS(TYR_INVALID_ARGUMENT, tyr_tx_size(a.seen, key, &(uint64_t){0}, &st));

	/* The callback says conflict once: run again, committed once. */
	a = (struct incr){.key = key, .cl = c, .conflict_first = 1};
	OK(tyr_run_tx(c, ks, incr_fn, &a, 0, &st));
	CHECK(a.calls == 2 && a.err[0] == 0, "calls %d: %s", a.calls, a.err);
	CHECK(counter(key) == 2, "counter %llu, want 2", (unsigned long long)counter(key));

	/* A real conflict at the commit: run again on the new value. */
	a = (struct incr){.key = key, .cl = c, .change_first = 1};
	OK(tyr_run_tx(c, ks, incr_fn, &a, 0, &st));
	CHECK(a.calls == 2 && a.err[0] == 0, "calls %d: %s", a.calls, a.err);
	CHECK(counter(key) == 103, "counter %llu, want 2+100+1", (unsigned long long)counter(key));

	/* Another code: given up with that code, nothing committed. */
	a = (struct incr){.key = key, .cl = c, .give_up = TYR_OUT_OF_RANGE};
	FAILS(TYR_OUT_OF_RANGE, tyr_run_tx(c, ks, incr_fn, &a, 0, &st));
	CHECK(a.calls == 1, "calls %d", a.calls);
	a = (struct incr){.key = key, .cl = c, .give_up = TYR_NOT_FOUND};
	CHECK(tyr_run_tx(c, ks, incr_fn, &a, 0, NULL) == TYR_NOT_FOUND, "NULL st");
	CHECK(a.calls == 1, "calls %d", a.calls);
	CHECK(counter(key) == 103, "an aborted transaction committed: %llu",
	      (unsigned long long)counter(key));

	/* A read error ends it with that error. */
	a = (struct incr){.key = K("run/absent"), .cl = c};
	FAILS(TYR_NOT_FOUND, tyr_run_tx(c, ks, incr_fn, &a, 0, &st));
	CHECK(a.calls == 1, "calls %d", a.calls);

	/* Conflicts every time: the first run and max_retries more. */
	int calls = 0;
	FAILS(TYR_CONFLICT, tyr_run_tx(c, ks, always_conflict, &calls, 3, &st));
	CHECK(calls == 4, "calls %d, want 1 + 3 retries", calls);
	CHECK(HAS_FLAG(TYR_FLAG_RETRYABLE), "flags %#x", st.flags);
	calls = 0;
	FAILS(TYR_CONFLICT, tyr_run_tx(c, ks, always_conflict, &calls, 0, &st));
	CHECK(calls == 11, "calls %d, want 1 + 10 retries by default", calls);

	FAILS(TYR_INVALID_ARGUMENT, tyr_run_tx(c, ks, NULL, NULL, 0, &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_run_tx(0, ks, incr_fn, &a, 0, &st));
}

/* ---- streams ----------------------------------------------------------- */

static void test_streams(void)
{
	section = "streams";
	const char *key = K("stream/big");
	const size_t total = 9 * MiB + 12345; /* three parts and a bit */
	uint8_t *data = xmalloc(total), *back = xmalloc(total);
	pattern(data, total, 42, 0);

	tyr_writer w = 0;
	OK(tyr_writer_open(c, ks, key, 0, 1, &w, &st));
	CHECK(w != 0, "handle 0");
	/* Writes of uneven sizes, some above a part, some tiny. */
	size_t sizes[] = {1, 1000, MiB + 7, 5 * MiB, 3, 2 * MiB + 1};
	size_t off = 0;
	for (int i = 0; off < total; i++) {
		size_t m = sizes[i % (sizeof sizes / sizeof sizes[0])];
		if (m > total - off)
			m = total - off;
		OK(tyr_writer_write(w, data + off, m, &st));
		off += m;
	}
	OK(tyr_writer_close(w, &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_writer_write(w, data, 1, &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_writer_close(w, &st));
	CHECK(size_of(key) == total, "size %llu, want %zu", (unsigned long long)size_of(key), total);

	/* The whole blob through a reader, in uneven reads. */
	tyr_reader r = 0;
	OK(tyr_reader_open(c, ks, key, 0, -1, &r, &st));
	CHECK(r != 0, "handle 0");
	size_t got = 0, n = 1;
	size_t rsizes[] = {777777, 1, 4 * MiB + 1, 65536};
	for (int i = 0; got < total + 1; i++) {
		size_t m = rsizes[i % 4];
		if (m > total + 1 - got)
			m = total + 1 - got; /* never beyond the buffer */
		if (got == total)
			break;
		OK(tyr_reader_read(r, back + got, m < total - got ? m : total - got, &n, &st));
		CHECK(n > 0, "reader ended at %zu of %zu", got, total);
		got += n;
	}
	uint8_t extra[16];
	OK(tyr_reader_read(r, extra, sizeof extra, &n, &st));
	CHECK(n == 0, "%zu bytes beyond the end", n);
	OK(tyr_reader_read(r, extra, sizeof extra, &n, &st));
	CHECK(n == 0, "%zu bytes beyond the end, again", n);
	tyr_reader_close(r);
	CHECK(got == total, "read %zu of %zu", got, total);
	SAME("streamed blob", back, data, total);
	FAILS(TYR_INVALID_ARGUMENT, tyr_reader_read(r, extra, sizeof extra, &n, &st));
	tyr_reader_close(r); /* twice: harmless */
	tyr_reader_close(0);

	/* A range across part boundaries. */
	const uint64_t ro = 4 * MiB - 3;
	const size_t rl = 5 * MiB + 9;
	OK(tyr_reader_open(c, ks, key, ro, (int64_t)rl, &r, &st));
	memset(back, 0, total);
	got = 0;
	for (;;) {
		OK(tyr_reader_read(r, back + got, total - got, &n, &st));
		if (n == 0)
			break;
		got += n;
	}
	tyr_reader_close(r);
	CHECK(got == rl, "range read %zu bytes, want %zu", got, rl);
	SAME("range", back, data + ro, rl);

	/* The same blob by tyr_read (one version, in parts) and tyr_get. */
	memset(back, 0, total);
	OK(tyr_read(c, ks, key, 0, back, total, &n, &st));
	CHECK(n == total, "tyr_read %zu of %zu", n, total);
	SAME("tyr_read of a big blob", back, data, total);
	CONTENT(key, data, total);
	/* Through the endpoint only, by the data path and by gRPC. */
	tyr_client via[] = {c_direct, c_grpc};
	for (int i = 0; i < 2; i++) {
		memset(back, 0, total);
		OK(tyr_read(via[i], ks, key, 0, back, total, &n, &st));
		CHECK(n == total, "tyr_read by client %d: %zu of %zu", i, n, total);
		SAME(i == 0 ? "read without routing" : "read over gRPC", back, data, total);
	}

	/* A writer at an offset into the blob, not creating. */
	uint8_t patch[3 * MiB];
	pattern(patch, sizeof patch, 7, 0);
	OK(tyr_writer_open(c, ks, key, 2 * MiB, 0, &w, &st));
	OK(tyr_writer_write(w, patch, sizeof patch, &st));
	OK(tyr_writer_close(w, &st));
	memcpy(data + 2 * MiB, patch, sizeof patch);
	CONTENT(key, data, total);

	/* A missing blob: the reader fails at open or first read, the
	 * writer without create at a write or the close. */
	const char *missing = K("stream/missing");
	reset_status(&st);
	int rc = tyr_reader_open(c, ks, missing, 0, -1, &r, &st);
	if (rc == TYR_OK) {
		rc = tyr_reader_read(r, back, 10, &n, &st);
		tyr_reader_close(r);
	}
	CHECK(rc == TYR_NOT_FOUND && st.code == rc, "reader of a missing blob: %s: %s",
	      tyr_code_name(rc), st.message);
	reset_status(&st);
	rc = tyr_writer_open(c, ks, missing, 0, 0, &w, &st);
	if (rc == TYR_OK) {
		int wrc = tyr_writer_write(w, data, 10, &st);
		rc = tyr_writer_close(w, &st);
		if (wrc != TYR_OK)
			rc = wrc;
	}
	CHECK(rc == TYR_NOT_FOUND, "writer to a missing blob: %s: %s", tyr_code_name(rc),
	      st.message);
	ABSENT(missing);
	FAILS(TYR_INVALID_ARGUMENT, tyr_reader_open(c, ks, key, 0, -1, NULL, &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_writer_open(0, ks, key, 0, 1, &w, &st));
	free(data);
	free(back);
}

/* ---- list -------------------------------------------------------------- */

static void test_list(void)
{
	section = "list";
	enum { KEYS = 25 };
	char key[128];
	for (int i = 0; i < KEYS; i++) {
		snprintf(key, sizeof key, "list/k%02d", i);
		uint8_t data[KEYS] = {0};
		OK(tyr_put(c, ks, K(key), data, (size_t)i, &st));
	}
	OK(tyr_put(c, ks, K("listx"), "not under list/", 15, &st));

	char lp[128];
	snprintf(lp, sizeof lp, "%slist/", prefix);
	char *after = NULL;
	int seen = 0, pages = 0;
	for (;;) {
		tyr_blob_info *out = NULL;
		size_t n = 999;
		char *next = (char *)1;
		OK(tyr_list(c, ks, lp, after, 10, &out, &n, &next, &st));
		pages++;
		CHECK(n <= 10, "page of %zu entries", n);
		if (pages == 1)
			CHECK(n == 10 && next != NULL, "first page: %zu entries, next %s", n,
			      next ? next : "NULL");
		for (size_t i = 0; i < n; i++, seen++) {
			snprintf(key, sizeof key, "%slist/k%02d", prefix, seen);
			CHECK(out[i].key != NULL && strcmp(out[i].key, key) == 0,
			      "entry %d is \"%s\", want \"%s\"", seen, out[i].key ? out[i].key : "NULL", key);
			CHECK(out[i].size == (uint64_t)seen && out[i].version > 0 && out[i].modified_ns > 0,
			      "%s: size %llu version %llu", key, (unsigned long long)out[i].size,
			      (unsigned long long)out[i].version);
		}
		tyr_free(out);
		tyr_free(after);
		after = next;
		if (!next)
			break;
		CHECK(pages < 5, "more than 4 pages of 10 for 25 keys");
	}
	CHECK(seen == KEYS, "listed %d keys in %d pages, want %d", seen, pages, KEYS);

	/* limit 0: the default, all in one page, no next; next may be NULL */
	tyr_blob_info *out = NULL;
	size_t n = 0;
	char *next = (char *)1;
	OK(tyr_list(c, ks, lp, NULL, 0, &out, &n, &next, &st));
	CHECK(n == KEYS && next == NULL, "limit 0: %zu entries, next %s", n, next ? next : "NULL");
	tyr_free(out);
	OK(tyr_list(c, ks, lp, NULL, 0, &out, &n, NULL, &st));
	CHECK(n == KEYS, "NULL next: %zu entries", n);
	tyr_free(out);

	/* start_after inside the range, prefix NULL: everything after it. */
	char start[128];
	snprintf(start, sizeof start, "%slist/k22", prefix);
	OK(tyr_list(c, ks, NULL, start, TYR_LIST_LIMIT_MAX, &out, &n, &next, &st));
	CHECK(n >= 3 && strcmp(out[0].key, K("list/k23")) == 0 &&
	          strcmp(out[2].key, K("listx")) == 0,
	      "after k22: %zu entries, first %s", n, n ? out[0].key : "-");
	tyr_free(out);
	tyr_free(next);

	/* Nothing matches: an empty page. */
	snprintf(start, sizeof start, "%snothing/", prefix);
	next = (char *)1;
	OK(tyr_list(c, ks, start, NULL, 5, &out, &n, &next, &st));
	CHECK(n == 0 && next == NULL, "empty prefix: %zu entries", n);
	tyr_free(out);

	size_t n0 = 4242;
	FAILS(TYR_INVALID_ARGUMENT, tyr_list(c, ks, lp, NULL, TYR_LIST_LIMIT_MAX + 1, &out, &n0, NULL, &st));
	CHECK(n0 == 4242, "n written on failure");
	FAILS(TYR_NOT_FOUND, tyr_list(c, "no-such-keyspace", NULL, NULL, 0, &out, &n, NULL, &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_list(c, ks, lp, NULL, 0, NULL, NULL, NULL, &st));
}

/* ---- JSON -------------------------------------------------------------- */

static int count(const char *s, const char *sub)
{
	int k = 0;
	for (const char *p = s; (p = strstr(p, sub)) != NULL; p += strlen(sub))
		k++;
	return k;
}

static void looks_like_object(int line, const char *what, const char *j)
{
	counted();
	size_t len = j ? strlen(j) : 0;
	if (len < 2 || j[0] != '{' || j[len - 1] != '}')
		failf(line, "%s: not a JSON object: %.200s", what, j ? j : "NULL");
	int depth = 0, in_str = 0;
	for (size_t i = 0; i < len; i++) {
		char ch = j[i];
		if (in_str) {
			if (ch == '\\')
				i++;
			else if (ch == '"')
				in_str = 0;
			continue;
		}
		if (ch == '"')
			in_str = 1;
		else if (ch == '{' || ch == '[')
			depth++;
		else if (ch == '}' || ch == ']')
			depth--;
		if (depth < 0 || (depth == 0 && i != len - 1))
			failf(line, "%s: unbalanced at byte %zu: %.200s", what, i, j);
	}
	if (depth != 0 || in_str)
		failf(line, "%s: unbalanced: %.200s", what, j);
}

static void test_json(void)
{
	section = "JSON";
	char *j = NULL;
	OK(tyr_cluster_status_json(c, &j, &st));
	looks_like_object(__LINE__, "cluster status", j);
	CHECK(strstr(j, "\"Members\"") && strstr(j, "\"Self\"") && strstr(j, "\"Keyspaces\""),
	      "cluster status fields: %.300s", j);
	char quoted[80];
	snprintf(quoted, sizeof quoted, "\"%s\"", ks);
	CHECK(strstr(j, quoted) != NULL, "keyspace %s not in the cluster status: %.300s", ks, j);
	const char *nodes = getenv("TYR_TEST_NODES");
	if (nodes && *nodes) {
		int want = atoi(nodes);
		CHECK(count(j, "\"RPCAddr\"") == want && count(j, "\"alive\"") == want,
		      "want %d alive members: %.600s", want, j);
	}
	tyr_free(j);
	j = NULL;
	OK(tyr_node_usage_json(c, &j, &st));
	looks_like_object(__LINE__, "node usage", j);
	CHECK(strstr(j, "\"CapacityBytes\"") && strstr(j, "\"StoredBytes\""), "node usage fields: %.300s", j);
	tyr_free(j);
	FAILS(TYR_INVALID_ARGUMENT, tyr_node_usage_json(c, NULL, &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_cluster_status_json(0, &j, &st));
}

/* ---- TýrFS ------------------------------------------------------------- */

static void test_fs(void)
{
	section = "tyrfs";
	tyr_fs fs = 0;
	uint32_t gids[] = {100, 200};
	OK(tyr_fs_open(c, ks, 1000, gids, 2, &fs, &st));
	CHECK(fs != 0, "no handle");
	/* The root exists (tyr_fs_open makes it); the rest is refused, each
	 * with its errno, and a refusal fails no other path. */
	const char *paths[] = {"/", "/none", "relative", "/none/deeper"};
	int want[] = {EISDIR, ENOENT, EINVAL, ENOENT};
	tyr_fs_file out[4];
	OK(tyr_fs_fetch_many(fs, paths, 4, out, &st));
	for (int i = 0; i < 4; i++) {
		CHECK(out[i].err == want[i] && out[i].data == NULL && out[i].len == 0,
		      "%s: errno %d, %zu bytes; want errno %d", paths[i], out[i].err, out[i].len, want[i]);
	}
	OK(tyr_fs_fetch_many(fs, NULL, 0, NULL, &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_fs_fetch_many(fs, paths, TYR_FS_FETCH_MANY_MAX + 1, out, &st));
	const char *null_path[] = {"/", NULL};
	FAILS(TYR_INVALID_ARGUMENT, tyr_fs_fetch_many(fs, null_path, 2, out, &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_fs_open(c, ks, 0, NULL, 1, &fs, &st));
	FAILS(TYR_INVALID_ARGUMENT, tyr_fs_open(c, ks, 0, gids, TYR_FS_GROUPS_MAX + 1, &fs, &st));
	FAILS(TYR_NOT_FOUND, tyr_fs_open(c, "no-such-keyspace", 0, NULL, 0, &(tyr_fs){0}, &st));
	tyr_fs_close(fs);
	FAILS(TYR_INVALID_ARGUMENT, tyr_fs_fetch_many(fs, paths, 1, out, &st));
	tyr_fs_close(fs); /* a closed handle: nothing */
}

/* ---- deadlines --------------------------------------------------------- */

static void test_timeout(void)
{
	section = "deadline";
	tyr_client ct = 0;
	/* 1 ms cannot read 9 MiB. */
	OK(tyr_connect(endpoint, 1, 0, &ct, &st));
	void *data = NULL;
	size_t len = 0;
	FAILS(TYR_TIMEOUT, tyr_get(ct, ks, K("stream/big"), &data, &len, &st));
	CHECK(data == NULL, "data written on failure");

	/* Each call of a stream has the deadline too: 9 MiB through a
	 * reader cannot take 1 ms a call either (its open reads the first
	 * part). */
	tyr_reader r = 0;
	reset_status(&st);
	int rc = tyr_reader_open(ct, ks, K("stream/big"), 0, -1, &r, &st);
	size_t got = 0;
	if (rc == TYR_OK) {
		uint8_t *buf = xmalloc(MiB);
		size_t n = 0;
		do {
			rc = tyr_reader_read(r, buf, MiB, &n, &st);
			got += n;
		} while (rc == TYR_OK && n > 0);
		free(buf);
		tyr_reader_close(r);
	}
	CHECK(rc == TYR_TIMEOUT && st.code == rc,
	      "a reader of a client with a deadline of 1 ms: %s after %zu bytes, want timeout",
	      tyr_code_name(rc), got);
	CHECK(tyr_close(ct) == TYR_OK, "close");
}

/* ---- concurrency ------------------------------------------------------- */

enum { THREADS = 8, ADDS = 150, TXS = 12, APPENDS = 40, REC = 16 };

struct worker {
	int id;
	char err[3 * TYR_MESSAGE_BYTES];
};

#define WFAIL(...)                                                       \
	do {                                                             \
		snprintf(w->err, sizeof w->err, __VA_ARGS__);            \
		return NULL;                                             \
	} while (0)

static void *worker(void *arg)
{
	struct worker *w = arg;
	tyr_status s;
	for (int i = 0; i < ADDS; i++) {
		int rc = tyr_atomic(c, ks, K("conc/adds"), 0, 8, TYR_FUNC_ADD, (uint64_t)w->id + 1, NULL, &s);
		if (rc != TYR_OK)
			WFAIL("atomic add %d: %s: %s", i, tyr_code_name(rc), s.message);
		if (i % 10 == 0) {
			uint8_t rec[REC];
			memset(rec, 0, sizeof rec);
			put_le64(rec, (uint64_t)w->id);
			put_le64(rec + 8, (uint64_t)i / 10);
			uint64_t off;
			rc = tyr_append(c, ks, K("conc/log"), rec, REC, &off, &s);
			if (rc != TYR_OK)
				WFAIL("append: %s: %s", tyr_code_name(rc), s.message);
			if (off % REC != 0)
				WFAIL("append landed at %llu", (unsigned long long)off);
		}
	}
	for (int i = 0; i < TXS; i++) {
		struct incr a = {.key = K("conc/tx"), .cl = c};
		int rc = tyr_run_tx(c, ks, incr_fn, &a, 100, &s);
		if (rc != TYR_OK)
			WFAIL("run_tx %d (%d calls): %s: %s %s", i, a.calls, tyr_code_name(rc), s.message, a.err);
	}
	/* A key of its own: put, get, compare. */
	char key[64];
	snprintf(key, sizeof key, "conc/own%d", w->id);
	uint8_t mine[3000], *got = NULL;
	pattern(mine, sizeof mine, (uint64_t)w->id, 0);
	size_t len = 0;
	int rc = tyr_put(c, ks, K(key), mine, sizeof mine, &s);
	if (rc == TYR_OK)
		rc = tyr_get(c, ks, K(key), (void **)&got, &len, &s);
	if (rc != TYR_OK)
		WFAIL("put/get %s: %s: %s", key, tyr_code_name(rc), s.message);
	if (len != sizeof mine || memcmp(got, mine, len) != 0)
		WFAIL("%s: got %zu other bytes", key, len);
	tyr_free(got);
	return NULL;
}

static void test_concurrency(void)
{
	section = "concurrency";
	OK(tyr_put(c, ks, K("conc/adds"), (uint8_t[8]){0}, 8, &st));
	OK(tyr_put(c, ks, K("conc/tx"), (uint8_t[8]){0}, 8, &st));
	OK(tyr_create(c, ks, K("conc/log"), &st));
	pthread_t th[THREADS];
	struct worker ws[THREADS];
	for (int i = 0; i < THREADS; i++) {
		ws[i] = (struct worker){.id = i};
		CHECK(pthread_create(&th[i], NULL, worker, &ws[i]) == 0, "pthread_create");
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < THREADS; i++)
		CHECK(ws[i].err[0] == 0, "thread %d: %s", i, ws[i].err);
	uint64_t want = (uint64_t)ADDS * THREADS * (THREADS + 1) / 2;
	CHECK(counter(K("conc/adds")) == want, "atomic adds: %llu, want %llu",
	      (unsigned long long)counter(K("conc/adds")), (unsigned long long)want);
	CHECK(counter(K("conc/tx")) == (uint64_t)THREADS * TXS, "transactions: %llu, want %d",
	      (unsigned long long)counter(K("conc/tx")), THREADS * TXS);
	/* Every appended record exactly once. */
	void *data = NULL;
	size_t len = 0;
	OK(tyr_get(c, ks, K("conc/log"), &data, &len, &st));
	const size_t per = (ADDS + 9) / 10;
	CHECK(len == THREADS * per * REC, "log of %zu bytes, want %zu", len, THREADS * per * REC);
	int seen[THREADS][(ADDS + 9) / 10] = {{0}};
	for (size_t o = 0; o < len; o += REC) {
		uint64_t id = le64((uint8_t *)data + o), i = le64((uint8_t *)data + o + 8);
		CHECK(id < THREADS && i < per, "record at %zu: %llu/%llu", o, (unsigned long long)id,
		      (unsigned long long)i);
		seen[id][i]++;
	}
	for (int t = 0; t < THREADS; t++)
		for (size_t i = 0; i < per; i++)
			CHECK(seen[t][i] == 1, "record %d/%zu appended %d times", t, i, seen[t][i]);
	tyr_free(data);
}

/* ---- main -------------------------------------------------------------- */

/* wait_keyspace waits until every member of the cluster has keyspace ks
 * (a new keyspace reaches the other nodes by gossip). */
static void wait_keyspace(void)
{
	char *j = NULL;
	OK(tyr_cluster_status_json(c, &j, &st));
	const char *field = "\"RPCAddr\":\"";
	for (char *p = strstr(j, field); p; p = strstr(p, field)) {
		char addr[256];
		p += strlen(field);
		snprintf(addr, sizeof addr, "%.*s", (int)strcspn(p, "\""), p);
		tyr_client node = 0;
		OK(tyr_connect(addr, 5000, TYR_CONNECT_NO_ROUTING, &node, &st));
		int rc = TYR_NOT_FOUND;
		tyr_keyspace_info info;
		for (int tries = 0; tries < 600 && rc == TYR_NOT_FOUND; tries++) {
			if ((rc = tyr_keyspace_get(node, ks, &info, &st)) == TYR_NOT_FOUND)
				usleep(100 * 1000);
		}
		CHECK(rc == TYR_OK, "keyspace %s on %s: %s", ks, addr, st.message);
		tyr_close(node);
	}
	tyr_free(j);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	endpoint = argc > 1 ? argv[1] : getenv("TYR_ENDPOINT");
	if (!endpoint || !*endpoint)
		endpoint = "127.0.0.1:7420";
	const char *given = argc > 2 ? argv[2] : getenv("TYR_KEYSPACE");
	int own = !given || !*given;
	if (own)
		snprintf(ks, sizeof ks, "ctest-%d-%ld", (int)getpid(), (long)time(NULL) % 100000);
	else
		snprintf(ks, sizeof ks, "%s", given);
	snprintf(prefix, sizeof prefix, "run-%d-%ld/", (int)getpid(), (long)time(NULL));

	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	test_codes();
	test_connect();
	if (own) {
		section = "setup";
		tyr_keyspace_config cfg = {.chunk_size = 64 << 10, .replication = 1, .mvcc = 1};
		OK(tyr_keyspace_create(c, ks, &cfg, NULL, &st));
		wait_keyspace();
	}
	printf("tyr_test: %s, keyspace %s, keys under %s\n", endpoint, ks, prefix);

	struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {
		{"keyspaces", test_keyspaces},   {"blobs", test_blobs},
		{"commit", test_commit},         {"transactions", test_tx},
		{"run_tx", test_run_tx},         {"streams", test_streams},
		{"list", test_list},             {"json", test_json},
		{"timeout", test_timeout},       {"concurrency", test_concurrency},
		{"tyrfs", test_fs},
	};
	for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
		struct timespec a, b;
		int before = checks;
		clock_gettime(CLOCK_MONOTONIC, &a);
		tests[i].fn();
		clock_gettime(CLOCK_MONOTONIC, &b);
		printf("ok   %-13s %5d checks  %7.3f s\n", tests[i].name, checks - before,
		       (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
	}

	section = "teardown";
	CHECK(tyr_close(c_direct) == TYR_OK && tyr_close(c_grpc) == TYR_OK, "close");
	if (own)
		OK(tyr_keyspace_drop(c, ks, &st));
	CHECK(tyr_close(c) == TYR_OK, "close");
	FAILS(TYR_INVALID_ARGUMENT, tyr_stat(c, ks, K("blob/b1"), &(tyr_blob_info){0}, &st));
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("PASS: %d checks in %.3f s\n", checks,
	       (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	return 0;
}

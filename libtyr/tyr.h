/*
 * tyr.h: the C API of tyr, implemented by libtyr (the Go client built as a
 * C shared library). The Go client's logic comes with it unchanged: routing
 * to the node that serves a blob, transactions with repeatable reads,
 * retries, and resolution of a commit whose answer was lost.
 *
 * Conventions
 *  - Every call that can fail returns a tyr_code (TYR_OK is 0) and, when st
 *    is not NULL, fills *st with the code, flags and a message. Out
 *    parameters are written only on TYR_OK.
 *  - Clients, transactions, readers and writers are opaque 64-bit handles;
 *    0 is never a valid one. A handle used after it was closed gives
 *    TYR_INVALID_ARGUMENT, never a crash. libtyr keeps no pointer given to
 *    it after a call returns: data passed in may be freed or reused at once.
 *  - Strings (keyspace names, keys, prefixes) are NUL-terminated UTF-8; a
 *    key never holds a NUL byte (the server refuses one).
 *  - Memory libtyr returns (tyr_get, tyr_list, tyr_keyspace_list, the JSON
 *    calls) is allocated with malloc and released with tyr_free.
 *  - Every call is thread-safe except on one transaction, reader or writer,
 *    which one thread uses at a time. Calls block; each has the client's
 *    deadline (tyr_connect's timeout_ms).
 *  - libtyr starts a Go runtime in the process. It does not survive fork():
 *    a child forked after the library was loaded must not call it (exec
 *    first, or load the library after forking).
 *
 * Versioning: TYR_API_VERSION grows with every change to this header;
 * changes only add calls, fields at the end of structs libtyr never
 * allocates for the caller, codes and flags. tyr_api_version() returns the
 * version the loaded library implements.
 */
#ifndef TYR_H
#define TYR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TYR_API_VERSION 2

/* Limits the server enforces (internal/limits); README lists them all. */
#define TYR_PAYLOAD_BYTES_MAX (4u << 20) /* one request's data */
#define TYR_KEY_BYTES_MAX 4096u
#define TYR_KEYSPACE_NAME_BYTES_MAX 63u
#define TYR_BLOB_BYTES_MAX (UINT64_C(1) << 44)
#define TYR_LIST_LIMIT_MAX 10000u
#define TYR_CAS_BYTES_MAX (4u << 10)
#define TYR_OPS_PER_TX_MAX 1024u
#define TYR_READ_CHECKS_MAX 1024u
#define TYR_FS_FETCH_MANY_MAX 256u /* paths of one tyr_fs_fetch_many */
#define TYR_FS_GROUPS_MAX 64u      /* groups a file system acts for */

/* Error codes: the Go client's error classes, and two of the call. */
typedef enum tyr_code {
	TYR_OK = 0,
	TYR_NOT_FOUND = 1,
	TYR_EXISTS = 2,
	TYR_INVALID_ARGUMENT = 3,
	TYR_OUT_OF_RANGE = 4,
	TYR_TOO_LARGE = 5,
	TYR_UNAVAILABLE = 6,
	TYR_CONFLICT = 7,
	TYR_CORRUPTION = 8,
	TYR_NO_SPACE = 9,
	TYR_TIMEOUT = 10, /* the call's deadline passed */
	TYR_UNKNOWN = 11  /* an error of no known class */
} tyr_code;

/* Flags of a failed call, in tyr_status.flags. */
#define TYR_FLAG_REFUSED 1u         /* the commit certainly changed nothing */
#define TYR_FLAG_RETRYABLE 2u       /* sending it again can succeed */
#define TYR_FLAG_OUTCOME_UNKNOWN 4u /* the answer was lost and the outcome
                                       could not be learnt (TYR_UNAVAILABLE) */

#define TYR_MESSAGE_BYTES 512

typedef struct tyr_status {
	int code;        /* a tyr_code */
	uint32_t flags;  /* TYR_FLAG_* */
	char message[TYR_MESSAGE_BYTES]; /* NUL-terminated, cut to fit */
} tyr_status;

typedef uint64_t tyr_client;
typedef uint64_t tyr_tx;
typedef uint64_t tyr_reader;
typedef uint64_t tyr_writer;
typedef uint64_t tyr_fs;

/* Flags of tyr_connect. */
#define TYR_CONNECT_NO_ROUTING 1u   /* send every request to the endpoint */
#define TYR_CONNECT_NO_DATA_PATH 2u /* read over gRPC, not the data path */

typedef struct tyr_keyspace_config {
	uint64_t chunk_size;  /* 0: the server's default, 64 MiB */
	uint32_t replication; /* 0: the server's default, 1 */
	int mvcc;             /* keep old versions for readers */
	int sync;             /* fsync every commit */
} tyr_keyspace_config;

typedef struct tyr_keyspace_info {
	char name[TYR_KEYSPACE_NAME_BYTES_MAX + 1];
	tyr_keyspace_config config;
	int64_t created_ns; /* Unix time in nanoseconds */
	/* The answering node's figures; only tyr_keyspace_get fills them. */
	uint64_t disk_bytes, logical_bytes, reclaim_bytes, blobs;
} tyr_keyspace_info;

typedef struct tyr_blob_info {
	const char *key; /* in tyr_list's array; NULL from tyr_stat */
	uint64_t size;
	uint64_t version;
	int64_t created_ns, modified_ns;
} tyr_blob_info;

/* A file read by tyr_fs_fetch_many. */
typedef struct tyr_fs_file {
	void *data;       /* its bytes (tyr_free); NULL when empty or failed */
	size_t len;
	int err;          /* 0, or the errno of its failure: ENOENT, EACCES,
	                     ENOTDIR, EISDIR, EINVAL, ENAMETOOLONG, EIO... */
	uint32_t mode;    /* permission bits (07777) */
	uint32_t uid, gid;
	int64_t mtime_ns; /* Unix time in nanoseconds */
} tyr_fs_file;

typedef struct tyr_op_result {
	uint64_t offset;  /* where the data landed (write, append) */
	uint64_t size;    /* the blob's size after the commit */
	uint64_t version; /* the blob's version after it; 0 after a delete */
	uint64_t value;   /* the new value (atomic) */
} tyr_op_result;

/* Atomic functions (tyr_atomic, TYR_OP_ATOMIC). Arithmetic wraps at the
 * width; SUB is current - operand; the signed ones read two's complement. */
typedef enum tyr_func {
	TYR_FUNC_ADD = 1,
	TYR_FUNC_SUB = 2,
	TYR_FUNC_MUL = 3,
	TYR_FUNC_AND = 4,
	TYR_FUNC_OR = 5,
	TYR_FUNC_XOR = 6,
	TYR_FUNC_MIN_SIGNED = 7,
	TYR_FUNC_MAX_SIGNED = 8,
	TYR_FUNC_MIN_UNSIGNED = 9,
	TYR_FUNC_MAX_UNSIGNED = 10,
	TYR_FUNC_SET = 11
} tyr_func;

/* One op of an atomic commit (tyr_commit, tyr_tx_do). */
typedef enum tyr_op_kind {
	TYR_OP_CREATE = 1,   /* key; TYR_EXISTS if it exists */
	TYR_OP_WRITE = 2,    /* key, offset, data, len, create */
	TYR_OP_APPEND = 3,   /* key, data, len, create */
	TYR_OP_TRUNCATE = 4, /* key, size */
	TYR_OP_DELETE = 5,   /* key */
	TYR_OP_ATOMIC = 6,   /* key, offset, width, fn, operand */
	TYR_OP_CAS = 7       /* key, offset, expected, data, len */
} tyr_op_kind;

typedef struct tyr_op {
	int kind; /* a tyr_op_kind */
	const char *key;
	uint64_t offset;
	const void *data;
	size_t len;
	const void *expected;
	uint64_t size;
	int create;
	int width;
	int fn; /* a tyr_func */
	uint64_t operand;
} tyr_op;

/* The body of a transaction run by tyr_run_tx. It returns TYR_OK to commit,
 * TYR_CONFLICT to run again, or any other code to give up (tyr_run_tx then
 * returns it). tx is valid only during the call. */
typedef int (*tyr_tx_fn)(tyr_tx tx, void *arg);

/* Calls. */
#ifndef TYR_TYPES_ONLY /* defined only where libtyr implements them */

/* The version of this API the library implements (TYR_API_VERSION). */
int tyr_api_version(void);
/* The name of a code ("not found", ...); a static string. */
const char *tyr_code_name(int code);
/* Releases memory libtyr returned. */
void tyr_free(void *p);

/* tyr_connect makes a client of the server or cluster at endpoint
 * (host:port; NULL or "" means 127.0.0.1:7420). It does not wait for a
 * connection; the first call does. timeout_ms bounds every call of the
 * client (0: no deadline). */
int tyr_connect(const char *endpoint, int64_t timeout_ms, uint32_t flags,
                tyr_client *out, tyr_status *st);
/* tyr_close closes the client's connections; calls in flight fail. */
int tyr_close(tyr_client c);
/* tyr_ready returns TYR_OK when the endpoint serves reads. */
int tyr_ready(tyr_client c, tyr_status *st);

/* cfg NULL means the defaults: 64 MiB chunks, one replica, MVCC and sync
 * on. info may be NULL. */
int tyr_keyspace_create(tyr_client c, const char *name,
                        const tyr_keyspace_config *cfg, tyr_keyspace_info *info,
                        tyr_status *st);
int tyr_keyspace_drop(tyr_client c, const char *name, tyr_status *st);
int tyr_keyspace_get(tyr_client c, const char *name, tyr_keyspace_info *out,
                     tyr_status *st);
/* All keyspaces by name: *out is an array of *n entries (tyr_free). */
int tyr_keyspace_list(tyr_client c, tyr_keyspace_info **out, size_t *n,
                      tyr_status *st);

int tyr_create(tyr_client c, const char *ks, const char *key, tyr_status *st);
int tyr_delete(tyr_client c, const char *ks, const char *key, tyr_status *st);
int tyr_stat(tyr_client c, const char *ks, const char *key,
             tyr_blob_info *out, tyr_status *st);
int tyr_truncate(tyr_client c, const char *ks, const char *key, uint64_t size,
                 tyr_status *st);
/* Writes len bytes at offset; with create a missing blob is created,
 * otherwise TYR_NOT_FOUND. More than TYR_PAYLOAD_BYTES_MAX is written in
 * parts, each atomic, the whole not. res may be NULL. */
int tyr_write(tyr_client c, const char *ks, const char *key, uint64_t offset,
              const void *data, size_t len, int create, tyr_op_result *res,
              tyr_status *st);
/* Appends atomically (at most TYR_PAYLOAD_BYTES_MAX bytes, else
 * TYR_TOO_LARGE) to an existing blob; *offset (may be NULL) is where the
 * data landed. */
int tyr_append(tyr_client c, const char *ks, const char *key, const void *data,
               size_t len, uint64_t *offset, tyr_status *st);
/* Creates or replaces the blob with data: atomic up to
 * TYR_PAYLOAD_BYTES_MAX bytes; larger puts empty the blob and stream the
 * data into it, which readers may see in part. */
int tyr_put(tyr_client c, const char *ks, const char *key, const void *data,
            size_t len, tyr_status *st);
/* Reads up to len bytes from offset into buf, all from one version; *n is
 * short at the end of the blob. */
int tyr_read(tyr_client c, const char *ks, const char *key, uint64_t offset,
             void *buf, size_t len, size_t *n, tyr_status *st);
/* Reads the whole blob, from one version: *data (tyr_free) of *len bytes;
 * *data is NULL when the blob is empty. */
int tyr_get(tyr_client c, const char *ks, const char *key, void **data,
            size_t *len, tyr_status *st);

/* Applies fn to the little-endian unsigned integer of width bytes (1, 2, 4
 * or 8) at offset of an existing blob; *value (may be NULL) is the new
 * value. */
int tyr_atomic(tyr_client c, const char *ks, const char *key, uint64_t offset,
               int width, int fn, uint64_t operand, uint64_t *value,
               tyr_status *st);
/* Replaces len bytes at offset with data if they equal expected;
 * TYR_CONFLICT, changing nothing, if they do not. */
int tyr_cas(tyr_client c, const char *ks, const char *key, uint64_t offset,
            const void *expected, const void *data, size_t len,
            tyr_status *st);

/* Lists up to limit (0: 1000, at most TYR_LIST_LIMIT_MAX) blobs whose keys
 * start with prefix and sort after start_after (either may be NULL), in key
 * order. *out is an array of *n entries whose keys live in the same block
 * (one tyr_free). *next (may be NULL) is NULL at the end, otherwise a key to
 * pass as start_after for the next page (tyr_free). */
int tyr_list(tyr_client c, const char *ks, const char *prefix,
             const char *start_after, size_t limit, tyr_blob_info **out,
             size_t *n, char **next, tyr_status *st);

/* Applies n ops to blobs of ks atomically: all or none, in order. results
 * (NULL, or n entries) gets each op's outcome. A lost answer is resolved as
 * the Go client does; TYR_FLAG_OUTCOME_UNKNOWN when it could not be. */
int tyr_commit(tyr_client c, const char *ks, const tyr_op *ops, size_t n,
               tyr_op_result *results, tyr_status *st);

/* Transactions: optimistic and serializable over the blobs of one keyspace.
 * Reads go to the server at once and pin the version of each blob read
 * (repeatable reads, the transaction's own ops applied on top); the rest is
 * buffered (its data copied) and sent by tyr_tx_commit with a check of
 * every blob read: TYR_CONFLICT, changing nothing, if one changed. */
int tyr_tx_begin(tyr_client c, const char *ks, tyr_tx *out, tyr_status *st);
int tyr_tx_read(tyr_tx tx, const char *key, uint64_t offset, void *buf,
                size_t len, size_t *n, tyr_status *st);
int tyr_tx_size(tyr_tx tx, const char *key, uint64_t *size, tyr_status *st);
int tyr_tx_do(tyr_tx tx, const tyr_op *ops, size_t n, tyr_status *st);
/* Buffering shorthands; write and append create a missing blob. */
int tyr_tx_write(tyr_tx tx, const char *key, uint64_t offset, const void *data,
                 size_t len, tyr_status *st);
int tyr_tx_append(tyr_tx tx, const char *key, const void *data, size_t len,
                  tyr_status *st);
int tyr_tx_truncate(tyr_tx tx, const char *key, uint64_t size, tyr_status *st);
int tyr_tx_create(tyr_tx tx, const char *key, tyr_status *st);
int tyr_tx_delete(tyr_tx tx, const char *key, tyr_status *st);
/* Commits; results (NULL, or cap entries) gets the first cap buffered ops'
 * outcomes, *n (may be NULL) the number of buffered ops. */
int tyr_tx_commit(tyr_tx tx, tyr_op_result *results, size_t cap, size_t *n,
                  tyr_status *st);
/* Rolls back a transaction not committed and releases the handle. */
void tyr_tx_close(tyr_tx tx);

/* Runs fn (see tyr_tx_fn) in a transaction and commits it, running it
 * again after a conflict (from a read, the commit or fn) with jittered
 * exponential backoff, at most max_retries times (0: 10). */
int tyr_run_tx(tyr_client c, const char *ks, tyr_tx_fn fn, void *arg,
               int max_retries, tyr_status *st);

/* Streams: a blob read or written in parts of TYR_PAYLOAD_BYTES_MAX with a
 * few in flight; each part atomic, the stream not. A stream lasts until
 * it is closed; each call on it (open, read, write, close) is bounded by
 * the client's timeout_ms: a call that passes it fails with TYR_TIMEOUT
 * and cancels the stream, whose later calls fail too. */
/* length < 0 reads to the end. */
int tyr_reader_open(tyr_client c, const char *ks, const char *key,
                    uint64_t offset, int64_t length, tyr_reader *out,
                    tyr_status *st);
/* *n is 0 at the end. */
int tyr_reader_read(tyr_reader r, void *buf, size_t len, size_t *n,
                    tyr_status *st);
void tyr_reader_close(tyr_reader r);
/* With create a missing blob is created. */
int tyr_writer_open(tyr_client c, const char *ks, const char *key,
                    uint64_t offset, int create, tyr_writer *out,
                    tyr_status *st);
int tyr_writer_write(tyr_writer w, const void *data, size_t len,
                     tyr_status *st);
/* Writes the last part, waits for all and releases the handle; returns the
 * stream's first error. */
int tyr_writer_close(tyr_writer w, tyr_status *st);

/* TýrFS, the file system `tyr mount` serves from a keyspace (README,
 * TýrFS). tyr_fs_open opens the one of ks (making its root directory if
 * the keyspace has none), acting for uid and the ngids groups of gids
 * (root: 0, none); the servers check permissions for them, as NFS's
 * AUTH_SYS does, without authenticating them. */
int tyr_fs_open(tyr_client c, const char *ks, uint32_t uid,
                const uint32_t *gids, size_t ngids, tyr_fs *out,
                tyr_status *st);
/* Reads the whole files at the n absolute paths (at most
 * TYR_FS_FETCH_MANY_MAX) into out[0..n), each as one request to the node
 * that holds it, which checks search permission on the directories above
 * it and read permission on it; the requests bound for one node travel
 * together. A file that cannot be read has its errno in err; the call
 * fails only as a whole (a bad argument, a closed handle). Free each
 * out[i].data with tyr_free. */
int tyr_fs_fetch_many(tyr_fs fs, const char *const *paths, size_t n,
                      tyr_fs_file *out, tyr_status *st);
void tyr_fs_close(tyr_fs fs);

/* The cluster as the endpoint sees it, and the endpoint's usage, as JSON
 * objects (tyr_free): the Go client's ClusterStatus and NodeUsage with
 * their field names. */
int tyr_cluster_status_json(tyr_client c, char **json, tyr_status *st);
int tyr_node_usage_json(tyr_client c, char **json, tyr_status *st);

#endif /* TYR_TYPES_ONLY */

#ifdef __cplusplus
}
#endif

#endif /* TYR_H */

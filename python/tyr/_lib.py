"""Loading of libtyr, the C API of tyr (``libtyr/tyr.h``), with cffi in ABI mode.

The library is loaded at the first :func:`tyr.connect`, not at import, from
``libtyr.so`` next to this file or from the path in the ``TYR_LIBRARY``
environment variable. libtyr runs a Go runtime, which does not survive
``fork()``: a child forked after the library was loaded gets a
:class:`tyr.Error` from every call instead of a hang.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Optional

from cffi import FFI

#: The version of tyr.h these bindings were written against; the loaded
#: library must implement at least this one (later versions only add).
API_VERSION = 2

# Limits the server enforces (TYR_*_MAX in tyr.h).
PAYLOAD_BYTES_MAX = 4 << 20
KEY_BYTES_MAX = 4096
KEYSPACE_NAME_BYTES_MAX = 63
BLOB_BYTES_MAX = 1 << 44
LIST_LIMIT_MAX = 10000
CAS_BYTES_MAX = 4 << 10
OPS_PER_TX_MAX = 1024
READ_CHECKS_MAX = 1024
FS_FETCH_MANY_MAX = 256
FS_GROUPS_MAX = 64

# Codes (enum tyr_code).
OK = 0
NOT_FOUND = 1
EXISTS = 2
INVALID_ARGUMENT = 3
OUT_OF_RANGE = 4
TOO_LARGE = 5
UNAVAILABLE = 6
CONFLICT = 7
CORRUPTION = 8
NO_SPACE = 9
TIMEOUT = 10
UNKNOWN = 11

# Flags of a failed call (tyr_status.flags).
FLAG_REFUSED = 1
FLAG_RETRYABLE = 2
FLAG_OUTCOME_UNKNOWN = 4

# Flags of tyr_connect.
CONNECT_NO_ROUTING = 1
CONNECT_NO_DATA_PATH = 2

# Op kinds (enum tyr_op_kind).
OP_CREATE = 1
OP_WRITE = 2
OP_APPEND = 3
OP_TRUNCATE = 4
OP_DELETE = 5
OP_ATOMIC = 6
OP_CAS = 7

CDEF = """
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
	TYR_TIMEOUT = 10,
	TYR_UNKNOWN = 11
} tyr_code;

typedef struct tyr_status {
	int code;
	uint32_t flags;
	char message[512];
} tyr_status;

typedef uint64_t tyr_client;
typedef uint64_t tyr_tx;
typedef uint64_t tyr_reader;
typedef uint64_t tyr_writer;
typedef uint64_t tyr_fs;

typedef struct tyr_fs_file {
	void *data;
	size_t len;
	int err;
	uint32_t mode;
	uint32_t uid, gid;
	int64_t mtime_ns;
} tyr_fs_file;

typedef struct tyr_keyspace_config {
	uint64_t chunk_size;
	uint32_t replication;
	int mvcc;
	int sync;
} tyr_keyspace_config;

typedef struct tyr_keyspace_info {
	char name[64];
	tyr_keyspace_config config;
	int64_t created_ns;
	uint64_t disk_bytes, logical_bytes, reclaim_bytes, blobs;
} tyr_keyspace_info;

typedef struct tyr_blob_info {
	const char *key;
	uint64_t size;
	uint64_t version;
	int64_t created_ns, modified_ns;
} tyr_blob_info;

typedef struct tyr_op_result {
	uint64_t offset;
	uint64_t size;
	uint64_t version;
	uint64_t value;
} tyr_op_result;

typedef struct tyr_op {
	int kind;
	const char *key;
	uint64_t offset;
	const void *data;
	size_t len;
	const void *expected;
	uint64_t size;
	int create;
	int width;
	int fn;
	uint64_t operand;
} tyr_op;

typedef int (*tyr_tx_fn)(tyr_tx tx, void *arg);

int tyr_api_version(void);
const char *tyr_code_name(int code);
void tyr_free(void *p);

int tyr_connect(const char *endpoint, int64_t timeout_ms, uint32_t flags,
                tyr_client *out, tyr_status *st);
int tyr_close(tyr_client c);
int tyr_ready(tyr_client c, tyr_status *st);

int tyr_keyspace_create(tyr_client c, const char *name,
                        const tyr_keyspace_config *cfg, tyr_keyspace_info *info,
                        tyr_status *st);
int tyr_keyspace_drop(tyr_client c, const char *name, tyr_status *st);
int tyr_keyspace_get(tyr_client c, const char *name, tyr_keyspace_info *out,
                     tyr_status *st);
int tyr_keyspace_list(tyr_client c, tyr_keyspace_info **out, size_t *n,
                      tyr_status *st);

int tyr_create(tyr_client c, const char *ks, const char *key, tyr_status *st);
int tyr_delete(tyr_client c, const char *ks, const char *key, tyr_status *st);
int tyr_stat(tyr_client c, const char *ks, const char *key,
             tyr_blob_info *out, tyr_status *st);
int tyr_truncate(tyr_client c, const char *ks, const char *key, uint64_t size,
                 tyr_status *st);
int tyr_write(tyr_client c, const char *ks, const char *key, uint64_t offset,
              const void *data, size_t len, int create, tyr_op_result *res,
              tyr_status *st);
int tyr_append(tyr_client c, const char *ks, const char *key, const void *data,
               size_t len, uint64_t *offset, tyr_status *st);
int tyr_put(tyr_client c, const char *ks, const char *key, const void *data,
            size_t len, tyr_status *st);
int tyr_read(tyr_client c, const char *ks, const char *key, uint64_t offset,
             void *buf, size_t len, size_t *n, tyr_status *st);
int tyr_get(tyr_client c, const char *ks, const char *key, void **data,
            size_t *len, tyr_status *st);
int tyr_atomic(tyr_client c, const char *ks, const char *key, uint64_t offset,
               int width, int fn, uint64_t operand, uint64_t *value,
               tyr_status *st);
int tyr_cas(tyr_client c, const char *ks, const char *key, uint64_t offset,
            const void *expected, const void *data, size_t len,
            tyr_status *st);
int tyr_list(tyr_client c, const char *ks, const char *prefix,
             const char *start_after, size_t limit, tyr_blob_info **out,
             size_t *n, char **next, tyr_status *st);

int tyr_commit(tyr_client c, const char *ks, const tyr_op *ops, size_t n,
               tyr_op_result *results, tyr_status *st);

int tyr_tx_begin(tyr_client c, const char *ks, tyr_tx *out, tyr_status *st);
int tyr_tx_read(tyr_tx tx, const char *key, uint64_t offset, void *buf,
                size_t len, size_t *n, tyr_status *st);
int tyr_tx_size(tyr_tx tx, const char *key, uint64_t *size, tyr_status *st);
int tyr_tx_do(tyr_tx tx, const tyr_op *ops, size_t n, tyr_status *st);
int tyr_tx_write(tyr_tx tx, const char *key, uint64_t offset, const void *data,
                 size_t len, tyr_status *st);
int tyr_tx_append(tyr_tx tx, const char *key, const void *data, size_t len,
                  tyr_status *st);
int tyr_tx_truncate(tyr_tx tx, const char *key, uint64_t size, tyr_status *st);
int tyr_tx_create(tyr_tx tx, const char *key, tyr_status *st);
int tyr_tx_delete(tyr_tx tx, const char *key, tyr_status *st);
int tyr_tx_commit(tyr_tx tx, tyr_op_result *results, size_t cap, size_t *n,
                  tyr_status *st);
void tyr_tx_close(tyr_tx tx);
int tyr_run_tx(tyr_client c, const char *ks, tyr_tx_fn fn, void *arg,
               int max_retries, tyr_status *st);

int tyr_reader_open(tyr_client c, const char *ks, const char *key,
                    uint64_t offset, int64_t length, tyr_reader *out,
                    tyr_status *st);
int tyr_reader_read(tyr_reader r, void *buf, size_t len, size_t *n,
                    tyr_status *st);
void tyr_reader_close(tyr_reader r);
int tyr_writer_open(tyr_client c, const char *ks, const char *key,
                    uint64_t offset, int create, tyr_writer *out,
                    tyr_status *st);
int tyr_writer_write(tyr_writer w, const void *data, size_t len,
                     tyr_status *st);
int tyr_writer_close(tyr_writer w, tyr_status *st);

int tyr_fs_open(tyr_client c, const char *ks, uint32_t uid,
                const uint32_t *gids, size_t ngids, tyr_fs *out,
                tyr_status *st);
int tyr_fs_fetch_many(tyr_fs fs, const char *const *paths, size_t n,
                      tyr_fs_file *out, tyr_status *st);
void tyr_fs_close(tyr_fs fs);

int tyr_cluster_status_json(tyr_client c, char **json, tyr_status *st);
int tyr_node_usage_json(tyr_client c, char **json, tyr_status *st);
"""

#: The FFI of tyr.h. Creating cdata needs no library, so other modules use
#: it at import; the library itself is loaded by :func:`lib`.
ffi = FFI()
ffi.cdef(CDEF)

#: An allocator that does not zero what it allocates, for read buffers that
#: libtyr fills before they are looked at.
alloc_uncleared = ffi.new_allocator(should_clear_after_alloc=False)

_lock = threading.Lock()
_lib: Optional[Any] = None
_path: Optional[str] = None
_forked = False

FORK_MESSAGE = (
    "libtyr was loaded before this process was forked, and its Go runtime does not "
    "survive fork(): use tyr in a child started with the 'spawn' or 'forkserver' "
    "multiprocessing start method (or one that execs), or connect only after forking"
)


def default_path() -> str:
    """The path the library is loaded from: ``$TYR_LIBRARY``, else ``libtyr.so`` in this package."""
    env = os.environ.get("TYR_LIBRARY")
    if env:
        return env
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libtyr.so")


def _after_fork_in_child() -> None:
    global _forked
    if _lib is not None:
        _forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def forked() -> bool:
    """Whether this process is a child forked after the library was loaded."""
    return _forked


def check_fork() -> None:
    """Raise :class:`tyr.Error` if this process was forked after the library was loaded."""
    if _forked:
        from .errors import Error

        raise Error(FORK_MESSAGE, code=UNKNOWN, flags=FLAG_REFUSED)


def loaded() -> bool:
    """Whether the library is loaded in this process."""
    return _lib is not None


def lib() -> Any:
    """Return the loaded library, loading it on first use.

    Raises :class:`tyr.Error` if it cannot be loaded, implements an older API
    than these bindings, or this process was forked after loading it.
    """
    check_fork()
    if _lib is not None:
        return _lib
    return _load()


def _load() -> Any:
    global _lib, _path
    from .errors import Error

    with _lock:
        if _lib is not None:
            return _lib
        path = default_path()
        if not os.path.exists(path):
            hint = (
                "TYR_LIBRARY names a file that does not exist"
                if os.environ.get("TYR_LIBRARY")
                else "the package was installed without it: reinstall with `pip install .` "
                "from the repository (needs Go and a C compiler), or set TYR_LIBRARY"
            )
            raise Error(f"libtyr not found at {path}: {hint}", code=UNKNOWN, flags=FLAG_REFUSED)
        try:
            loaded_lib = ffi.dlopen(path)
        except OSError as e:
            raise Error(f"cannot load libtyr from {path}: {e}", code=UNKNOWN, flags=FLAG_REFUSED) from e
        version = loaded_lib.tyr_api_version()
        if version < API_VERSION:
            raise Error(
                f"libtyr at {path} implements API version {version}, "
                f"these bindings need {API_VERSION} or later",
                code=UNKNOWN,
                flags=FLAG_REFUSED,
            )
        _lib, _path = loaded_lib, path
        return _lib


def library_path() -> Optional[str]:
    """The path the library was loaded from, or None if it is not loaded."""
    return _path

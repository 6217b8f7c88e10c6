// Package limits holds every size limit tyr enforces, in one place, so the
// README, the server and the clients agree. Each is checked where input
// arrives and answered with a clear error that changes nothing.
package limits

import "time"

const (
	// KeyBytesMax is the longest blob key, in bytes (UTF-8, no NUL): a
	// TýrFS directory's key, its path and a slash, reaches Linux's
	// PATH_MAX (4,096 bytes with the NUL that ends a path).
	KeyBytesMax = 4096
	// KeyspaceNameBytesMin and KeyspaceNameBytesMax bound keyspace names.
	KeyspaceNameBytesMin = 3
	KeyspaceNameBytesMax = 63
	// BlobBytesMax is the largest logical blob size: 16 TiB. Holes cost
	// nothing, so a blob may be extended to it by truncate.
	BlobBytesMax uint64 = 1 << 44
	// PayloadBytesMax is the most data one request carries (write, append or
	// read). Larger data is streamed in parts by the clients.
	PayloadBytesMax = 4 << 20
	// OpsPerCommitMax is the most ops one commit request may carry.
	OpsPerCommitMax = 1024
	// ReadChecksMax is the most read checks (the read set of a
	// transaction) one commit request may carry, besides its ops.
	ReadChecksMax = 1024
	// CASBytesMax is the most bytes one compare-and-swap compares and
	// writes.
	CASBytesMax = 4 << 10
	// CommitBytesMax is the most data, summed over ops, one commit carries.
	CommitBytesMax = 16 << 20
	// ListLimitMax is the largest page a list request may ask for; a request
	// for 0 gets ListLimitDefault.
	ListLimitMax     = 10000
	ListLimitDefault = 1000
	// ListDataBytesMax is the most blob bytes one list response carries
	// when the request asks for small blobs' bytes (data_max).
	ListDataBytesMax = PayloadBytesMax
	// ChunkBytesMin, ChunkBytesMax and ChunkBytesDefault bound a keyspace's
	// chunk size, which must be a power of two.
	ChunkBytesMin     uint64 = 4 << 10
	ChunkBytesMax     uint64 = 1 << 30
	ChunkBytesDefault uint64 = 64 << 20
	// ReplicationMax is the largest replication factor a keyspace may ask for.
	ReplicationMax = 7
	// KeyspacesMax is the most keyspaces one cluster holds.
	KeyspacesMax = 4096
)

// Message size limits for the transport follow from the payload limits; a
// commit or a list page can never be larger than a gRPC message.
const (
	// keyEntryBytesMax is the room one key's entry takes in a message
	// besides the key: an op's or a listed blob's other fields.
	keyEntryBytesMax = 256
	// MessageBytesMax is the largest message the transport accepts: the
	// larger of the largest commit (its data, and every op and read check
	// naming a key of the longest) and the largest list page (its keys of
	// the longest, and the blobs' bytes it may carry), plus room for the
	// rest.
	MessageBytesMax = max(CommitBytesMax+(OpsPerCommitMax+ReadChecksMax)*(KeyBytesMax+keyEntryBytesMax),
		ListLimitMax*(KeyBytesMax+keyEntryBytesMax)+ListDataBytesMax) + 1<<20
)

// Compile-time relations between limits.
const (
	_ uint64 = ChunkBytesMax - ChunkBytesMin
	_ uint64 = BlobBytesMax - ChunkBytesMax
	_ uint   = CommitBytesMax - PayloadBytesMax
	_ uint   = ListLimitMax - ListLimitDefault
)

// ReconnectDelayMax is the longest a connection to a node that refused or
// dropped it waits before trying again (gRPC's backoff otherwise grows to
// two minutes): a restarted node is reached again within this of listening,
// by its peers and by clients.
const ReconnectDelayMax = time.Second

// FSPermissionLease is how long a node uses its copy of a TýrFS
// directory's permissions after the fetch that made it began
// (internal/fsmeta), and so the longest a permission change waits for a
// member it cannot reach.
const FSPermissionLease = 5 * time.Second

// FSGroupsMax bounds the groups a TýrFS fetch acts for, beside its user.
const FSGroupsMax = 64

// FSFetchManyMax bounds the paths of one batch of TýrFS fetches; the
// answers of a batch are held in memory together, up to the whole of each
// file's first PayloadBytesMax bytes.
const FSFetchManyMax = 256

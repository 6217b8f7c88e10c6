// Package keyspace defines a keyspace's configuration and naming rules.
//
// A keyspace is an isolated namespace of blobs, like a bucket. Its
// configuration is fixed when it is created.
package keyspace

import (
	"errors"
	"fmt"
	"math/bits"
	"net"
	"unicode/utf8"

	"github.com/tyrstore/tyr/internal/errs"

	"github.com/tyrstore/tyr/internal/limits"
)

// ErrInvalid marks an invalid name, key or configuration; it is
// errs.ErrInvalidArgument.
var ErrInvalid = errs.ErrInvalidArgument

// Config is a keyspace's configuration, fixed at creation.
type Config struct {
	// ChunkBytes is the chunk size: chunk n of a blob covers
	// [n*ChunkBytes, (n+1)*ChunkBytes). A power of two in
	// [limits.ChunkBytesMin, limits.ChunkBytesMax]; default 64 MiB. Chunks are
	// the unit of placement and replication.
	ChunkBytes uint64 `json:"chunk_bytes"`
	// Replication is the number of replicas of each chunk, default 1. A
	// single node stores one copy whatever this says.
	Replication uint32 `json:"replication"`
	// MVCC keeps superseded versions so readers never wait for writers and
	// transactions can read a consistent snapshot. Off overwrites data in
	// place: less space and write work, but no snapshots.
	MVCC bool `json:"mvcc"`
	// Sync makes every commit durable (fsync) before it is acknowledged.
	// Off is faster but loses recent acknowledged commits on a crash.
	Sync bool `json:"sync"`
}

// DefaultConfig is the configuration the CLI offers: 64 MiB chunks, one
// replica, MVCC on, sync on.
func DefaultConfig() Config {
	return Config{ChunkBytes: limits.ChunkBytesDefault, Replication: 1, MVCC: true, Sync: true}
}

// WithDefaults fills zero-valued numeric fields with their defaults.
func (c Config) WithDefaults() Config {
	if c.ChunkBytes == 0 {
		c.ChunkBytes = limits.ChunkBytesDefault
	}
	if c.Replication == 0 {
		c.Replication = 1
	}
	return c
}

// Validate reports every problem with c, or nil.
func (c Config) Validate() error {
	var problems []error
	if c.ChunkBytes < limits.ChunkBytesMin || c.ChunkBytes > limits.ChunkBytesMax {
		problems = append(problems, fmt.Errorf("chunk size %d out of range [%d, %d]",
			c.ChunkBytes, limits.ChunkBytesMin, limits.ChunkBytesMax))
	} else if bits.OnesCount64(c.ChunkBytes) != 1 {
		problems = append(problems, fmt.Errorf("chunk size %d is not a power of two", c.ChunkBytes))
	}
	if c.Replication < 1 || c.Replication > limits.ReplicationMax {
		problems = append(problems, fmt.Errorf("replication %d out of range [1, %d]",
			c.Replication, limits.ReplicationMax))
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w config: %w", ErrInvalid, errors.Join(problems...))
}

// ValidateName checks the keyspace naming rules, which are those of S3
// bucket names so that keyspaces map to buckets one to one: 3 to 63
// characters of lower-case letters, digits, '-' and '.', starting and ending
// with a letter or digit, with no ".." and not shaped like an IP address.
func ValidateName(name string) error {
	if len(name) < limits.KeyspaceNameBytesMin || len(name) > limits.KeyspaceNameBytesMax {
		return fmt.Errorf("%w name %q: length must be in [%d, %d]", ErrInvalid, name,
			limits.KeyspaceNameBytesMin, limits.KeyspaceNameBytesMax)
	}
	if ip := net.ParseIP(name); ip != nil {
		return fmt.Errorf("%w name %q: must not look like an IP address", ErrInvalid, name)
	}
	for i := 0; i < len(name); i++ {
		ch := name[i]
		alnum := (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9')
		if alnum {
			continue
		}
		if ch != '-' && ch != '.' {
			return fmt.Errorf("%w name %q: only a-z, 0-9, '-' and '.' are allowed", ErrInvalid, name)
		}
		if i == 0 || i == len(name)-1 {
			return fmt.Errorf("%w name %q: must start and end with a letter or digit", ErrInvalid, name)
		}
		if ch == '.' && name[i-1] == '.' {
			return fmt.Errorf("%w name %q: must not contain \"..\"", ErrInvalid, name)
		}
	}
	return nil
}

// ValidateKey checks a blob key: 1 to limits.KeyBytesMax bytes of valid
// UTF-8 without NUL. Keys are flat; '/' is a convention, not a directory.
func ValidateKey(key string) error {
	if len(key) == 0 {
		return fmt.Errorf("%w key: empty", ErrInvalid)
	}
	if len(key) > limits.KeyBytesMax {
		return fmt.Errorf("%w key: %d bytes, longer than the limit of %d", ErrInvalid, len(key), limits.KeyBytesMax)
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("%w key: not valid UTF-8", ErrInvalid)
	}
	for i := 0; i < len(key); i++ {
		if key[i] == 0 {
			return fmt.Errorf("%w key: NUL byte at %d", ErrInvalid, i)
		}
	}
	return nil
}

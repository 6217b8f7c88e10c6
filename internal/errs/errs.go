// Package errs defines the classes of error every tyr layer returns. Each
// class maps to one gRPC status code on the wire and back to the same class in
// the clients, so errors.Is works end to end.
package errs

import "errors"

var (
	// ErrNotFound: the keyspace or blob does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists: the keyspace or blob already exists.
	ErrExists = errors.New("already exists")
	// ErrInvalidArgument: the request is malformed or breaks a documented rule.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrOutOfRange: an offset or size lies beyond a documented limit.
	ErrOutOfRange = errors.New("out of range")
	// ErrTooLarge: a payload, commit or page exceeds a documented limit.
	ErrTooLarge = errors.New("too large")
	// ErrUnavailable: the server is shutting down or cannot reach its storage.
	ErrUnavailable = errors.New("unavailable")
	// ErrConflict: a transaction lost a race and may be retried.
	ErrConflict = errors.New("conflict")
	// ErrCorruption: stored data failed a consistency check.
	ErrCorruption = errors.New("corruption")
	// ErrNoSpace: a node's data directory is below its free-space floor
	// (--min-free) or its file system is full. The write changed nothing;
	// deletes and truncates still work and free space, and writes work
	// again once there is room.
	ErrNoSpace = errors.New("no space")
)

package ring

import (
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// This file holds every hash that decides where data lives. Each one is part
// of the placement contract shared by all servers and all clients (Go, Python,
// C): if two processes hash differently they disagree on which nodes hold a
// chunk, and data becomes unreachable. The encodings are therefore
// append-only: never edit a version once released. To change placement, add
// HashV2 with its own functions, teach New to accept it, and keep HashV1
// working for as long as any cluster runs a ring built with it.
//
// All hashes are XXH64, the 64-bit xxHash of github.com/Cyan4973/xxHash
// (implemented here by github.com/cespare/xxhash/v2; Python's xxhash.xxh64
// and C's XXH64 give the same values). Decimal numbers are written in ASCII
// base 10 without sign or leading zeros ("0", "17"). ring_test.go pins golden
// values for each function so that a change cannot go unnoticed.

// Placement hash versions. Zero means unset, so that a Config's zero value
// selects the default.
const (
	// HashV1 is the first placement encoding:
	//
	//	keyspace seed  = XXH64("keyspace:" ‖ name,                  seed 0)
	//	token position = XXH64(nodeID ‖ "#" ‖ decimal(index),       seed 0)
	//	chunk position = XXH64(key ‖ ":" ‖ decimal(chunk),          seed keyspace seed)
	//
	// The separators keep each encoding injective: a decimal suffix never
	// contains ':' or '#', so the last separator always splits the input
	// unambiguously, whatever bytes the key or node ID contain.
	HashV1 uint32 = 1 + iota
)

// hashVersionLatest is the newest version New accepts and the default.
const hashVersionLatest = HashV1

// keyspaceSeedPrefix is prepended to a keyspace name before hashing it
// (HashV1). Append-only: see the top of this file.
const keyspaceSeedPrefix = "keyspace:"

// KeyspaceSeed returns the hashing seed of the keyspace named name, under
// HashV1. Placements in different keyspaces use different seeds, so a key
// maps to different nodes in each keyspace and one hot key name does not
// load the same nodes everywhere. The seed depends only on the name: a
// keyspace dropped and created again under the same name places keys as
// before. Any string is accepted; validating names is the keyspace package's
// job.
func KeyspaceSeed(name string) uint64 {
	var d xxhash.Digest
	d.ResetWithSeed(0)
	_, _ = d.WriteString(keyspaceSeedPrefix) // never fails
	_, _ = d.WriteString(name)
	return d.Sum64()
}

// Position returns the ring position of chunk chunk (zero-based: chunk n
// covers bytes [n*s, (n+1)*s) of the blob) of the blob key in the keyspace
// whose seed is seed, under HashV1:
//
//	XXH64(key ‖ ":" ‖ decimal(chunk), seed)
//
// This is h(k:n) of the Týr design. The result is stable across processes,
// platforms and releases; see the top of this file.
func Position(seed uint64, key string, chunk uint64) uint64 {
	var d xxhash.Digest
	d.ResetWithSeed(seed)
	_, _ = d.WriteString(key) // never fails
	var buf [1 + 20]byte      // ':' and the 20 digits of the largest uint64
	buf[0] = ':'
	_, _ = d.Write(strconv.AppendUint(buf[:1], chunk, 10))
	return d.Sum64()
}

// tokenPosition returns the ring position of virtual node index of node id,
// under HashV1: XXH64(id ‖ "#" ‖ decimal(index), seed 0). It depends on the
// node and the index only, never on the rest of the membership, which is
// what confines data movement to the node that joins or leaves.
func tokenPosition(id NodeID, index uint64) uint64 {
	var d xxhash.Digest
	d.ResetWithSeed(0)
	_, _ = d.WriteString(string(id)) // never fails
	var buf [1 + 20]byte
	buf[0] = '#'
	_, _ = d.Write(strconv.AppendUint(buf[:1], index, 10))
	return d.Sum64()
}

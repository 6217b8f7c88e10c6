// Package ring is tyr's placement core: a consistent-hashing ring with
// virtual nodes that maps every chunk of every blob to the nodes that store
// it. It is pure and deterministic: no goroutines, clock, randomness or I/O,
// and no output depends on map iteration or on the order of its input. Every
// server and every client that builds a ring from the same Config and
// membership computes the same placements, which is what lets clients address
// replicas directly, in one hop, without a metadata service.
//
// # Model
//
// The ring is the space of 64-bit hash values, [0, 2^64), with 2^64-1
// followed by 0. Each node owns Weight × Config.VirtualNodesPerWeight tokens
// (virtual nodes); token i of node n sits at a position derived from n's ID
// and i alone (see HashV1). Chunk c of the blob k in a keyspace with seed s
// sits at Position(s, k, c), the h(k:c) of the Týr design. Its primary is
// the node owning the first token at or after that position, wrapping past
// the top of the ring; its other replicas are the next distinct nodes met
// while walking on clockwise. Replicas returns them in that order, primary
// first. A blob's version managers, the nodes holding the version history of
// all its chunks, are the replicas of its chunk 0 (VersionManagers).
//
// Many tokens per node spread each node's share over many small arcs, so
// shares are even (ring_test.go measures how even) and a joining node takes
// a little from every existing node instead of a lot from one neighbour.
// Weights give heterogeneous nodes shares in proportion to their capacity.
//
// # Membership changes
//
// A Ring is immutable. A membership change (a node joins, leaves or changes
// weight) is a new Ring with another Epoch. Because a node's tokens depend
// only on its own ID and weight, the new ring differs from the old one only
// in the arcs of the node that changed: when a node joins, exactly the
// placements it now owns move, and they move to it; when a node leaves, only
// the placements it held move. Compare measures this on a sample. Moving the
// data, sending writes to both old and new owners while it moves, and
// agreeing on the epoch cluster-wide are the jobs of the ring coordinator
// and the membership layer, which drive this package; they are not here.
//
// # One node
//
// A ring of one node is the single-node store: that node is the primary of
// every chunk and the only version manager of every blob. Replicas with a
// replication factor above the number of nodes is an error (ErrTooFewNodes);
// a caller whose policy is "store as many copies as there are nodes" asks for
// min(rf, r.Len()).
package ring

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tyrstore/tyr/internal/errs"
)

// Limits on a ring's size. Every ring is built in memory on every server and
// every client, so its size is bounded.
const (
	// NodeIDBytesMax is the longest node ID, in bytes.
	NodeIDBytesMax = 255
	// VirtualNodesPerWeightDefault is Config.VirtualNodesPerWeight when unset.
	VirtualNodesPerWeightDefault = 128
	// VirtualNodesPerWeightMax bounds Config.VirtualNodesPerWeight.
	VirtualNodesPerWeightMax = 1 << 16
	// TokensMaxDefault is Config.TokensMax when unset: 8192 nodes of weight 1
	// at the default 128 tokens each, about 12 MiB of memory.
	TokensMaxDefault = 1 << 20
	// TokensMaxCeiling bounds Config.TokensMax: about 200 MiB of tokens.
	TokensMaxCeiling = 1 << 24
)

// Compile-time relations between the limits: the defaults lie within their
// bounds, and token owners (uint32 node indexes) cannot overflow.
const (
	_ uint = VirtualNodesPerWeightMax - VirtualNodesPerWeightDefault
	_ uint = TokensMaxCeiling - TokensMaxDefault
	_ uint = math.MaxUint32 - TokensMaxCeiling
)

var (
	// ErrInvalid marks a bad Config, membership or argument. It is
	// errs.ErrInvalidArgument.
	ErrInvalid = errs.ErrInvalidArgument
	// ErrTooFewNodes is returned when a replication factor exceeds the number
	// of nodes in the ring. It wraps errs.ErrUnavailable: the placement may
	// become possible once more nodes join.
	ErrTooFewNodes = fmt.Errorf("ring: too few nodes for the replication factor (%w)", errs.ErrUnavailable)
)

// NodeID names a node. It is compared and hashed as raw bytes, so "a" and
// "A" are different nodes. Valid IDs are 1 to NodeIDBytesMax bytes of valid
// UTF-8. An ID must never be reused for a different machine's data: the ID
// alone decides which arcs of the ring the node owns.
type NodeID string

// Node is one member of the ring.
type Node struct {
	// ID names the node; unique within a ring.
	ID NodeID
	// Weight is the node's capacity relative to the other nodes: a node of
	// weight 2 gets twice the tokens, and so about twice the data, of a node
	// of weight 1. Use 1 for a standard node. Must be at least 1: zero is
	// rejected rather than read as "no data", so that a forgotten field
	// cannot silently turn a member into a node that owns nothing.
	Weight uint32
}

// Config fixes how a ring is built. Every process that builds rings for the
// same cluster must use the same Config, or they disagree on placements; it
// belongs with the membership wherever a ring is sent or stored.
type Config struct {
	// VirtualNodesPerWeight is the number of tokens a node gets per unit of
	// weight. Default VirtualNodesPerWeightDefault (128), at most
	// VirtualNodesPerWeightMax. More tokens make shares more even (the
	// spread of a node's share falls as 1/sqrt(tokens)) at the cost of
	// memory, build time and a slightly deeper lookup.
	VirtualNodesPerWeight uint32
	// TokensMax bounds the total number of tokens, the sum over nodes of
	// Weight × VirtualNodesPerWeight; New rejects larger memberships. Default
	// TokensMaxDefault, at most TokensMaxCeiling. Each token costs 12 bytes
	// in every process that holds the ring.
	TokensMax uint32
	// HashVersion selects the placement encoding; default (0) is HashV1, the
	// only version so far. See hash.go before changing anything about it.
	HashVersion uint32
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.VirtualNodesPerWeight == 0 {
		c.VirtualNodesPerWeight = VirtualNodesPerWeightDefault
	}
	if c.TokensMax == 0 {
		c.TokensMax = TokensMaxDefault
	}
	if c.HashVersion == 0 {
		c.HashVersion = hashVersionLatest
	}
	return c
}

// Validate reports every problem with c, or nil. Zero fields are problems:
// call WithDefaults first (New does).
func (c Config) Validate() error {
	var problems []error
	if c.VirtualNodesPerWeight < 1 || c.VirtualNodesPerWeight > VirtualNodesPerWeightMax {
		problems = append(problems, fmt.Errorf("virtual nodes per weight %d out of range [1, %d]",
			c.VirtualNodesPerWeight, VirtualNodesPerWeightMax))
	}
	if c.TokensMax < 1 || c.TokensMax > TokensMaxCeiling {
		problems = append(problems, fmt.Errorf("tokens max %d out of range [1, %d]",
			c.TokensMax, TokensMaxCeiling))
	}
	if c.HashVersion < 1 || c.HashVersion > hashVersionLatest {
		problems = append(problems, fmt.Errorf("hash version %d unknown; this build knows versions 1 to %d",
			c.HashVersion, hashVersionLatest))
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("ring: %w: config: %w", ErrInvalid, errors.Join(problems...))
}

// Ring maps positions on the hash ring to nodes. It is immutable once New
// returns it, and so safe for concurrent use by any number of goroutines.
// Build one with New; the zero Ring has no nodes and places nothing.
type Ring struct {
	// cfg is the Config the ring was built with, defaults applied.
	cfg Config
	// epoch numbers the membership; see Epoch.
	epoch uint64
	// nodes holds the members sorted by ID, IDs unique, every Weight >= 1.
	// Indexes into nodes (owners) therefore depend on the membership only,
	// never on the order New received it in.
	nodes []Node
	// positions holds the token positions in ascending order, and owners[i]
	// is the index in nodes of the node owning token i; len(positions) ==
	// len(owners) == sum of Weight × VirtualNodesPerWeight. Tokens at equal
	// positions (a 64-bit collision, vanishingly rare but possible) are
	// ordered by owner index, so the order is total and the same everywhere.
	// Every node owns at least one token, so walking the whole slice meets
	// every node: a walk for rf <= len(nodes) distinct nodes always ends
	// within one lap.
	positions []uint64
	owners    []uint32
}

// New builds the ring of the given membership at the given epoch. The order
// of nodes does not matter. It returns an error wrapping ErrInvalid, listing
// every problem, if cfg is invalid, nodes is empty, or a node has an empty,
// too long or non-UTF-8 ID, a duplicate ID or a zero weight, or if the
// membership needs more than cfg.TokensMax tokens. New does not keep nodes.
func New(cfg Config, epoch uint64, nodes []Node) (*Ring, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sorted, err := validateMembership(cfg, nodes)
	if err != nil {
		return nil, err
	}
	r := &Ring{cfg: cfg, epoch: epoch, nodes: sorted}
	r.buildTokens()
	return r, nil
}

// validateMembership checks nodes against cfg and returns a sorted copy.
func validateMembership(cfg Config, nodes []Node) ([]Node, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("ring: %w: no nodes; a ring needs at least one", ErrInvalid)
	}
	var problems []error
	var tokens uint64
	for i, n := range nodes {
		switch {
		case n.ID == "":
			problems = append(problems, fmt.Errorf("node %d: empty ID", i))
		case len(n.ID) > NodeIDBytesMax:
			problems = append(problems, fmt.Errorf("node %d: ID is %d bytes, longer than the limit of %d",
				i, len(n.ID), NodeIDBytesMax))
		case !utf8.ValidString(string(n.ID)):
			problems = append(problems, fmt.Errorf("node %d: ID %q is not valid UTF-8", i, n.ID))
		}
		if n.Weight == 0 {
			problems = append(problems, fmt.Errorf("node %d (%q): weight 0; weights must be at least 1", i, n.ID))
		}
		if tokens <= uint64(cfg.TokensMax) { // stop counting past the limit, so the sum cannot overflow
			tokens += uint64(n.Weight) * uint64(cfg.VirtualNodesPerWeight)
		}
	}
	if tokens > uint64(cfg.TokensMax) {
		problems = append(problems, fmt.Errorf("membership needs more tokens (sum of weights × %d virtual nodes per weight) than the limit of %d",
			cfg.VirtualNodesPerWeight, cfg.TokensMax))
	}
	sorted := slices.Clone(nodes)
	slices.SortFunc(sorted, func(a, b Node) int { return strings.Compare(string(a.ID), string(b.ID)) })
	for i := 0; i < len(sorted); {
		j := i + 1
		for j < len(sorted) && sorted[j].ID == sorted[i].ID {
			j++
		}
		if j-i > 1 && sorted[i].ID != "" { // empty IDs are reported above
			problems = append(problems, fmt.Errorf("node ID %q appears %d times; IDs must be unique",
				sorted[i].ID, j-i))
		}
		i = j
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("ring: %w: membership: %w", ErrInvalid, errs.JoinBounded(problems))
	}
	return sorted, nil
}

// buildTokens fills r.positions and r.owners from r.nodes and r.cfg, which
// must be valid.
func (r *Ring) buildTokens() {
	type token struct {
		position uint64
		owner    uint32
	}
	var total uint64
	for _, n := range r.nodes {
		total += uint64(n.Weight) * uint64(r.cfg.VirtualNodesPerWeight)
	}
	tokens := make([]token, 0, total)
	for owner, n := range r.nodes {
		count := uint64(n.Weight) * uint64(r.cfg.VirtualNodesPerWeight)
		for index := range count {
			tokens = append(tokens, token{position: tokenPosition(n.ID, index), owner: uint32(owner)})
		}
	}
	slices.SortFunc(tokens, func(a, b token) int {
		if c := cmp.Compare(a.position, b.position); c != 0 {
			return c
		}
		return cmp.Compare(a.owner, b.owner)
	})
	r.positions = make([]uint64, len(tokens))
	r.owners = make([]uint32, len(tokens))
	for i, t := range tokens {
		r.positions[i] = t.position
		r.owners[i] = t.owner
	}
}

// Epoch returns the epoch the ring was built with. An epoch identifies one
// membership: today the membership layer passes a content hash of the sorted
// (ID, weight) list, so equal epochs mean equal rings on every node, but
// epochs are not ordered. Ordering successive rings (so that a newer one
// supersedes an older one) is the ring coordinator's job, which will number
// the rings it publishes. The ring does not use the epoch in placement.
func (r *Ring) Epoch() uint64 { return r.epoch }

// Config returns the Config the ring was built with, defaults applied.
func (r *Ring) Config() Config { return r.cfg }

// Len returns the number of nodes, at least 1.
func (r *Ring) Len() int { return len(r.nodes) }

// Nodes returns the members sorted by ID. The caller owns the slice.
func (r *Ring) Nodes() []Node { return slices.Clone(r.nodes) }

// Contains reports whether id is a member.
func (r *Ring) Contains(id NodeID) bool {
	_, ok := r.nodeIndex(id)
	return ok
}

// nodeIndex returns the index of id in r.nodes.
func (r *Ring) nodeIndex(id NodeID) (int, bool) {
	return slices.BinarySearchFunc(r.nodes, id, func(n Node, id NodeID) int {
		return strings.Compare(string(n.ID), string(id))
	})
}

// Replicas returns the rf nodes that store chunk chunk of blob key in the
// keyspace with seed seed, primary first, then in ring order: the nodes of
// the first rf distinct owners met walking clockwise from Position(seed,
// key, chunk). The nodes are distinct. The caller owns the slice.
//
// rf < 1 is an error wrapping ErrInvalid; rf > r.Len() is an error wrapping
// ErrTooFewNodes.
func (r *Ring) Replicas(seed uint64, key string, chunk uint64, rf int) ([]NodeID, error) {
	if err := r.checkReplication(rf); err != nil {
		return nil, err
	}
	return r.appendReplicas(make([]NodeID, 0, rf), Position(seed, key, chunk), rf), nil
}

// AppendReplicas is Replicas appending to dst, so that a caller reusing dst
// across lookups allocates nothing. On error it returns dst unchanged.
func (r *Ring) AppendReplicas(dst []NodeID, seed uint64, key string, chunk uint64, rf int) ([]NodeID, error) {
	if err := r.checkReplication(rf); err != nil {
		return dst, err
	}
	return r.appendReplicas(dst, Position(seed, key, chunk), rf), nil
}

// ReplicasAt returns the rf nodes that store a chunk at position on the
// ring, primary first: Replicas for a position already computed. Errors
// are those of Replicas.
func (r *Ring) ReplicasAt(position uint64, rf int) ([]NodeID, error) {
	if err := r.checkReplication(rf); err != nil {
		return nil, err
	}
	return r.appendReplicas(make([]NodeID, 0, rf), position, rf), nil
}

// VersionManagers returns the version managers of blob key in the keyspace
// with seed seed: the replicas of its chunk 0, which hold the version
// history of all its chunks. Errors are those of Replicas.
func (r *Ring) VersionManagers(seed uint64, key string, rf int) ([]NodeID, error) {
	return r.Replicas(seed, key, 0, rf)
}

// ReadTarget returns the member that serves reads of a blob whose version
// managers are vms: the first of them in node-ID order (the protocol's
// global order: every commit of the blob reaches it first and commits on
// it last) for which serves holds. ok is false if it holds for none. vms is
// not changed.
func ReadTarget(vms []NodeID, serves func(NodeID) bool) (id NodeID, ok bool) {
	for _, m := range vms {
		if serves(m) && (!ok || m < id) {
			id, ok = m, true
		}
	}
	return id, ok
}

// checkReplication reports whether rf replicas can be placed on r.
func (r *Ring) checkReplication(rf int) error {
	if rf < 1 {
		return fmt.Errorf("ring: %w: replication factor %d; it must be at least 1", ErrInvalid, rf)
	}
	if rf > len(r.nodes) {
		return fmt.Errorf("%w: replication factor %d, but the ring at epoch %d has %d node(s)",
			ErrTooFewNodes, rf, r.epoch, len(r.nodes))
	}
	return nil
}

// successor returns the index of the first token at or after position,
// wrapping to 0 past the last token.
func (r *Ring) successor(position uint64) int {
	i, _ := slices.BinarySearch(r.positions, position)
	if i == len(r.positions) {
		return 0
	}
	return i
}

// replicasInline is the largest rf whose distinctness check runs on a stack
// array; larger factors use a bitmap over all nodes.
const replicasInline = 16

// appendReplicas appends the first rf distinct owners clockwise from
// position to dst. The caller has checked 1 <= rf <= len(r.nodes).
func (r *Ring) appendReplicas(dst []NodeID, position uint64, rf int) []NodeID {
	var inline [replicasInline]uint32
	found := inline[:0]
	var seen []bool
	if rf > replicasInline {
		seen = make([]bool, len(r.nodes))
	}
	start := r.successor(position)
	for step := 0; step < len(r.owners) && len(found) < rf; step++ {
		i := start + step
		if i >= len(r.owners) {
			i -= len(r.owners)
		}
		owner := r.owners[i]
		if seen != nil {
			if seen[owner] {
				continue
			}
			seen[owner] = true
		} else if slices.Contains(found, owner) {
			continue
		}
		found = append(found, owner)
		dst = append(dst, r.nodes[owner].ID)
	}
	if len(found) != rf {
		// Every node owns a token, so one lap meets rf <= len(nodes) nodes.
		panic(fmt.Sprintf("ring: invariant broken: walked all %d tokens from position %#x and met %d of %d requested distinct nodes (ring has %d nodes, epoch %d)",
			len(r.owners), position, len(found), rf, len(r.nodes), r.epoch))
	}
	return dst
}

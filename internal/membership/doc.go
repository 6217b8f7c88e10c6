// Package membership tells every tyr node which nodes make up the cluster,
// which of them are alive, where the data goes (the ring), and which
// keyspaces exist (the catalog). Failure detection and dissemination are
// SWIM, as implemented by github.com/hashicorp/memberlist: UDP probes with
// indirect probes and suspicion, gossip with a fixed fanout, and a periodic
// full-state exchange (push/pull) over TCP.
//
// # Layout
//
// The package is a pure core and an edge. The core (view.go, catalog.go,
// state.go, codec.go) is plain data: View, Catalog, Clock and the wire
// formats, changed only by method calls, with no goroutines, clock,
// randomness or I/O; given the same inputs in the same order it gives the
// same results, and its tests need no network. The edge (node.go) is Node:
// it runs memberlist, turns its callbacks into View events, catalog merges
// and push/pull states, and publishes the results.
//
// # Members and their states
//
// Every node advertises a Meta (ID, RPC address, weight, start time,
// incarnation, leaving flag) in memberlist's node metadata, at most
// MetaBytesMax (512) bytes. A View holds every member it has heard of:
//
//   - Alive: memberlist reported the member joined or is back.
//   - Suspect: this node's own probe of the member failed and nothing has
//     shown it alive since. memberlist reports suspicion to no callback, so
//     Node reads it from memberlist's log line for a failed probe, and a
//     later successful probe makes the member Alive again. Suspect is
//     therefore local and advisory; other nodes may not suspect the member
//     yet, or may have cleared it.
//   - Dead: the cluster declared the member failed (SWIM's confirmed
//     suspicion, gossiped to all).
//   - Left: the member left on purpose. memberlist reports deaths and
//     departures with the same callback, so a leaving node first advertises
//     Meta.Leaving, and a member whose newest Meta says Leaving becomes Left
//     when it goes.
//
// # Placement is separate from liveness
//
// View.Ring builds the ring from every member that is not Left, dead ones
// included, at their advertised weights. A crash therefore moves no data
// and changes no placement: requests and commit chains skip members that
// are not Alive, and clients retry another replica. Only a departure
// (Left), or a decommission that first moves the data, takes a member out
// of the ring. The ring's epoch is the view's RingID, a content hash of
// the sorted (ID, weight) list, because gossip gives no global order of
// changes that a counter could follow: nodes with the same members have the
// same RingID, whatever order they heard of them in.
//
// Since memberlist forgets dead and departed members after
// Config.GossipToTheDeadTime, and never tells a newcomer about them, the
// push/pull state carries the view's members too: a node that joins late
// learns the dead members (and the departed ones) from its first exchange
// and builds the same ring as everyone else (View.MergeRemote).
//
// # Catalog
//
// The Catalog is small replicated state: keyspace name → configuration
// bytes, hybrid-clock version and a dropped flag (tombstone). Its merge
// keeps, per name, the largest entry by (version, dropped, origin, config),
// which makes it commutative, associative and idempotent, so every order of
// delivery converges. Node.CreateKeyspace and Node.DropKeyspace write
// locally and broadcast the entry by gossip; receivers that learn something
// new re-broadcast it; and push/pull repairs what gossip lost and brings
// the whole catalog to a node that joins later. Tombstones are kept
// forever; see Catalog for their cost. Node.Broadcast and
// Config.OnMessage give callers the same gossip channel for their own small
// messages.
//
// # ID conflicts
//
// A node ID belongs to one process. If a second process announces a live
// member's ID from another address, memberlist refuses it and reports a
// conflict: members that see it record and log it (Node.Conflicts), and
// the newcomer, which sees it during its join, shuts down and Start returns
// an error wrapping ErrDuplicateID that names both addresses.
//
// # Detection timings
//
// With the default Config (memberlist.DefaultLocalConfig: ProbeInterval
// 1s, ProbeTimeout 200ms, SuspicionMult 3, SuspicionMaxTimeoutMult 6,
// GossipInterval 100ms, PushPullInterval 15s; RetransmitMult 4), a node
// that crashes in a cluster of N members goes through these steps:
//
//   - Suspect: each member probes the others round robin, one per
//     ProbeInterval, so some member probes the crashed one within about
//     (N-1) × ProbeInterval, then waits out the rest of that interval for
//     indirect acks: Suspect after 1s to about N × 1s.
//   - Dead: SuspicionMult × max(1, log10(N)) × ProbeInterval after the
//     first suspicion (3s for N < 10), once SuspicionMult-2 other members
//     have confirmed it; the death is then gossiped within a few
//     GossipIntervals. A member that hears no confirmation waits
//     SuspicionMaxTimeoutMult times longer (18s for N < 10).
//
// Measured by TestCluster (4 members on one host, one killed without
// leaving; 33 runs, 8 of them under the race detector): the first member
// suspected the killed node after 1.5s to 3.7s (median 2.6s), and every
// survivor had it Dead after 4.5s to 6.8s (median 5.6s), 3.0s to 3.1s
// after the first suspicion. TestCluster fails beyond 6s to suspect and
// 10s to Dead. A member that joins reaches every view within about 100ms;
// a member that leaves was Left everywhere within a millisecond of
// Leave returning (Leave waits for its broadcasts to go out).
//
// # Limits
//
// Everything is bounded: Meta at MetaBytesMax, MembersMax members per view,
// CatalogEntriesMax entries per catalog (CatalogEntriesHardMax for merges),
// CatalogConfigBytesMax per configuration, BroadcastBytesMax per broadcast,
// Config.BroadcastQueueMax queued broadcasts, JoinAddressesMax join
// addresses, SubscribersMax subscriptions. The largest push/pull state is
// about 13 MiB, within memberlist's 20 MiB limit (checked at compile time).
//
// # Wire formats
//
// Meta, catalog entries, broadcast messages and the push/pull state are
// versioned and append-only (codec.go): a later format only adds fields at
// the end of a record, and decoders ignore fields they do not know, so
// nodes of different versions can share a cluster. All input from the
// network is decoded under explicit limits and validated where it arrives;
// anything malformed is refused whole and changes nothing.
package membership

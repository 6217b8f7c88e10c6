package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/keyspace"
	"github.com/tyrstore/tyr/internal/membership"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/storage"
)

// Cluster is this node's membership in a tyr cluster: who the members are,
// where they serve, which of them are alive, and the keyspace catalog that
// every member mirrors into its local storage.
//
// The catalog is the source of truth for which keyspaces exist. Creating or
// dropping a keyspace writes the catalog first and then the local engine;
// a background loop applies every catalog change learnt by gossip to the
// local engine, so every member, including one that joins later, ends up
// with the same keyspaces.
//
// A server always runs a Cluster, a one-member one when it joined nobody.
// Service tolerates a nil Cluster only so that tests can serve an engine
// without a network; it then manages keyspaces in the engine alone.
type Cluster struct {
	node   *membership.Node
	engine *storage.Engine
	log    *slog.Logger
	// view is the newest membership view, replaced (never modified) on
	// each change, so the request paths read it without copying it.
	view atomic.Pointer[membership.View]

	// DefaultSync is the Sync of a keyspace created by a request that
	// carries no config at all; a request with a config always gets its own
	// Sync. Set it before serving. False, the zero value, is what a server
	// without this setting has always done.
	DefaultSync bool

	// mu serializes every change to the local engine's keyspaces, from
	// requests and from the catalog loop, so that a create and the catalog
	// echo of the same create cannot race.
	mu sync.Mutex

	cancel     func()
	done       chan struct{}
	viewCancel func()
	viewDone   chan struct{}
}

// NewCluster binds node to engine: it announces in the catalog every local
// keyspace the catalog does not know (after a restart of the whole cluster
// the gossiped catalog is empty, and the disks hold the truth), applies the
// catalog to the engine, and keeps applying it until Close. node must have
// joined already, so that its catalog holds what the cluster knows. The
// current catalog is applied before NewCluster returns.
func NewCluster(node *membership.Node, engine *storage.Engine, log *slog.Logger) (*Cluster, error) {
	c := &Cluster{node: node, engine: engine, log: log, done: make(chan struct{}), viewDone: make(chan struct{})}
	if err := c.announceLocal(); err != nil {
		return nil, err
	}
	views, viewCancel, err := node.Subscribe()
	if err != nil {
		return nil, fmt.Errorf("subscribe to the member view: %w", err)
	}
	c.viewCancel = viewCancel
	c.view.Store(<-views) // the current view is delivered at once
	go func() {
		defer close(c.viewDone)
		for v := range views {
			c.view.Store(v)
		}
	}()
	catalogs, cancel, err := node.SubscribeCatalog()
	if err != nil {
		c.viewCancel()
		return nil, fmt.Errorf("subscribe to the keyspace catalog: %w", err)
	}
	c.cancel = cancel
	// The current catalog is delivered at once: apply it before the server
	// serves, so that a node that joins or restarts already holds every
	// keyspace the cluster knows when its first request arrives.
	if catalog, ok := <-catalogs; ok {
		c.apply(catalog)
	}
	go c.applyLoop(catalogs)
	return c, nil
}

// Close stops applying catalog changes. It does not stop the node.
func (c *Cluster) Close() {
	c.cancel()
	<-c.done
	c.viewCancel()
	<-c.viewDone
}

// Node returns the membership node, for shutdown and diagnostics.
func (c *Cluster) Node() *membership.Node { return c.node }

// Self returns this node's ID.
func (c *Cluster) Self() ring.NodeID { return c.node.ID() }

// View returns this node's newest view of the members. It is shared and
// read-only: a membership change installs a new View rather than changing
// this one, so callers may compare views by pointer to notice a change.
// Build the placement ring with View().Ring; its epoch is RingID.
func (c *Cluster) View() *membership.View { return c.view.Load() }

// RPCAddr returns the client API address member id advertises, and whether
// the member is known. A known member may be dead: check Alive.
func (c *Cluster) RPCAddr(id ring.NodeID) (string, bool) {
	m, ok := c.View().Member(id)
	if !ok {
		return "", false
	}
	return m.Meta.RPCAddr, true
}

// Alive reports whether member id is known and not declared dead in this
// node's view: alive or suspect. Chains keep a suspect member: it may only
// be slow or briefly stopped, and skipping it would let it miss commits
// without knowing (a node catches up after a stop longer than
// node.PauseMax, well below the suspicion timeout that ends in death).
func (c *Cluster) Alive(id ring.NodeID) bool {
	m, ok := c.View().Member(id)
	return ok && (m.State == membership.StateAlive || m.State == membership.StateSuspect)
}

// CatchingUp reports whether member id advertises that it is catching up
// on commits it may have missed (see internal/node/catchup.go).
func (c *Cluster) CatchingUp(id ring.NodeID) bool {
	m, ok := c.View().Member(id)
	return ok && m.Meta.CatchingUp
}

// catchUpAdvertTimeout bounds the wait for the broadcast of this node's
// catching-up state.
const catchUpAdvertTimeout = 2 * time.Second

// SetCatchingUp advertises whether this node is catching up.
func (c *Cluster) SetCatchingUp(on bool) error {
	return c.node.SetCatchingUp(on, catchUpAdvertTimeout)
}

// encodeConfig is the catalog form of a keyspace config: JSON, whose
// decoders ignore unknown fields, so later versions may add fields. The
// largest config is about 80 bytes, well within
// membership.CatalogConfigBytesMax.
func encodeConfig(cfg keyspace.Config) ([]byte, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encode keyspace config: %w", err)
	}
	return b, nil
}

func decodeConfig(b []byte) (keyspace.Config, error) {
	var cfg keyspace.Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return keyspace.Config{}, fmt.Errorf("%w: keyspace config in the catalog: %w", errs.ErrCorruption, err)
	}
	return cfg, nil
}

// announceLocal records in the catalog every local keyspace it has no entry
// for, live or dropped. A tombstone wins: the keyspace was dropped while
// this node was away, and the apply loop drops it here too.
func (c *Cluster) announceLocal() error {
	catalog := c.node.Catalog()
	for _, ks := range c.engine.List() {
		if _, known := catalog.Get(ks.Name); known {
			continue
		}
		config, err := encodeConfig(ks.Config)
		if err != nil {
			return err
		}
		if _, err := c.node.CreateKeyspace(ks.Name, config); err != nil && !errors.Is(err, errs.ErrExists) {
			return fmt.Errorf("announce local keyspace %q: %w", ks.Name, err)
		}
	}
	return nil
}

func (c *Cluster) applyLoop(catalogs <-chan *membership.Catalog) {
	defer close(c.done)
	for catalog := range catalogs {
		c.apply(catalog)
	}
}

// apply makes the local engine hold exactly the catalog's live keyspaces
// among the names the catalog knows. Local keyspaces unknown to the catalog
// are left alone (announceLocal has announced them).
func (c *Cluster) apply(catalog *membership.Catalog) {
	c.mu.Lock()
	defer c.mu.Unlock()
	local := make(map[string]keyspace.Config)
	for _, ks := range c.engine.List() {
		local[ks.Name] = ks.Config
	}
	for _, e := range catalog.Entries() {
		current, exists := local[e.Name]
		if e.Dropped {
			if exists {
				c.dropLocal(e.Name, "dropped in the catalog")
			}
			continue
		}
		cfg, err := decodeConfig(e.Config)
		if err != nil {
			c.log.Error("catalog entry ignored", "keyspace", e.Name, "origin", string(e.Origin), "err", err)
			continue
		}
		if exists && current == cfg.WithDefaults() {
			continue
		}
		if exists {
			// Dropped and re-created with another config while this node
			// did not hear of it: the old data belongs to a keyspace that
			// no longer exists.
			c.dropLocal(e.Name, "re-created in the catalog with another config")
		}
		if _, err := c.engine.Create(e.Name, cfg); err != nil {
			c.log.Error("creating keyspace from the catalog", "keyspace", e.Name, "err", err)
			continue
		}
		c.log.Info("keyspace created from the catalog", "keyspace", e.Name, "origin", string(e.Origin))
	}
}

func (c *Cluster) dropLocal(name, why string) {
	if err := c.engine.Drop(name); err != nil && !errors.Is(err, errs.ErrNotFound) {
		c.log.Error("dropping keyspace", "keyspace", name, "reason", why, "err", err)
		return
	}
	c.log.Info("keyspace dropped", "keyspace", name, "reason", why)
}

// checkReplication refuses a replication factor above the number of live
// members: such a keyspace could not place its replicas. A one-member
// cluster (a standalone server) is exempt and keeps the single-node rule
// that one node stores one copy whatever the factor says.
func (c *Cluster) checkReplication(replication uint32) error {
	view := c.View()
	if view.Len()-view.Count(membership.StateLeft) <= 1 {
		return nil
	}
	if alive := view.Count(membership.StateAlive); int(replication) > alive {
		return fmt.Errorf("%w: replication %d exceeds the %d live members of the cluster",
			errs.ErrInvalidArgument, replication, alive)
	}
	return nil
}

// CreateKeyspace creates a keyspace cluster-wide: it validates name and
// config, refuses an existing name (errs.ErrExists) and a replication
// factor above the live members, records the keyspace in the catalog and
// creates it locally. The other members create it when the catalog entry
// reaches them. A refusal changes nothing.
func (c *Cluster) CreateKeyspace(name string, cfg keyspace.Config) (*storage.Keyspace, error) {
	if err := keyspace.ValidateName(name); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ks, err := c.engine.Acquire(name); err == nil {
		ks.Release()
		return nil, fmt.Errorf("keyspace %q: %w", name, errs.ErrExists)
	}
	if e, ok := c.node.Catalog().Get(name); ok && !e.Dropped {
		return nil, fmt.Errorf("keyspace %q: %w (created by %q)", name, errs.ErrExists, e.Origin)
	}
	if err := c.checkReplication(cfg.Replication); err != nil {
		return nil, err
	}
	config, err := encodeConfig(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := c.node.CreateKeyspace(name, config); err != nil {
		return nil, err
	}
	ks, err := c.engine.Create(name, cfg)
	if err != nil {
		// Undo the catalog entry so that no member creates a keyspace this
		// one refused.
		if _, dropErr := c.node.DropKeyspace(name); dropErr != nil {
			c.log.Error("undoing a catalog entry after a failed create", "keyspace", name, "err", dropErr)
		}
		return nil, err
	}
	return ks, nil
}

// DropKeyspace drops a keyspace cluster-wide: a tombstone in the catalog,
// then the local keyspace and its data. It returns errs.ErrNotFound if the
// keyspace exists neither in the catalog nor locally.
func (c *Cluster) DropKeyspace(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, catalogErr := c.node.DropKeyspace(name)
	if catalogErr != nil && !errors.Is(catalogErr, errs.ErrNotFound) {
		return catalogErr
	}
	err := c.engine.Drop(name)
	if errors.Is(err, errs.ErrNotFound) && catalogErr == nil {
		// Live in the catalog but never created here (its config was
		// refused locally): the tombstone is the whole drop.
		return nil
	}
	return err
}

// status answers ClusterStatus from this node's view and catalog.
func (c *Cluster) status() (*tyrpb.ClusterStatusResponse, error) {
	view := c.View()
	members, err := statusMembers(view)
	if err != nil {
		return nil, err
	}
	resp := &tyrpb.ClusterStatusResponse{Self: string(c.Self()), RingId: view.RingID().String(), Members: members}
	for _, e := range c.node.Catalog().Live() {
		cfg, err := decodeConfig(e.Config)
		if err != nil {
			return nil, err
		}
		cfg = cfg.WithDefaults()
		resp.Keyspaces = append(resp.Keyspaces, &tyrpb.KeyspaceInfo{
			Name: e.Name,
			Config: &tyrpb.KeyspaceConfig{ChunkSize: cfg.ChunkBytes, Replication: cfg.Replication,
				Mvcc: cfg.MVCC, Sync: cfg.Sync},
			CreatedUnixNano: e.Version.WallNanos,
		})
	}
	return resp, nil
}

// statusMembers lists view's members as ClusterStatus answers them.
func statusMembers(view *membership.View) ([]*tyrpb.ClusterMember, error) {
	shares := map[ring.NodeID]float64{}
	if r, err := view.Ring(ring.Config{}); err == nil {
		shares = r.Ownership()
	} else if view.Len() > view.Count(membership.StateLeft) {
		return nil, fmt.Errorf("build the ring: %w", err)
	}
	var out []*tyrpb.ClusterMember
	for _, m := range view.Members() {
		out = append(out, &tyrpb.ClusterMember{
			Id: string(m.Meta.ID), RpcAddr: m.Meta.RPCAddr, GossipAddr: m.GossipAddr, State: m.State.String(),
			Weight: m.Meta.Weight, RingShare: shares[m.Meta.ID], StartedUnixNano: m.Meta.StartedUnixNano,
			CatchingUp: m.Meta.CatchingUp,
		})
	}
	return out, nil
}

// ClusterStatus implements tyrpb.TyrServer. Without a cluster it reports
// errs.ErrUnavailable.
func (s *Service) ClusterStatus(context.Context, *tyrpb.ClusterStatusRequest) (*tyrpb.ClusterStatusResponse, error) {
	if s.cluster == nil {
		return nil, toStatus(fmt.Errorf("%w: this server runs without cluster membership", errs.ErrUnavailable))
	}
	resp, err := s.cluster.status()
	return resp, toStatus(err)
}

// WithCluster makes s create and drop keyspaces through c's catalog and
// answer ClusterStatus from c. Call it before Register.
func (s *Service) WithCluster(c *Cluster) *Service {
	s.cluster = c
	return s
}

// createKeyspace creates a keyspace through the cluster, or in the engine
// alone without one.
func (s *Service) createKeyspace(name string, cfg keyspace.Config) (*storage.Keyspace, error) {
	if s.cluster == nil {
		return s.engine.Create(name, cfg)
	}
	return s.cluster.CreateKeyspace(name, cfg)
}

// dropKeyspace drops a keyspace through the cluster, or in the engine alone
// without one.
func (s *Service) dropKeyspace(name string) error {
	if s.cluster == nil {
		return s.engine.Drop(name)
	}
	return s.cluster.DropKeyspace(name)
}

// Integration tests of Node: real memberlist instances gossiping over UDP
// and TCP on 127.0.0.1, on ports the kernel picks, with the default
// (memberlist.DefaultLocalConfig) timings. They show that a joining node
// reaches every view within joinBound; that a node shut down without
// leaving is suspected and then declared Dead within deadBound, and stays
// in the ring; that a node that leaves becomes Left and leaves the ring;
// that catalog writes reach every node, including one that joins later
// (through push/pull), as do dead and left members; that a second process
// claiming a live node's ID is refused; that join addresses that do not
// answer fail Start within a bounded time and leave nothing running; and
// that caller broadcasts arrive. TestCluster logs the measured detection
// times quoted in the package comment.
//
// These tests use real time and real sockets, so they wait on events with
// deadlines rather than on a simulated clock. Reproduce a failure with
//
//	go test -race -count=1 -run 'TestCluster|TestStart' -v ./internal/membership/
//
// which also prints each node's logs for a failed test; add
// MEMBERSHIP_TEST_LOG=/tmp/membership.log to keep every node's debug logs,
// memberlist's included, in that file.
package membership

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/testserver"
)

// Bounds the tests hold the default configuration to; the package comment
// explains them and gives measured values. joinBound is how long a new
// member may take to reach every view (gossip every 100ms); suspectBound is
// how long until the first survivor suspects a killed node (a probe within
// about (N-1) probe intervals, plus one interval of waiting for indirect
// acks); deadBound is how long until every survivor has it Dead (a
// confirmed suspicion times out 3s after it starts). Measured values stay
// below 3.7s and 6.8s.
const (
	joinBound    = 5 * time.Second
	leaveBound   = 5 * time.Second
	suspectBound = 6 * time.Second
	deadBound    = 10 * time.Second
)

// debugLogs holds every node's debug logs, memberlist's included, when
// MEMBERSHIP_TEST_LOG names a file to write them to.
var debugLogs = sync.OnceValue(func() *slog.Logger {
	path := os.Getenv("MEMBERSHIP_TEST_LOG")
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		panic(fmt.Sprintf("membership test: creating MEMBERSHIP_TEST_LOG %q: %v", path, err))
	}
	return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
})

// testLogger returns a logger that keeps Info and above and prints them if
// t fails, or the debug logger if MEMBERSHIP_TEST_LOG is set.
func testLogger(t *testing.T) *slog.Logger {
	t.Helper()
	if l := debugLogs(); l != nil {
		return l.With("test", t.Name())
	}
	logs := &testserver.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	})
	return slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func testConfig(t *testing.T, id string, join ...string) Config {
	return Config{ID: ring.NodeID(id), RPCAddr: "127.0.0.1:" + id, Join: join, Logger: testLogger(t)}
}

func startNode(t *testing.T, cfg Config) *Node {
	t.Helper()
	n, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start(%q): %v", cfg.ID, err)
	}
	t.Cleanup(func() {
		if err := n.Shutdown(); err != nil {
			t.Errorf("Shutdown(%q): %v", cfg.ID, err)
		}
	})
	return n
}

// waitView waits until n's view satisfies ok, and returns how long that
// took, failing t after bound.
func waitView(t *testing.T, n *Node, bound time.Duration, what string, ok func(*View) bool) time.Duration {
	t.Helper()
	views, cancel, err := n.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	began := time.Now()
	timeout := time.After(bound)
	for {
		select {
		case v, open := <-views:
			if !open {
				t.Fatalf("%s: node %q shut down while waiting for %s", n.ID(), n.ID(), what)
			}
			if ok(v) {
				return time.Since(began)
			}
		case <-timeout:
			t.Fatalf("node %q: no %s within %v; view: %+v", n.ID(), what, bound, n.View().Members())
		}
	}
}

// waitCatalog is waitView for the catalog.
func waitCatalog(t *testing.T, n *Node, bound time.Duration, what string, ok func(*Catalog) bool) {
	t.Helper()
	catalogs, cancel, err := n.SubscribeCatalog()
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	timeout := time.After(bound)
	for {
		select {
		case c, open := <-catalogs:
			if !open {
				t.Fatalf("node %q shut down while waiting for %s", n.ID(), what)
			}
			if ok(c) {
				return
			}
		case <-timeout:
			t.Fatalf("node %q: no %s within %v; catalog: %+v", n.ID(), what, bound, n.Catalog().Entries())
		}
	}
}

// states returns a predicate: every listed member has the given state.
func states(want map[string]State) func(*View) bool {
	return func(v *View) bool {
		for id, s := range want {
			if m, ok := v.Member(ring.NodeID(id)); !ok || m.State != s {
				return false
			}
		}
		return true
	}
}

func allAlive(ids ...string) func(*View) bool {
	want := map[string]State{}
	for _, id := range ids {
		want[id] = StateAlive
	}
	return states(want)
}

func hasEntry(name string, dropped bool) func(*Catalog) bool {
	return func(c *Catalog) bool {
		e, ok := c.Get(name)
		return ok && e.Dropped == dropped
	}
}

// TestCluster runs one cluster through joins, broadcasts, catalog writes,
// a late joiner, a crash, a departure and another late joiner.
func TestCluster(t *testing.T) {
	t.Parallel()
	a, b, c, received := startThree(t)
	checkBroadcast(t, b, received)
	d := checkCatalogAndLateJoiner(t, a, b, c)

	ringBefore := a.View().RingID()
	for _, n := range []*Node{b, c, d} {
		if id := n.View().RingID(); id != ringBefore {
			t.Fatalf("RingID of %s is %v, of a %v, with the same members", n.ID(), id, ringBefore)
		}
	}
	killAndMeasure(t, c, []*Node{a, b, d})
	for _, n := range []*Node{a, b, d} {
		if id := n.View().RingID(); id != ringBefore {
			t.Fatalf("RingID of %s changed from %v to %v when c died; dead members must stay in the ring", n.ID(), ringBefore, id)
		}
	}
	checkLeave(t, b, []*Node{a, d}, ringBefore)
	r, err := a.View().Ring(ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Contains("c") || r.Contains("b") {
		t.Fatalf("a's ring after c died and b left: %v; want c in and b out", r.Nodes())
	}
	checkLateJoinerAfterFailures(t, a, d)
}

// startThree starts a, b and c, b and c joining through a, and waits until
// every view has all three alive. received gets the payloads a receives.
func startThree(t *testing.T) (a, b, c *Node, received chan []byte) {
	received = make(chan []byte, 8)
	aCfg := testConfig(t, "a")
	aCfg.OnMessage = func(msg []byte) {
		select {
		case received <- msg:
		default:
		}
	}
	a = startNode(t, aCfg)
	b = startNode(t, testConfig(t, "b", a.GossipAddr()))
	c = startNode(t, testConfig(t, "c", a.GossipAddr()))
	for _, n := range []*Node{a, b, c} {
		took := waitView(t, n, joinBound, "view of a, b, c alive", allAlive("a", "b", "c"))
		t.Logf("%s saw a, b, c alive after %v", n.ID(), took)
	}
	return a, b, c, received
}

// checkBroadcast checks that a caller broadcast from sender reaches the
// node whose OnMessage feeds received, and that bad payloads are refused.
func checkBroadcast(t *testing.T, sender *Node, received chan []byte) {
	if err := sender.Broadcast([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	select {
	case msg := <-received:
		if string(msg) != "hello" {
			t.Fatalf("received %q, want hello", msg)
		}
	case <-time.After(joinBound):
		t.Fatalf("%s's broadcast did not arrive", sender.ID())
	}
	if err := sender.Broadcast(make([]byte, BroadcastBytesMax+1)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("oversized broadcast = %v, want ErrInvalid", err)
	}
}

// checkCatalogAndLateJoiner creates a keyspace on b, checks that it reaches
// a and c by gossip, then starts d through c, which must have it right
// after Start (the join's push/pull), and drops it on d.
func checkCatalogAndLateJoiner(t *testing.T, a, b, c *Node) *Node {
	if _, err := b.CreateKeyspace("logs", []byte("chunk=64KiB")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*Node{a, c} {
		waitCatalog(t, n, joinBound, "keyspace logs", hasEntry("logs", false))
	}
	d := startNode(t, testConfig(t, "d", c.GossipAddr()))
	if e, ok := d.Catalog().Get("logs"); !ok || string(e.Config) != "chunk=64KiB" || e.Origin != "b" {
		t.Fatalf("late joiner's catalog right after Start: %+v", d.Catalog().Entries())
	}
	for _, n := range []*Node{a, b, c, d} {
		took := waitView(t, n, joinBound, "view of a, b, c, d alive", allAlive("a", "b", "c", "d"))
		t.Logf("%s saw d alive after %v", n.ID(), took)
	}
	if _, err := d.DropKeyspace("logs"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*Node{a, b, c} {
		waitCatalog(t, n, joinBound, "tombstone of logs", hasEntry("logs", true))
	}
	return d
}

// checkLeave makes leaver leave: it must become Left for the others and
// leave their rings, which must agree.
func checkLeave(t *testing.T, leaver *Node, others []*Node, ringBefore RingID) {
	if err := leaver.Leave(leaveBound); err != nil {
		t.Fatal(err)
	}
	if err := leaver.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, n := range others {
		took := waitView(t, n, leaveBound, "leaver left", states(map[string]State{string(leaver.ID()): StateLeft}))
		t.Logf("%s saw %s left after %v", n.ID(), leaver.ID(), took)
	}
	ringAfter := others[0].View().RingID()
	for _, n := range others {
		if id := n.View().RingID(); id == ringBefore || id != ringAfter {
			t.Fatalf("RingID of %s after %s left: %v (before %v, %s has %v)", n.ID(), leaver.ID(), id, ringBefore, others[0].ID(), ringAfter)
		}
	}
	r, err := others[0].View().Ring(ring.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Contains(leaver.ID()) || r.Len() != 3 {
		t.Fatalf("ring after %s left: %v", leaver.ID(), r.Nodes())
	}
}

// checkLateJoinerAfterFailures starts e through a after b left and c died.
// memberlist forgets departed and dead members and never tells a newcomer
// about them; the push/pull state brings them, so e builds the same ring as
// everyone else.
func checkLateJoinerAfterFailures(t *testing.T, a, d *Node) {
	e := startNode(t, testConfig(t, "e", a.GossipAddr()))
	if !states(map[string]State{"a": StateAlive, "b": StateLeft, "c": StateDead, "d": StateAlive, "e": StateAlive})(e.View()) {
		t.Fatalf("late joiner's view right after Start: %+v", e.View().Members())
	}
	if _, ok := e.Catalog().Get("logs"); !ok {
		t.Fatalf("late joiner lacks the tombstone of logs: %+v", e.Catalog().Entries())
	}
	for _, n := range []*Node{a, d} {
		waitView(t, n, joinBound, "e alive", allAlive("e"))
		if n.View().RingID() != e.View().RingID() {
			t.Fatalf("RingID of %s %v differs from the late joiner's %v", n.ID(), n.View().RingID(), e.View().RingID())
		}
	}
}

// killAndMeasure shuts victim down without leaving, as a crash would look
// to the others, and measures how long until the first survivor suspects it
// and until every survivor has it Dead.
func killAndMeasure(t *testing.T, victim *Node, survivors []*Node) {
	t.Helper()
	type seen struct {
		node          ring.NodeID
		suspect, dead time.Duration // zero if never seen
	}
	results := make(chan seen, len(survivors))
	var ready sync.WaitGroup
	var killed time.Time
	start := make(chan struct{})
	for _, n := range survivors {
		views, cancel, err := n.Subscribe()
		if err != nil {
			t.Fatal(err)
		}
		ready.Add(1)
		go func() {
			defer cancel()
			<-views // the current view
			ready.Done()
			<-start
			s := seen{node: n.ID()}
			timeout := time.After(deadBound)
			for s.dead == 0 {
				select {
				case v, open := <-views:
					if !open {
						results <- s
						return
					}
					switch m, _ := v.Member(victim.ID()); m.State {
					case StateSuspect:
						if s.suspect == 0 {
							s.suspect = time.Since(killed)
						}
					case StateDead:
						s.dead = time.Since(killed)
					}
				case <-timeout:
					results <- s
					return
				}
			}
			results <- s
		}()
	}
	ready.Wait()
	killed = time.Now()
	close(start)
	if err := victim.Shutdown(); err != nil {
		t.Fatal(err)
	}
	var firstSuspect, lastDead time.Duration
	for range survivors {
		s := <-results
		t.Logf("%s: %s suspect after %v, dead after %v", s.node, victim.ID(), s.suspect, s.dead)
		if s.dead == 0 {
			t.Errorf("%s did not declare %s dead within %v", s.node, victim.ID(), deadBound)
		}
		if s.suspect != 0 && (firstSuspect == 0 || s.suspect < firstSuspect) {
			firstSuspect = s.suspect
		}
		lastDead = max(lastDead, s.dead)
	}
	if firstSuspect == 0 || firstSuspect > suspectBound {
		t.Errorf("first suspicion of %s after %v; want one within %v", victim.ID(), firstSuspect, suspectBound)
	}
	t.Logf("detection of a killed node among %d members: first suspect after %v, dead everywhere after %v",
		len(survivors)+1, firstSuspect, lastDead)
}

// TestStart_duplicateID starts a second process under a live member's ID,
// joining through a third node, and expects it to refuse to start.
func TestStart_duplicateID(t *testing.T) {
	t.Parallel()
	a := startNode(t, testConfig(t, "a"))
	holder := startNode(t, Config{ID: "dup", RPCAddr: "127.0.0.1:1111", Join: []string{a.GossipAddr()}, Logger: testLogger(t)})
	waitView(t, a, joinBound, "dup alive", allAlive("dup"))

	n, err := Start(Config{ID: "dup", RPCAddr: "127.0.0.1:2222", Join: []string{a.GossipAddr()}, Logger: testLogger(t)})
	if err == nil {
		_ = n.Shutdown()
		t.Fatal("a second process with a live member's ID started")
	}
	if !errors.Is(err, ErrDuplicateID) || !strings.Contains(err.Error(), "gossip address "+holder.GossipAddr()+` (RPC address "127.0.0.1:1111") holds`) {
		t.Fatalf("Start with a duplicate ID = %v; want ErrDuplicateID naming the holder at %s", err, holder.GossipAddr())
	}
	t.Logf("refused as expected: %v", err)

	// The cluster keeps the first holder, and a reports the conflict.
	if m, _ := a.View().Member("dup"); m.Meta.RPCAddr != "127.0.0.1:1111" || m.State != StateAlive {
		t.Fatalf("a's entry for dup after the conflict: %+v", m)
	}
	// a merges the newcomer's join state after answering it, so the
	// newcomer may have given up before a got to it.
	for deadline := time.Now().Add(joinBound); len(a.Conflicts()) == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("a recorded no conflict within %v", joinBound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStart_joinUnreachable starts nodes whose join addresses refuse
// connections or accept them and never answer. Start must fail with ErrJoin
// within about TCPTimeout per address and leave no memberlist goroutine
// behind. It is not parallel, so that no other test's memberlist
// goroutines are running when it counts them.
func TestStart_joinUnreachable(t *testing.T) {
	refused := testserver.FreeLoopbackAddr(t) // nothing listens there
	silent := silentListener(t)
	const tcpTimeout = 300 * time.Millisecond
	cases := map[string][]string{
		"refused":         {refused},
		"silent":          {silent},
		"refused, silent": {refused, silent},
	}
	for name, join := range cases {
		cfg := testConfig(t, "lonely", join...)
		cfg.TCPTimeout = tcpTimeout
		began := time.Now()
		n, err := Start(cfg)
		took := time.Since(began)
		if err == nil {
			_ = n.Shutdown()
			t.Fatalf("%s: Start joined %v", name, join)
		}
		if !errors.Is(err, ErrJoin) {
			t.Fatalf("%s: Start = %v, want ErrJoin", name, err)
		}
		if bound := time.Duration(len(join))*tcpTimeout + time.Second; took > bound {
			t.Fatalf("%s: Start took %v to fail, more than %v", name, took, bound)
		}
		t.Logf("%s: failed after %v: %v", name, took, err)
	}
	waitNoMemberlistGoroutines(t)
}

// silentListener returns the address of a listener that accepts
// connections and never answers.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				_, _ = io.Copy(io.Discard, conn) // until the client gives up and closes
				_ = conn.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		conns.Wait()
	})
	return l.Addr().String()
}

// waitNoMemberlistGoroutines fails t if memberlist goroutines are still
// running 2s from now.
func waitNoMemberlistGoroutines(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "hashicorp/memberlist.") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("memberlist goroutines still running after a failed Start:\n%s", stacks)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStart_rejectsBadConfig(t *testing.T) {
	cases := map[string]Config{
		"no ID":           {RPCAddr: "x:1"},
		"no RPC address":  {ID: "a"},
		"heavy":           {ID: "a", RPCAddr: "x:1", Weight: WeightMax + 1},
		"too many joins":  {ID: "a", RPCAddr: "x:1", Join: make([]string, JoinAddressesMax+1)},
		"slow probe":      {ID: "a", RPCAddr: "x:1", ProbeTimeout: 2 * time.Second},
		"bad port":        {ID: "a", RPCAddr: "x:1", BindPort: 70000},
		"negative gossip": {ID: "a", RPCAddr: "x:1", GossipInterval: -time.Second},
		"huge queue":      {ID: "a", RPCAddr: "x:1", BroadcastQueueMax: BroadcastQueueMaxCeiling + 1},
	}
	for name, cfg := range cases {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		if n, err := Start(cfg); !errors.Is(err, ErrInvalid) {
			if n != nil {
				_ = n.Shutdown()
			}
			t.Errorf("%s: Start = %v, want ErrInvalid", name, err)
		}
	}
}

// TestSubscribers_coalesce checks that a subscriber that does not read
// finds only the latest value, and that publishing never blocks.
func TestSubscribers_coalesce(t *testing.T) {
	var s subscribers[int]
	_, ch, err := s.add()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		s.publish(func() int { return i })
	}
	if got := <-ch; got != 4 {
		t.Fatalf("subscriber received %d, want the latest, 4", got)
	}
	select {
	case v := <-ch:
		t.Fatalf("subscriber received a stale value %d", v)
	default:
	}
	for range SubscribersMax - 1 {
		if _, _, err := s.add(); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.add(); !errors.Is(err, ErrTooManySubscribers) {
		t.Fatalf("subscription beyond SubscribersMax = %v", err)
	}
	s.closeAll()
	if _, open := <-ch; open {
		t.Fatal("channel open after closeAll")
	}
}

func TestNode_afterShutdown(t *testing.T) {
	t.Parallel()
	n := startNode(t, testConfig(t, "solo"))
	views, _, err := n.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for range views { // drains the current view, then ends when Shutdown closed it
	}
	if _, _, err := n.Subscribe(); !errors.Is(err, ErrClosed) {
		t.Errorf("Subscribe after Shutdown = %v", err)
	}
	if err := n.Broadcast([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("Broadcast after Shutdown = %v", err)
	}
	if _, err := n.CreateKeyspace("logs", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("CreateKeyspace after Shutdown = %v", err)
	}
	if err := n.Leave(time.Second); !errors.Is(err, ErrClosed) {
		t.Errorf("Leave after Shutdown = %v", err)
	}
	if err := n.Shutdown(); err != nil {
		t.Errorf("second Shutdown = %v", err)
	}
}

// TestSetCatchingUp: a node that starts catching up is seen so by a peer
// from the start, the peer sees it clear the flag, and the ring does not
// change either time.
func TestSetCatchingUp(t *testing.T) {
	t.Parallel()
	a := startNode(t, testConfig(t, "a"))
	cfg := testConfig(t, "b", a.GossipAddr())
	cfg.CatchingUp = true
	b := startNode(t, cfg)
	catchingUp := func(want bool) func(*View) bool {
		return func(v *View) bool {
			m, ok := v.Member("b")
			return ok && m.State == StateAlive && m.Meta.CatchingUp == want
		}
	}
	waitView(t, a, 10*time.Second, "b alive and catching up", catchingUp(true))
	before := a.View().RingID()
	if err := b.SetCatchingUp(false, time.Second); err != nil {
		t.Fatal(err)
	}
	if !catchingUp(false)(b.View()) {
		t.Fatal("b's own view still has it catching up")
	}
	waitView(t, a, 10*time.Second, "b caught up", catchingUp(false))
	if after := a.View().RingID(); after != before {
		t.Fatalf("RingID changed from %v to %v with the catching-up flag", before, after)
	}
	if err := b.SetCatchingUp(false, 0); err == nil {
		t.Fatal("SetCatchingUp with a zero timeout: no error")
	}
}

package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/tyrstore/tyr/client"
)

// The monalisa workload is the seeds' MonALISA storage layout (§9.1.2):
// every generator appends its measurements, (timestamp, value) events of 16
// bytes, to a log of its own, and each event is added to per-minute
// aggregates (sum, count) of its machine, cluster and site and to one
// global aggregate, in the same transaction as the append. The global
// aggregate is updated by every event: the hot spot. Reads fetch the last
// readSlots minutes of an aggregate (800 bytes), the aggregate chosen by a
// power law, so the coarse aggregates a dashboard shows are read most.
const (
	eventBytes = 16 // timestamp (Unix ns) and value, little-endian uint64s
	slotBytes  = 16 // sum and count, little-endian uint64s
	// monalisaSlots one-minute slots make a ring of an hour per aggregate,
	// so an aggregate is a value of fixed size on every system.
	monalisaSlots = 60
	readSlots     = 50 // 800 bytes
	aggLevels     = 4  // global, site, cluster, machine

	generatorsPerMachine = 10
	machinesPerCluster   = 10
	clustersPerSite      = 5

	// generatorsMax bounds --generators: every generator's log is created
	// before the measurement.
	generatorsMax = 100000
	// eventValueMax bounds the measured values, so sums stay far from
	// wrapping.
	eventValueMax = 1000
	// readExponent is the power law's exponent: Zipf's 1.
	readExponent = 1.0
)

// monalisaLayout places generators in machines, clusters and sites and
// numbers the aggregates: 0 is the global one, then the sites, the
// clusters and the machines. An event's aggregates thus come in ascending
// order, the order lock-based peers lock them in.
type monalisaLayout struct {
	generators, machines, clusters, sites int
	// epoch is minute zero of the slots.
	epoch time.Time
}

func newMonalisaLayout(generators int, epoch time.Time) *monalisaLayout {
	l := &monalisaLayout{generators: generators, epoch: epoch}
	l.machines = ceilDiv(generators, generatorsPerMachine)
	l.clusters = ceilDiv(l.machines, machinesPerCluster)
	l.sites = ceilDiv(l.clusters, clustersPerSite)
	return l
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// aggregates is the number of aggregates.
func (l *monalisaLayout) aggregates() int { return 1 + l.sites + l.clusters + l.machines }

// aggsOf returns the aggregates generator gen's events are added to:
// global, site, cluster, machine.
func (l *monalisaLayout) aggsOf(gen int) [aggLevels]int {
	m := gen / generatorsPerMachine
	c := m / machinesPerCluster
	s := c / clustersPerSite
	return [aggLevels]int{0, 1 + s, 1 + l.sites + c, 1 + l.sites + l.clusters + m}
}

// level returns the level of aggregate agg (0 global … 3 machine) and its
// number within the level.
func (l *monalisaLayout) level(agg int) (int, int) {
	switch {
	case agg == 0:
		return 0, 0
	case agg <= l.sites:
		return 1, agg - 1
	case agg <= l.sites+l.clusters:
		return 2, agg - 1 - l.sites
	default:
		return 3, agg - 1 - l.sites - l.clusters
	}
}

var levelNames = [aggLevels]string{"global", "site", "cluster", "machine"}

// aggKey names aggregate agg's value: agg/global, agg/site/0, ...
func (l *monalisaLayout) aggKey(agg int) string {
	lv, i := l.level(agg)
	if lv == 0 {
		return "agg/global"
	}
	return fmt.Sprintf("agg/%s/%d", levelNames[lv], i)
}

func genKey(gen int) string { return fmt.Sprintf("gen/%d", gen) }

// slot returns the slot of the minute t falls in.
func (l *monalisaLayout) slot(t time.Time) int {
	m := int(max(t.Sub(l.epoch), 0) / time.Minute)
	return m % monalisaSlots
}

// readFrom returns the first of the readSlots slots a read at t fetches:
// those up to t's minute, or the first ones of the ring in the first
// minutes.
func (l *monalisaLayout) readFrom(t time.Time) int {
	return max(0, l.slot(t)-readSlots+1)
}

// monalisaWrite is what one event changes: its bytes appended to its
// generator's log, and value and 1 added to the sum and the count of one
// slot of each of its aggregates.
type monalisaWrite struct {
	gen   int
	event [eventBytes]byte
	value uint64
	slot  int
	aggs  [aggLevels]int
}

func (l *monalisaLayout) write(gen int, t time.Time, value uint64) monalisaWrite {
	w := monalisaWrite{gen: gen, value: value, slot: l.slot(t), aggs: l.aggsOf(gen)}
	binary.LittleEndian.PutUint64(w.event[:8], uint64(t.UnixNano()))
	binary.LittleEndian.PutUint64(w.event[8:], value)
	return w
}

// slotOffset is where slot's sum starts in an aggregate; its count follows.
func slotOffset(slot int) uint64 { return uint64(slot) * slotBytes }

// addToSlot returns a slot's 16 bytes with value added to the sum and 1 to
// the count, as a read-modify-write computes it.
func addToSlot(old []byte, value uint64) []byte {
	var b [slotBytes]byte
	copy(b[:], old)
	binary.LittleEndian.PutUint64(b[:8], binary.LittleEndian.Uint64(b[:8])+value)
	binary.LittleEndian.PutUint64(b[8:], binary.LittleEndian.Uint64(b[8:])+1)
	return b[:]
}

// monalisaSystem runs the monalisa workload: CreateMonalisa makes every
// generator's log empty and every aggregate's slots zero, and its conns are
// monalisaConns.
type monalisaSystem interface {
	system
	CreateMonalisa(ctx context.Context, l *monalisaLayout) error
}

type monalisaConn interface {
	// Record applies w atomically: all of it or none.
	Record(ctx context.Context, l *monalisaLayout, w *monalisaWrite) error
	// ReadAggregates returns n slots of aggregate agg from slot from.
	ReadAggregates(ctx context.Context, l *monalisaLayout, agg, from, n int) ([]byte, error)
}

// runMonalisa measures the mix of events and aggregate reads. Afterwards
// the aggregates on tyr must agree with each other and with the logs: every
// level sums to the same count and sum, that count is the number of events
// logged, and no acknowledged event is missing.
func runMonalisa(ctx context.Context, cfg *Config, systems []system, emit func(Result) error) error {
	l := newMonalisaLayout(cfg.Generators, time.Now())
	cfg.ValueSize = eventBytes
	cfg.progress("monalisa: %d generators on %d machines, %d clusters, %d sites; %.0f%% reads",
		l.generators, l.machines, l.clusters, l.sites, 100*cfg.ReadRatio)
	for _, s := range systems {
		cfg.progress("%s: creating %d logs and %d aggregates", s.Name(), l.generators, l.aggregates())
		if err := s.(monalisaSystem).CreateMonalisa(ctx, l); err != nil {
			return fmt.Errorf("%s: creating logs and aggregates: %w", s.Name(), err)
		}
	}
	reads := newPowerLaw(l.aggregates(), readExponent)
	var writes atomic.Uint64
	op := func(ctx context.Context, c conn, _ int, rng *rand.Rand, _ []byte) (int, error) {
		mc := c.(monalisaConn)
		if rng.Float64() < cfg.ReadRatio {
			b, err := mc.ReadAggregates(ctx, l, reads.pick(rng), l.readFrom(time.Now()), readSlots)
			if err != nil {
				return 0, err
			}
			if len(b) != readSlots*slotBytes {
				return 0, fmt.Errorf("read %d bytes of aggregates, want %d", len(b), readSlots*slotBytes)
			}
			return len(b), nil
		}
		w := l.write(rng.IntN(l.generators), time.Now(), rng.Uint64N(eventValueMax))
		if err := mc.Record(ctx, l, &w); err != nil {
			return 0, err
		}
		writes.Add(1)
		return eventBytes, nil
	}
	// Each result's writes are those counted since the previous result:
	// phases run one at a time.
	var acked uint64
	counting := func(r Result) error {
		if n := writes.Swap(0); isTyr(systems, r.System) {
			acked += n
		}
		return emit(r)
	}
	if err := forEachPhase(ctx, cfg, systems, counting, op); err != nil {
		return err
	}
	return tyrOf(systems).checkMonalisa(ctx, cfg, l, acked)
}

// CreateMonalisa creates the logs empty and the aggregates as zeros, in
// commits as large as allowed.
func (s *tyrSystem) CreateMonalisa(ctx context.Context, l *monalisaLayout) error {
	keys := make([]string, l.generators)
	for g := range keys {
		keys[g] = genKey(g)
	}
	if err := s.Create(ctx, keys); err != nil {
		return err
	}
	aggs := make([]string, l.aggregates())
	for a := range aggs {
		aggs[a] = l.aggKey(a)
	}
	return s.Preload(ctx, aggs, make([]byte, monalisaSlots*slotBytes))
}

// tyrMonalisaOps is the commit of one event with atomic ops: the append and
// two atomic adds per aggregate, applied on the server.
func tyrMonalisaOps(l *monalisaLayout, w *monalisaWrite) []client.Op {
	ops := make([]client.Op, 0, 1+2*aggLevels)
	ops = append(ops, client.AppendOp(genKey(w.gen), w.event[:], false))
	off := slotOffset(w.slot)
	for _, a := range w.aggs {
		k := l.aggKey(a)
		ops = append(ops, client.AtomicOp(k, off, 8, client.FuncAdd, w.value),
			client.AtomicOp(k, off+8, 8, client.FuncAdd, 1))
	}
	return ops
}

// Record commits the event and its aggregate updates in one round trip.
func (c *tyrConn) Record(ctx context.Context, l *monalisaLayout, w *monalisaWrite) error {
	_, err := c.c.Commit(ctx, c.ks, tyrMonalisaOps(l, w)...)
	return err
}

func (c *tyrConn) ReadAggregates(ctx context.Context, l *monalisaLayout, agg, from, n int) ([]byte, error) {
	data, _, err := c.c.ReadPart(ctx, c.ks, l.aggKey(agg), slotOffset(from), uint64(n*slotBytes))
	return data, err
}

// Record reads the event's aggregate slots in a transaction, writes them
// back updated and appends the event; the commit fails if any aggregate
// changed since it was read, and RunTx runs it again.
func (c *tyrRMWConn) Record(ctx context.Context, l *monalisaLayout, w *monalisaWrite) error {
	off := slotOffset(w.slot)
	return runTx(ctx, c.c, c.ks, c.aborts, func(tx *client.Tx) error {
		for _, a := range w.aggs {
			k := l.aggKey(a)
			old, err := tx.Read(ctx, k, off, slotBytes)
			if err != nil {
				return err
			}
			tx.Write(k, off, addToSlot(old, w.value))
		}
		tx.Append(genKey(w.gen), w.event[:])
		return nil
	})
}

// CreateMonalisa creates the logs and aggregates for both tyr systems,
// once: they share the blobs.
func (s *tyrRMWSystem) CreateMonalisa(ctx context.Context, l *monalisaLayout) error {
	err := s.tyrSystem.CreateMonalisa(ctx, l)
	if errors.Is(err, client.ErrExists) {
		return nil
	}
	return err
}

// checkMonalisa checks that tyr's aggregates and logs agree: the same count
// and sum at every level, as many events logged as counted, and at least
// acked of them.
func (s *tyrSystem) checkMonalisa(ctx context.Context, cfg *Config, l *monalisaLayout, acked uint64) error {
	var count, sum [aggLevels]uint64
	for a := range l.aggregates() {
		b, err := s.admin.Read(ctx, s.keyspace, l.aggKey(a), 0, monalisaSlots*slotBytes)
		if err != nil {
			return fmt.Errorf("reading %s: %w", l.aggKey(a), err)
		}
		lv, _ := l.level(a)
		for off := 0; off+slotBytes <= len(b); off += slotBytes {
			sum[lv] += binary.LittleEndian.Uint64(b[off:])
			count[lv] += binary.LittleEndian.Uint64(b[off+8:])
		}
	}
	var logged uint64
	for g := range l.generators {
		info, err := s.admin.Stat(ctx, s.keyspace, genKey(g))
		if err != nil {
			return fmt.Errorf("stat %s: %w", genKey(g), err)
		}
		logged += info.Size / eventBytes
	}
	return checkTotals(count, sum, logged, acked, cfg)
}

// checkTotals compares what the levels of aggregates counted with the
// events logged and acknowledged.
func checkTotals(count, sum [aggLevels]uint64, logged, acked uint64, cfg *Config) error {
	for lv := 1; lv < aggLevels; lv++ {
		if count[lv] != count[0] || sum[lv] != sum[0] {
			return fmt.Errorf("tyr aggregates disagree: %s counts %d events summing to %d, global %d summing to %d",
				levelNames[lv], count[lv], sum[lv], count[0], sum[0])
		}
	}
	if count[0] != logged {
		return fmt.Errorf("tyr aggregates count %d events, the logs hold %d", count[0], logged)
	}
	// An event that failed on the client may still have been applied, so
	// more may be logged than acknowledged, never fewer.
	if logged < acked {
		return fmt.Errorf("tyr logs hold %d events after %d acknowledged: lost events", logged, acked)
	}
	cfg.progress("tyr: %d events logged and aggregated at every level after %d acknowledged", logged, acked)
	return nil
}

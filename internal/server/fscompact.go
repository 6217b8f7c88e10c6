package server

// Background compaction of TýrFS directory logs (internal/fslayout,
// invariant 3). A directory is a blob whose log of add and remove records
// only grows; once removals dominate it (fslayout.DirLog.NeedsCompaction),
// a node rewrites it as one add per entry (DirLog.Compacted).
//
// The trigger costs the commit path no I/O: when a commit this node
// coordinated (Service.Commit) appended a remove record to a key ending in
// "/", the blob's size after the commit (from the commit's results) is
// compared with its size when the node last looked at it; a log that grew
// by a quarter since, and is large enough to need compaction at all, is
// queued for a check. Only removals can make a log need compaction (a log
// of adds alone holds one record per entry), so directories that only
// grow are never read. The queue is bounded and a full queue drops the
// notice: the log stays valid, only longer, and the next removal notices it
// again.
//
// One worker per node takes the queue in order, paced
// (dirCompactBytesPerSecond), so it never holds more than one check in
// flight. A check reads the blob through the read path a client's read
// takes (Service.Read, consistent, so a version manager answers wherever
// the blob lives), skips blobs that are not TýrFS directories and logs
// that do not need compaction, and otherwise commits, through the path a
// client's commit takes (DecodeCommit, Service.commit), the truncation of
// the log and the write of its compacted form together with a read check
// of the version it read. An append that landed in between changes the
// version, the read check fails the commit as a conflict and nothing is
// written, so no entry is ever lost. The check reads and tries again at
// once, a few times (dirCompactTriesMax); if appends keep winning, it is
// queued again later (dirCompactRetryDelay, doubling, dirCompactRoundsMax
// rounds), and after that the log waits for its next removal. The header (mode, owner, times) is left as it
// is.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/fslayout"
	"github.com/tyrstore/tyr/internal/limits"
	"github.com/tyrstore/tyr/internal/txn"
)

// Limits of the directory-log compaction.
const (
	// dirCompactQueueLen bounds the directory logs waiting for a check on
	// one node; a notice that finds the queue full is dropped.
	dirCompactQueueLen = 1024
	// dirCompactSeenMax bounds the directory logs whose size at their last
	// check a node remembers; past it, one is forgotten (and is checked
	// at its next removal).
	dirCompactSeenMax = 16384
	// dirCompactCheckBytesMin is the size of the smallest directory blob
	// that can need compaction: a header and fslayout.CompactRecordsMin
	// records of one-byte names. Smaller ones are never checked.
	dirCompactCheckBytesMin = fslayout.HeaderBytes + fslayout.CompactRecordsMin*(fslayout.RecordHeaderBytes+1)
	// dirCompactGrowthDiv: a log is checked again once it grew by
	// 1/dirCompactGrowthDiv of its size at its last check. A log of n
	// entries needs compaction after about n/3 removals, or n/2 creates
	// each removed again, so a quarter finds it early while the reads of
	// checks that find nothing stay within a few times the bytes appended.
	dirCompactGrowthDiv = 4
	// dirCompactBytesPerSecond paces the worker: after a check that read
	// and wrote n bytes, it waits n/dirCompactBytesPerSecond, and at least
	// dirCompactPause, before the next.
	dirCompactBytesPerSecond = 16 << 20
	// dirCompactPause is the least time between two checks (at most 200
	// checks a second per node).
	dirCompactPause = 5 * time.Millisecond
	// dirCompactTimeout bounds one check: its reads and its commit.
	dirCompactTimeout = 10 * time.Second
	// dirCompactTriesMax is how often one check reads and commits when
	// appends keep winning the race, waiting dirCompactTryBackoff,
	// doubling, between tries.
	dirCompactTriesMax   = 4
	dirCompactTryBackoff = time.Millisecond
	// dirCompactRoundsMax is how many checks of a log that lost every try
	// run in all, each queued dirCompactRetryDelay (doubling) after the
	// last; after that the log waits for its next removal.
	dirCompactRoundsMax  = 4
	dirCompactRetryDelay = 500 * time.Millisecond
	// dirCompactReadBytesMax is the largest directory blob a check reads;
	// a larger one is left as it is.
	dirCompactReadBytesMax = 64 << 20
	// dirCompactWriteBytesMax is the largest compacted log one commit
	// writes (in writes of at most limits.PayloadBytesMax); a log that
	// compacts to more is left as it is.
	dirCompactWriteBytesMax = limits.CommitBytesMax - limits.PayloadBytesMax
)

// The outcomes of tyr_fs_dir_compactions_total.
const (
	dirCompacted = "compacted" // the log was rewritten
	dirSkipped   = "skipped"   // checked: not a TýrFS directory, gone, too large, or no need
	dirConflict  = "conflict"  // an append won the race: the commit wrote nothing
	dirDropped   = "dropped"   // a notice or a retry found the queue full
	dirFailed    = "failed"    // a read or commit failed otherwise
)

var dirOutcomes = []string{dirCompacted, dirSkipped, dirConflict, dirDropped, dirFailed}

var dirCompactionsDesc = prometheus.NewDesc("tyr_fs_dir_compactions_total",
	"TýrFS directory logs this node checked for compaction, by outcome: compacted, skipped (not a directory, "+
		"gone, too large or no need), conflict (an append came first; checked again), dropped (queue full) or failed.",
	[]string{"outcome"}, nil)

// dirRef names a directory blob.
type dirRef struct{ ks, key string }

type dirJob struct {
	dirRef
	round int // checks of this log so far that lost every try
	kind  jobKind
}

// jobKind is what a job of the worker does.
type jobKind uint8

const (
	jobCompact jobKind = iota // check a directory log (this file)
	jobHome                   // bring the data of the staple at key home (fshome.go)
	jobSweep                  // delete the hidden blob key if it is an orphan (fshidden.go)
)

// dirCompactor is a node's queue and worker of directory-log checks.
type dirCompactor struct {
	s       *Service
	queue   chan dirJob
	running atomic.Bool

	mu   sync.Mutex
	seen map[dirRef]uint64 // size at the last check or notice
	// homing holds the staples queued for homing, so that one is queued
	// once however often it is noticed.
	homing map[dirRef]bool

	counts [5]atomic.Uint64 // by index in dirOutcomes
	// homeBytesMax is the largest data a homing moves (0: none);
	// homeCounts counts homings by index in dirOutcomes (homed for
	// compacted).
	homeBytesMax uint64
	homeCounts   [5]atomic.Uint64
	// sweep is the sweep of orphaned hidden blobs (fshidden.go).
	sweep hiddenSweep

	// afterRead, if set before the worker starts, runs between a check's
	// read and its commit (tests race appends against it).
	afterRead func(dirRef)
	// afterCheck, if set before the worker starts, runs after each check
	// of a directory log with what it did (tests wait on it).
	afterCheck func(dirRef, dirCheck)

	done chan struct{} // closed when the worker ends
}

func newDirCompactor(s *Service) *dirCompactor {
	return &dirCompactor{s: s, queue: make(chan dirJob, dirCompactQueueLen), seen: map[dirRef]uint64{}, homing: map[dirRef]bool{}}
}

// countJob counts a check of j's kind.
func (d *dirCompactor) countJob(j dirJob, outcome string) {
	i := slices.Index(dirOutcomes, outcome)
	switch j.kind {
	case jobHome:
		d.homeCounts[i].Add(1)
	case jobSweep:
		d.sweep.counts[i].Add(1)
	default:
		d.counts[i].Add(1)
	}
}

// Count returns how many checks had outcome.
func (d *dirCompactor) Count(outcome string) uint64 {
	return d.counts[slices.Index(dirOutcomes, outcome)].Load()
}

func (d *dirCompactor) Describe(ch chan<- *prometheus.Desc) {
	ch <- dirCompactionsDesc
	ch <- stapleHomingsDesc
	ch <- hiddenSweepsDesc
}

func (d *dirCompactor) Collect(ch chan<- prometheus.Metric) {
	for i, o := range dirOutcomes {
		ch <- prometheus.MustNewConstMetric(dirCompactionsDesc, prometheus.CounterValue, float64(d.Count(o)), o)
		ch <- prometheus.MustNewConstMetric(stapleHomingsDesc, prometheus.CounterValue, float64(d.homeCounts[i].Load()), doneAs("homed", o))
		ch <- prometheus.MustNewConstMetric(hiddenSweepsDesc, prometheus.CounterValue, float64(d.sweep.counts[i].Load()), doneAs("reclaimed", o))
	}
}

// StartDirCompaction starts s's background compaction of TýrFS directory
// logs, the homing of staples' data of up to homeBytesMax bytes (0:
// none; see fshome.go) and the sweep of orphaned hidden blobs unchanged
// for sweepGrace (0: HiddenGraceDefault; fshidden.go), and returns the function that stops them, waiting
// for a check in flight to end (its commit is cancelled).
func (s *Service) StartDirCompaction(homeBytesMax uint64, sweepGrace time.Duration) (stop func()) {
	d := s.dirs
	d.homeBytesMax = min(homeBytesMax, fslayout.HomeBytesLimit)
	d.sweep.grace = sweepGrace
	d.sweep.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	d.done = make(chan struct{})
	d.running.Store(true)
	go d.run(ctx)
	return func() {
		d.running.Store(false)
		cancel()
		<-d.done
	}
}

// noticeCommit is the hook of a committed request: it queues the
// directory logs ops appended a removal to, when they grew enough. results
// are the ops' results (sizes after the commit). No I/O, no waiting.
func (d *dirCompactor) noticeCommit(ks string, ops []txn.Op, results []txn.Result) {
	if !d.running.Load() {
		return
	}
	for i, op := range ops[:min(len(ops), len(results))] {
		if op.Kind == txn.OpAppend && strings.HasSuffix(op.Key, "/") && removesEntry(op.Data) {
			d.notice(dirRef{ks, op.Key}, results[i].Size)
		}
		if p, ok := fslayout.StapleOf(op.Key); ok && op.Kind == txn.OpWrite {
			d.queueHome(ks, p)
		}
	}
}

// removesEntry reports whether b is a run of well-formed directory log
// records that holds a removal.
func removesEntry(b []byte) bool {
	removes := false
	for len(b) > 0 {
		if len(b) < fslayout.RecordHeaderBytes {
			return false
		}
		n := fslayout.RecordHeaderBytes + int(binary.LittleEndian.Uint16(b[2:]))
		if (b[0] != fslayout.RecordAdd && b[0] != fslayout.RecordRemove) || len(b) < n {
			return false
		}
		removes = removes || b[0] == fslayout.RecordRemove
		b = b[n:]
	}
	return removes
}

// notice queues a check of r, now size bytes, if it is large enough to
// need compaction and grew by 1/dirCompactGrowthDiv since it was last
// noticed or checked.
func (d *dirCompactor) notice(r dirRef, size uint64) {
	size = logBytes(size)
	if size < dirCompactCheckBytesMin {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	last, ok := d.seen[r]
	if ok && size < last {
		// Compacted since (by another node) or truncated: grow from here.
		d.seen[r] = size
		return
	}
	if ok && size < last+last/dirCompactGrowthDiv {
		return
	}
	if !d.enqueue(dirJob{dirRef: r}) {
		return
	}
	if !ok && len(d.seen) >= dirCompactSeenMax {
		for k := range d.seen {
			delete(d.seen, k)
			break
		}
	}
	d.seen[r] = size
}

// queueHome queues the homing of the staple at path p of keyspace ks,
// unless one is queued already or homing is off.
func (d *dirCompactor) queueHome(ks, p string) {
	if !d.running.Load() || d.homeBytesMax == 0 {
		return
	}
	r := dirRef{ks, p}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.homing[r] || len(d.homing) >= dirCompactQueueLen {
		return
	}
	if d.enqueue(dirJob{dirRef: r, kind: jobHome}) {
		d.homing[r] = true
	}
}

// enqueue queues j, or counts it dropped if the queue is full.
func (d *dirCompactor) enqueue(j dirJob) bool {
	select {
	case d.queue <- j:
		return true
	default:
		d.countJob(j, dirDropped)
		return false
	}
}

// logBytes is about the header and log bytes of a directory blob of size
// bytes, what notice and remember weigh: its hole left out if it may have
// one (a version-1 log past fslayout.DirLogOffset is counted short, which
// only delays its next check).
func logBytes(size uint64) uint64 {
	if size >= fslayout.DirLogOffset {
		return size - (fslayout.DirLogOffset - fslayout.HeaderBytes)
	}
	return size
}

// remember records r's size after a check; forget makes its next removal
// queue it.
func (d *dirCompactor) remember(r dirRef, size uint64) {
	size = logBytes(size)
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.seen[r]; ok || len(d.seen) < dirCompactSeenMax {
		d.seen[r] = size
	}
}

func (d *dirCompactor) forget(r dirRef) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.seen, r)
}

// run checks the queued logs one at a time, paced, until ctx ends, and
// looks for orphaned hidden blobs every d.sweep.every.
func (d *dirCompactor) run(ctx context.Context) {
	defer close(d.done)
	tick := time.NewTicker(d.sweep.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			d.scanHidden()
		case j := <-d.queue:
			n := d.check(ctx, j)
			pause := max(dirCompactPause, time.Duration(float64(n)/dirCompactBytesPerSecond*float64(time.Second)))
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
		}
	}
}

// check runs one check of j, counts its outcome and returns the bytes it
// read and wrote.
func (d *dirCompactor) check(ctx context.Context, j dirJob) int {
	cctx, cancel := context.WithTimeout(ctx, dirCompactTimeout)
	defer cancel()
	var c dirCheck
	var err error
	n := 0
	if j.kind == jobHome {
		d.mu.Lock()
		delete(d.homing, j.dirRef) // noticed again from here on
		d.mu.Unlock()
	}
	for try, backoff := 0, dirCompactTryBackoff; ; try, backoff = try+1, 2*backoff {
		switch j.kind {
		case jobHome:
			c, err = d.s.homeStaple(cctx, j.dirRef, d.homeBytesMax)
		case jobSweep:
			c, err = d.s.sweepHidden(cctx, j.dirRef)
		default:
			c, err = d.s.compactDir(cctx, j.dirRef, d.afterRead)
		}
		n += c.bytes
		if ctx.Err() != nil && err != nil {
			return n // stopping: not counted
		}
		d.countJob(j, c.outcome)
		// A hidden blob that changed is in use: not tried again.
		if c.outcome != dirConflict || j.kind == jobSweep || try+1 == dirCompactTriesMax {
			break
		}
		select {
		case <-cctx.Done():
		case <-time.After(backoff):
		}
	}
	switch {
	case j.kind == jobHome && c.outcome == dirConflict && j.round+1 < dirCompactRoundsMax:
		next := dirJob{dirRef: j.dirRef, round: j.round + 1, kind: jobHome}
		time.AfterFunc(dirCompactRetryDelay<<j.round, func() {
			if d.running.Load() {
				d.enqueue(next)
			}
		})
		return n
	case j.kind == jobHome:
		if c.outcome == dirFailed {
			d.s.log.Debug("staple homing failed", "keyspace", j.ks, "path", j.key, "err", err)
		}
		return n
	case j.kind == jobSweep:
		if c.outcome == dirFailed {
			d.s.log.Debug("hidden blob sweep failed", "keyspace", j.ks, "key", j.key, "err", err)
		}
		return n
	}
	if d.afterCheck != nil {
		d.afterCheck(j.dirRef, c)
	}
	switch c.outcome {
	case dirCompacted, dirSkipped:
		d.remember(j.dirRef, c.size)
		if c.outcome == dirCompacted {
			d.s.log.Debug("directory log compacted", "keyspace", j.ks, "key", j.key,
				"bytes_before", c.read, "bytes_after", c.size)
		}
	case dirConflict:
		if j.round+1 < dirCompactRoundsMax {
			next := dirJob{dirRef: j.dirRef, round: j.round + 1}
			time.AfterFunc(dirCompactRetryDelay<<j.round, func() {
				if d.running.Load() {
					d.enqueue(next)
				}
			})
		} else {
			d.forget(j.dirRef)
		}
	case dirFailed:
		d.forget(j.dirRef)
		d.s.log.Debug("directory log check failed", "keyspace", j.ks, "key", j.key, "err", err)
	}
	return n
}

// dirCheck is what one check did.
type dirCheck struct {
	outcome string
	size    uint64 // the blob's size after the check
	read    int    // the blob's size as read
	bytes   int    // bytes read and written
}

// compactDir checks the directory log r and compacts it if it needs it,
// in a commit conditional on the version it read. afterRead, if not nil,
// runs between the read and the commit.
func (s *Service) compactDir(ctx context.Context, r dirRef, afterRead func(dirRef)) (dirCheck, error) {
	b, version, err := s.readWhole(ctx, r, dirCompactReadBytesMax)
	c := dirCheck{outcome: dirSkipped, size: uint64(len(b)), read: len(b), bytes: len(b)}
	switch {
	case errors.Is(err, errs.ErrNotFound), errors.Is(err, errs.ErrTooLarge):
		return c, nil
	case errors.Is(err, errs.ErrConflict):
		c.outcome = dirConflict
		return c, err
	case err != nil:
		c.outcome = dirFailed
		return c, err
	}
	if a, err := fslayout.DecodeHeader(r.key, b, uint64(len(b))); err != nil || a.Kind != fslayout.KindDir {
		return c, nil // not a TýrFS directory: not ours to touch
	}
	start := fslayout.LogStart(b)
	log, err := fslayout.DirLogOf(r.key, b)
	var l fslayout.DirLog
	if err == nil {
		l, err = fslayout.ReplayLog(r.key, log)
	}
	if err != nil {
		s.log.Warn("directory log left uncompacted", "keyspace", r.ks, "key", r.key, "err", err)
		return c, nil
	}
	if !l.NeedsCompaction() {
		return c, nil
	}
	compacted := l.Compacted()
	if len(compacted) > dirCompactWriteBytesMax {
		return c, nil
	}
	// Invariant 3: the compacted log replays to the same entries, in the
	// same order.
	if cl, err := fslayout.ReplayLog(r.key, compacted); err != nil || !slices.Equal(cl.List(), l.List()) {
		c.outcome = dirFailed
		return c, fmt.Errorf("%w: compaction of %q would change its entries (%v)", errs.ErrCorruption, r.key, err)
	}
	if afterRead != nil {
		afterRead(r)
	}
	req := &tyrpb.CommitRequest{Keyspace: []byte(r.ks),
		Ops:   []*tyrpb.Op{{Key: []byte(r.key), Kind: &tyrpb.Op_Truncate{Truncate: &tyrpb.TruncateOp{Size: start}}}},
		Reads: []*tyrpb.ReadCheck{{Key: []byte(r.key), Version: version}}}
	for off := 0; off < len(compacted); off += limits.PayloadBytesMax {
		part := compacted[off:min(len(compacted), off+limits.PayloadBytesMax)]
		req.Ops = append(req.Ops, &tyrpb.Op{Key: []byte(r.key),
			Kind: &tyrpb.Op_Write{Write: &tyrpb.WriteOp{Offset: start + uint64(off), Data: part}}})
	}
	c.bytes += len(compacted)
	results, err := s.commitChecked(ctx, req)
	if err != nil {
		c.outcome = outcomeOf(err)
		return c, err
	}
	c.outcome, c.size = dirCompacted, start+uint64(len(compacted))
	if got := results[len(req.Ops)-1].Size; got != c.size {
		s.log.Error("compacted directory log has an unexpected size", "keyspace", r.ks, "key", r.key,
			"size", got, "want", c.size)
	}
	return c, nil
}

// commitChecked commits req, a commit with read checks, through the path a
// client's commit takes.
func (s *Service) commitChecked(ctx context.Context, req *tyrpb.CommitRequest) ([]txn.Result, error) {
	ops, err := DecodeCommit(req)
	if err != nil {
		return nil, err
	}
	ks, err := s.engine.Acquire(string(req.GetKeyspace()))
	if err != nil {
		return nil, err
	}
	defer ks.Release()
	return s.commit(ctx, ks, ops, nil)
}

// outcomeOf is the outcome of a check whose commit failed with err: a
// conflict (an append or write came first), or a failure.
func outcomeOf(err error) string {
	if errors.Is(err, errs.ErrConflict) {
		return dirConflict
	}
	return dirFailed
}

// readWhole reads the whole blob r as a client's read would, through
// Service.Read: a consistent first part (so the size and version are the
// blob's latest), then the rest at that version. ErrTooLarge for a blob
// above bytesMax.
func (s *Service) readWhole(ctx context.Context, r dirRef, bytesMax uint64) ([]byte, uint64, error) {
	read := func(off, n, version uint64) (*tyrpb.ReadResponse, error) {
		return s.readPart(ctx, r, off, n, version)
	}
	first, err := read(0, limits.PayloadBytesMax, 0)
	if err != nil {
		return nil, 0, err
	}
	size, version := first.GetSize(), first.GetVersion()
	if size > bytesMax {
		return nil, 0, fmt.Errorf("%w: blob %q of %d bytes", errs.ErrTooLarge, r.key, size)
	}
	b := make([]byte, 0, size)
	b = append(b, first.GetData()...)
	for uint64(len(b)) < size {
		resp, err := read(uint64(len(b)), min(size-uint64(len(b)), limits.PayloadBytesMax), version)
		if err != nil {
			return nil, 0, err
		}
		if len(resp.GetData()) == 0 {
			return nil, 0, fmt.Errorf("%w: blob %q: no bytes at %d of %d", errs.ErrConflict, r.key, len(b), size)
		}
		b = append(b, resp.GetData()...)
	}
	return b, version, nil
}

// readPart reads n bytes of blob r from off at version (0: the latest,
// consistent) as a client's read would, through Service.Read, with the
// error's class.
func (s *Service) readPart(ctx context.Context, r dirRef, off, n, version uint64) (*tyrpb.ReadResponse, error) {
	resp, err := s.Read(ctx, &tyrpb.ReadRequest{Keyspace: []byte(r.ks), Key: []byte(r.key), Offset: off,
		Length: n, Version: version, Consistent: version == 0})
	if err != nil {
		if st, ok := status.FromError(err); ok {
			if class := errs.Class(st.Code()); class != nil {
				return nil, fmt.Errorf("%w: %s", class, st.Message())
			}
		}
		return nil, err
	}
	return resp, nil
}

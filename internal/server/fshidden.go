package server

// The sweep of orphaned TýrFS hidden blobs (internal/fslayout, invariant
// 5). When a create or rename needs the name of a staple's data blob, the
// client copies the data to a hidden blob (fslayout.HiddenKey), a commit
// per part, and then re-points the staple to it in one commit that also
// gives the copy its back name. A client that dies between the copy and
// that commit, or whose cleanup fails, leaves a hidden blob no staple
// points to and with no back name: an orphan, the one state outside
// invariant 5, holding space nothing can reach.
//
// Every hiddenSweep.every, the worker that compacts directory logs
// (fscompact.go) lists, in each keyspace's local store, up to
// hiddenScanBatch blobs named as hidden blobs, continuing where the last
// round stopped, and queues those this node serves reads of (one node
// per blob) and that nothing changed for hiddenSweep.grace. A sweep of one
// reads the blob's header and its back name through the read path a
// client's read takes; a blob with a TýrFS header marked moved out and no
// back name is deleted, in a commit with a read check of the version read
// and of the back name's absence. So:
//
//  1. A hidden blob with a back name is never deleted: a re-pointing
//     commit that lands first fails the sweep's check of the absence.
//  2. A copy still being made is never pointed to once swept: each part
//     of the copy after the first, and the re-pointing commit, check the
//     copy's version (tyrfs, copyVersion and relocate), so a sweep that
//     lands first fails them and the client copies again.
//  3. A blob named like a hidden blob that is no TýrFS data blob (no
//     header, or not marked moved out) is left alone.
//
// The grace only spares the work of a copy being made: safety comes from
// the checks.

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/fslayout"
	"github.com/tyrstore/tyr/internal/storage"
)

// Limits of the sweep.
const (
	// hiddenSweepEvery is how often a node looks for orphans.
	hiddenSweepEvery = time.Minute
	// HiddenGraceDefault is how long a hidden blob stays unchanged before
	// a sweep looks at it (tyr server --fs-sweep-grace): far above the
	// time between two parts of a copy.
	HiddenGraceDefault = 10 * time.Minute
	// hiddenScanBatch bounds the blobs one round lists per keyspace.
	hiddenScanBatch = 256
)

var hiddenSweepsDesc = prometheus.NewDesc("tyr_fs_hidden_sweeps_total",
	"TýrFS hidden blobs this node checked for orphans, by outcome: reclaimed (an orphan, deleted), skipped "+
		"(in use, gone, or no TýrFS data blob), conflict (changed meanwhile), dropped (queue full) or failed.",
	[]string{"outcome"}, nil)

// hiddenSweep is the state of a node's sweep. every and grace are set
// before the worker starts (defaults: hiddenSweepEvery or the grace if
// shorter, HiddenGraceDefault);
// cursor is the worker's alone.
type hiddenSweep struct {
	every, grace time.Duration
	counts       [5]atomic.Uint64 // by index in dirOutcomes
	// cursor is, per keyspace, the last key the last round listed, while
	// more may follow.
	cursor map[string]string
}

func (h *hiddenSweep) defaults() {
	if h.grace <= 0 {
		h.grace = HiddenGraceDefault
	}
	if h.every <= 0 {
		// A shorter grace (tyr server --fs-sweep-grace) is looked for
		// as often.
		h.every = min(hiddenSweepEvery, h.grace)
	}
	h.cursor = map[string]string{}
}

// scanHidden lists the next hidden blobs of each keyspace and queues a
// sweep of those this node serves reads of that stayed unchanged for the
// grace.
func (d *dirCompactor) scanHidden() {
	now := time.Now()
	d.s.engine.Each(func(ks *storage.Keyspace) {
		infos, more, err := ks.Store.List(fslayout.HiddenPrefix, d.sweep.cursor[ks.Name], hiddenScanBatch)
		if err != nil {
			d.s.log.Debug("hidden blob scan failed", "keyspace", ks.Name, "err", err)
			return
		}
		for _, b := range infos {
			if fslayout.IsHiddenKey(b.Key) && now.Sub(b.Modified) >= d.sweep.grace && d.s.servesReads(ks, b.Key) {
				d.enqueue(dirJob{dirRef: dirRef{ks.Name, b.Key}, kind: jobSweep})
			}
		}
		if more && len(infos) > 0 {
			d.sweep.cursor[ks.Name] = infos[len(infos)-1].Key
		} else {
			delete(d.sweep.cursor, ks.Name)
		}
	})
}

// servesReads reports whether this node serves reads of key (one node
// of its replicas; every key on a lone service).
func (s *Service) servesReads(ks *storage.Keyspace, key string) bool {
	if s.node == nil {
		return true
	}
	target, err := s.node.ReadTarget(ks.Name, int(ks.Config.Replication), key)
	return err == nil && target == s.node.Self()
}

// sweepHidden deletes the hidden blob r.key if it is an orphan: a TýrFS
// data blob with no back name.
func (s *Service) sweepHidden(ctx context.Context, r dirRef) (dirCheck, error) {
	c := dirCheck{outcome: dirSkipped}
	head, err := s.readPart(ctx, r, 0, fslayout.HeaderBytes, 0)
	if err != nil {
		return c, skipMissing(&c, err)
	}
	h := head.GetData()
	c.bytes = len(h)
	if _, err := fslayout.DecodeHeader(r.key, h, head.GetSize()); err != nil || fslayout.Flags(h) != fslayout.FlagMovedOut {
		return c, nil // invariant 3
	}
	back := fslayout.BackKey(r.key)
	switch _, err := s.readPart(ctx, dirRef{r.ks, back}, 0, 0, 0); {
	case err == nil:
		return c, nil // a staple's data blob
	case !errors.Is(err, errs.ErrNotFound):
		return c, skipMissing(&c, err)
	}
	req := &tyrpb.CommitRequest{Keyspace: []byte(r.ks),
		Ops:   []*tyrpb.Op{{Key: []byte(r.key), Kind: &tyrpb.Op_Delete{Delete: &tyrpb.DeleteOp{}}}},
		Reads: []*tyrpb.ReadCheck{{Key: []byte(r.key), Version: head.GetVersion()}, {Key: []byte(back), Version: 0}}}
	if _, err := s.commitChecked(ctx, req); err != nil {
		c.outcome = outcomeOf(err)
		return c, err
	}
	c.outcome = dirCompacted
	s.log.Info("orphaned hidden blob reclaimed", "keyspace", r.ks, "key", r.key, "bytes", head.GetSize())
	return c, nil
}

package server

// Background homing of TýrFS staples (internal/fslayout, invariant 5). A
// rename of a large file leaves its data where it was, behind a staple at
// the new path; reading a staple costs four requests where a plain file
// costs one. So the data is brought home after the rename: when a commit
// this node coordinated writes a staple's pointer (the blob
// fslayout.PointerKey(P)), or serves a fetch of a staple, the staple at P
// is queued, once, for the worker that compacts directory logs
// (fscompact.go), on the same queue and pacing.
//
// A homing reads the staple, its pointer, its data blob and the data
// blob's back name, each through the read path a client's read takes (so
// each read is the blob's latest version), and then commits, with a read
// check of each of those four versions: the data written into the
// staple's blob after its header, the header's flags cleared, and the
// pointer, the data blob and the back name deleted. A client's change to
// any of them in between (a write through the staple, a rename, the data
// blob's name freed) fails the commit as a conflict and nothing is
// written; the homing is queued again later, as a compaction is. The
// file is then a plain file again: invariant 5 holds before and after.
//
// One commit carries the whole file, so only data of up to
// --fs-home-bytes (at most fslayout.HomeBytesLimit) comes home; a larger
// file stays stapled. A queued homing lives in memory: a node that stops
// forgets it, until a fetch of the staple queues it again.

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/fslayout"
	"github.com/tyrstore/tyr/internal/limits"
)

var stapleHomingsDesc = prometheus.NewDesc("tyr_fs_staple_homings_total",
	"TýrFS staples this node checked to bring their data home, by outcome: homed, skipped (no staple, "+
		"or its data above --fs-home-bytes), conflict (a client changed it first; tried again later), dropped "+
		"(queue full) or failed.",
	[]string{"outcome"}, nil)

// doneAs names outcome o as a job's whose success is named done
// ("homed" for a homing, "reclaimed" for a sweep).
func doneAs(done, o string) string {
	if o == dirCompacted {
		return done
	}
	return o
}

// homeStaple brings the data of the staple at r.key home if it has at most
// bytesMax bytes.
func (s *Service) homeStaple(ctx context.Context, r dirRef, bytesMax uint64) (dirCheck, error) {
	c := dirCheck{outcome: dirSkipped}
	read := func(key string, max uint64) ([]byte, uint64, error) {
		b, v, err := s.readWhole(ctx, dirRef{r.ks, key}, max)
		c.bytes += len(b)
		return b, v, err
	}
	staple, sv, err := read(r.key, fslayout.HeaderBytes)
	if err != nil || len(staple) != fslayout.HeaderBytes || fslayout.Flags(staple) != fslayout.FlagStapled {
		return c, skipMissing(&c, err)
	}
	ptr, pv, err := read(fslayout.PointerKey(r.key), limits.KeyBytesMax)
	if err != nil {
		return c, skipMissing(&c, err)
	}
	dataKey := string(ptr)
	// The data blob's size first: a staple too large to bring home,
	// noticed at every fetch, costs a small read each time.
	if resp, err := s.readPart(ctx, dirRef{r.ks, dataKey}, 0, 0, 0); err != nil || resp.GetSize() > fslayout.HeaderBytes+bytesMax {
		return c, skipMissing(&c, err)
	}
	data, dv, err := read(dataKey, fslayout.HeaderBytes+bytesMax)
	if err != nil {
		return c, skipMissing(&c, err)
	}
	back, bv, err := read(fslayout.BackKey(dataKey), limits.KeyBytesMax)
	if err != nil {
		return c, skipMissing(&c, err)
	}
	if len(data) < fslayout.HeaderBytes || fslayout.Flags(data) != fslayout.FlagMovedOut || string(back) != r.key {
		// Invariant 5 says this cannot be: a rename in between, read
		// half before and half after, is the one way.
		c.outcome = dirConflict
		return c, fmt.Errorf("%w: staple %q: pointer, data blob and back name disagree", errs.ErrConflict, r.key)
	}
	fslayout.SetFlags(staple, 0)
	key := []byte(r.key)
	req := &tyrpb.CommitRequest{Keyspace: []byte(r.ks),
		Ops: []*tyrpb.Op{{Key: key, Kind: &tyrpb.Op_Write{Write: &tyrpb.WriteOp{Data: staple}}}},
		Reads: []*tyrpb.ReadCheck{{Key: key, Version: sv}, {Key: []byte(fslayout.PointerKey(r.key)), Version: pv},
			{Key: []byte(dataKey), Version: dv}, {Key: []byte(fslayout.BackKey(dataKey)), Version: bv}}}
	for off := fslayout.HeaderBytes; off < len(data); off += limits.PayloadBytesMax {
		req.Ops = append(req.Ops, &tyrpb.Op{Key: key, Kind: &tyrpb.Op_Write{Write: &tyrpb.WriteOp{
			Offset: uint64(off), Data: data[off:min(len(data), off+limits.PayloadBytesMax)]}}})
	}
	for _, k := range []string{fslayout.PointerKey(r.key), dataKey, fslayout.BackKey(dataKey)} {
		req.Ops = append(req.Ops, &tyrpb.Op{Key: []byte(k), Kind: &tyrpb.Op_Delete{Delete: &tyrpb.DeleteOp{}}})
	}
	c.bytes += len(data)
	if _, err := s.commitChecked(ctx, req); err != nil {
		c.outcome = outcomeOf(err)
		return c, err
	}
	c.outcome, c.size = dirCompacted, uint64(len(data))
	return c, nil
}

// skipMissing sets the outcome of a homing whose read failed with err:
// skipped for a blob gone or too large (or err nil: no staple), a
// conflict for a version gone meanwhile, failed otherwise.
func skipMissing(c *dirCheck, err error) error {
	switch {
	case err == nil, errors.Is(err, errs.ErrNotFound), errors.Is(err, errs.ErrTooLarge):
		c.outcome = dirSkipped
		return nil
	case errors.Is(err, errs.ErrConflict):
		c.outcome = dirConflict
	default:
		c.outcome = dirFailed
	}
	return err
}

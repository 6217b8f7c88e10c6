package tyrfs

// Staples (fslayout, invariant 5): a renamed large file is a header at its
// new path, a pointer to the blob still holding its data, and that data
// blob, marked moved out, with a back name. This file holds what every call
// needs to follow a staple, and the freeing of a data blob's name.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/fslayout"
	"github.com/tyrstore/tyr/internal/limits"
)

// errRaced: a staple, its pointer or its data blob changed between two
// reads of one call (renamed, brought home, its name freed); the call
// starts again, at most racesMax times, then fails with EAGAIN.
var errRaced = errors.New("tyrfs: a staple changed meanwhile")

const racesMax = 32

// retryRaces runs fn until it ends other than with errRaced.
func retryRaces[T any](p string, fn func() (T, error)) (T, error) {
	for range racesMax {
		v, err := fn()
		if !errors.Is(err, errRaced) {
			return v, err
		}
	}
	var zero T
	return zero, errnof(syscall.EAGAIN, "%s: its staple kept changing", p)
}

// zeroFlags is the flags of a plain blob, for the compare-and-swap every
// change to a file carries.
var zeroFlags = []byte{0, 0}

// flagsOf returns the flags of a blob's header, 0 if b is too short to hold
// one (DecodeHeader refuses such a blob where it matters).
func flagsOf(b []byte) uint16 {
	if len(b) < HeaderBytes {
		return 0
	}
	return fslayout.Flags(b)
}

// pointer reads the data blob's key of the staple at clean path p, and
// the pointer's version. A missing pointer is a race: the staple went.
func (f *FS) pointer(ctx context.Context, p string) (string, uint64, error) {
	b, info, err := f.c.ReadPart(ctx, f.ks, fslayout.PointerKey(p), 0, limits.KeyBytesMax)
	if errors.Is(err, client.ErrNotFound) {
		return "", 0, errRaced
	}
	if err != nil {
		return "", 0, err
	}
	if len(b) == 0 {
		return "", 0, fmt.Errorf("%w: the pointer of %q is empty", ErrCorrupt, p)
	}
	return string(b), info.Version, nil
}

// viaPointer calls read with the key of the data blob of the staple at p,
// and keeps what it read only if the pointer is unchanged after: a data
// blob is re-pointed before its name is reused, so the bytes read were the
// staple's. A data blob gone meanwhile (brought home) is a race too.
func (f *FS) viaPointer(ctx context.Context, p string, read func(data string) error) error {
	data, v, err := f.pointer(ctx, p)
	if err != nil {
		return err
	}
	if err := read(data); errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrConflict) {
		return errRaced
	} else if err != nil {
		return err
	}
	_, again, err := f.pointer(ctx, p)
	if err != nil {
		return err
	}
	if again != v {
		return errRaced
	}
	return nil
}

// readWhole reads all of blob key at one version: its first part in one
// request, the rest at the version that found. A version gone meanwhile is
// a conflict.
func (f *FS) readWhole(ctx context.Context, key string) ([]byte, client.BlobInfo, error) {
	b, info, err := f.c.ReadPart(ctx, f.ks, key, 0, client.PayloadBytesMax)
	if err != nil || uint64(len(b)) >= info.Size {
		return b, info, err
	}
	return f.readRest(ctx, key, b, info, nil)
}

// readRest completes b, the first bytes of blob key as read at info's
// version, with the rest at that version: in buf when the blob fits in
// its capacity (b may lie at its start already), else in new memory.
func (f *FS) readRest(ctx context.Context, key string, b []byte, info client.BlobInfo, buf []byte) ([]byte, client.BlobInfo, error) {
	var whole []byte
	if uint64(cap(buf)) >= info.Size {
		whole = buf[:info.Size]
	} else {
		whole = make([]byte, info.Size)
	}
	if len(b) > 0 && &whole[0] != &b[0] {
		copy(whole, b)
	}
	err := f.c.ReadVersion(ctx, f.ks, key, info.Version, uint64(len(b)), whole[len(b):])
	return whole, info, err
}

// fileTx runs fn in a transaction over the file at clean path p, with the
// blob holding its data and the blob holding its header: the file's own
// blob for both, or a staple's data blob and the staple. ENOENT if p is no
// file (a data blob's path included).
func (f *FS) fileTx(ctx context.Context, p string, fn func(tx *client.Tx, data, meta string) error) (*client.Tx, error) {
	key := fslayout.FileKey(p)
	var last *client.Tx
	_, err := retryRaces(p, func() (struct{}, error) {
		err := f.c.RunTx(ctx, f.ks, func(tx *client.Tx) error {
			last = tx
			h, err := tx.Read(ctx, key, 0, HeaderBytes)
			if err != nil {
				return err
			}
			switch fl := flagsOf(h); {
			case fl&fslayout.FlagMovedOut != 0:
				return errnof(syscall.ENOENT, "%s", p)
			case fl&fslayout.FlagStapled != 0:
				d, err := tx.Read(ctx, fslayout.PointerKey(p), 0, limits.KeyBytesMax)
				if err != nil {
					return err
				}
				return fn(tx, string(d), key)
			}
			return fn(tx, key, key)
		}, txOptions)
		if errors.Is(err, client.ErrNotFound) {
			// A blob the transaction read (a staple's pointer or data
			// blob) went before its commit applied: the commit can fail
			// an op as not found rather than as a conflict. If the file
			// is still there, the call starts again.
			if _, serr := f.stat(ctx, key); serr == nil {
				return struct{}{}, errRaced
			}
			return struct{}{}, errnof(syscall.ENOENT, "%s", p)
		}
		return struct{}{}, err
	})
	return last, err
}

// commitFile commits the ops change returns for the file at clean path p:
// ops on its data blob and on its header's blob, both the file's own blob
// for a plain file. In one request for a plain file, carrying a
// compare-and-swap of its flags (zero), so that the ops never land in a
// staple or a data blob; that failing, in a transaction that follows the
// staple. The results are change's ops'.
func (f *FS) commitFile(ctx context.Context, p string, change func(data, meta string) []client.Op) ([]client.OpResult, error) {
	r, _, err := f.commitFileFrom(ctx, p, 0, change)
	return r, err
}

// commitFileFrom is commitFile for a caller that knows a version of the
// file, base (0: none): the one request then also checks that the file is
// still at base, and the version returned is the file's after the commit,
// which changed it from base by change's ops alone. It is 0 when base is,
// when the file was no longer at base (the request is then sent again
// without the check), and for a staple.
func (f *FS) commitFileFrom(ctx context.Context, p string, base uint64, change func(data, meta string) []client.Op) ([]client.OpResult, uint64, error) {
	key := fslayout.FileKey(p)
	ops := append([]client.Op{client.CASOp(key, fslayout.OffFlags, zeroFlags, zeroFlags)}, change(key, key)...)
	var checks []client.Check
	if base != 0 {
		checks = []client.Check{{Key: key, Version: base}}
	}
	r, err := f.c.CommitIf(ctx, f.ks, checks, ops...)
	if err != nil && base != 0 && errors.Is(err, client.ErrConflict) {
		// No longer at base, or a staple: the request without the check.
		base = 0
		r, err = f.c.Commit(ctx, f.ks, ops...)
	}
	if err == nil {
		var version uint64
		if base != 0 {
			version = r[0].Version
		}
		return r[1:], version, nil
	}
	if !errors.Is(err, client.ErrConflict) {
		return nil, 0, err
	}
	tx, err := f.fileTx(ctx, p, func(tx *client.Tx, data, meta string) error {
		return tx.Do(change(data, meta)...)
	})
	if err != nil {
		return nil, 0, err
	}
	return tx.Results(), 0, nil
}

// stapleAttr completes a, the attributes in the header of the staple at p,
// with the size of its data.
func (f *FS) stapleAttr(ctx context.Context, p string, a Attr) (Attr, error) {
	err := f.viaPointer(ctx, p, func(data string) error {
		info, err := f.c.Stat(ctx, f.ks, data)
		if err != nil {
			return err
		}
		if info.Size < HeaderBytes {
			return fmt.Errorf("%w: %q has no header", ErrCorrupt, data)
		}
		a.Size = info.Size - HeaderBytes
		return nil
	})
	return a, err
}

// freeName makes blob key, a staple's data blob, free for a new file: its
// data is copied, in parts, at one version, to a hidden blob, then one
// commit re-points the staple to it, checking that version, and deletes
// key. Nil also when key turns out free, or no data blob, meanwhile: the
// caller tries again what needed the name.
func (f *FS) freeName(ctx context.Context, key string) error {
	_, err := retryRaces(key, func() (struct{}, error) { return struct{}{}, f.relocate(ctx, key) })
	return err
}

func (f *FS) relocate(ctx context.Context, key string) error {
	h, info, err := f.c.ReadPart(ctx, f.ks, key, 0, HeaderBytes)
	if errors.Is(err, client.ErrNotFound) || err == nil && flagsOf(h)&fslayout.FlagMovedOut == 0 {
		return nil
	}
	if err != nil {
		return err
	}
	back, binfo, err := f.c.ReadPart(ctx, f.ks, fslayout.BackKey(key), 0, limits.KeyBytesMax)
	if errors.Is(err, client.ErrNotFound) {
		return errRaced
	}
	if err != nil {
		return err
	}
	staple := string(back)
	ptr, pinfo, err := f.c.ReadPart(ctx, f.ks, fslayout.PointerKey(staple), 0, limits.KeyBytesMax)
	if errors.Is(err, client.ErrNotFound) || err == nil && string(ptr) != key {
		return errRaced
	}
	if err != nil {
		return err
	}
	hidden := fslayout.HiddenKey(rand.Uint64())
	hv, err := f.copyVersion(ctx, key, info, hidden)
	if err != nil {
		f.dropHidden(ctx, hidden)
		if errors.Is(err, client.ErrConflict) || errors.Is(err, client.ErrNotFound) {
			return errRaced
		}
		return err
	}
	if f.afterCopy != nil {
		f.afterCopy(hidden)
	}
	pk, bk := fslayout.PointerKey(staple), fslayout.BackKey(hidden)
	_, err = f.c.CommitIf(ctx, f.ks,
		// The copy's version too: a copy taken for an orphan meanwhile
		// (the servers' sweep, internal/server/fshidden.go) is never
		// pointed to.
		[]client.Check{{Key: key, Version: info.Version}, {Key: pk, Version: pinfo.Version}, {Key: fslayout.BackKey(key), Version: binfo.Version},
			{Key: hidden, Version: hv}},
		client.TruncateOp(pk, 0), client.WriteOp(pk, 0, []byte(hidden), false),
		client.DeleteOp(key), client.DeleteOp(fslayout.BackKey(key)),
		client.CreateOp(bk), client.WriteOp(bk, 0, []byte(staple), false))
	if err != nil {
		f.dropHidden(ctx, hidden)
		if errors.Is(err, client.ErrConflict) || errors.Is(err, client.ErrNotFound) {
			return errRaced
		}
	}
	return err
}

// copyVersion copies version info.Version of blob key to the new blob to,
// a commit per part, and returns the copy's version. A part after the
// first writes only if the copy is still the one the part before left.
func (f *FS) copyVersion(ctx context.Context, key string, info client.BlobInfo, to string) (uint64, error) {
	buf := make([]byte, min(info.Size, client.PayloadBytesMax))
	var version uint64
	for off := uint64(0); off == 0 || off < info.Size; off += uint64(len(buf)) {
		part := buf[:min(uint64(len(buf)), info.Size-off)]
		if err := f.c.ReadVersion(ctx, f.ks, key, info.Version, off, part); err != nil {
			return 0, err
		}
		ops := []client.Op{client.WriteOp(to, off, part, false)}
		if off == 0 {
			ops = append([]client.Op{client.CreateOp(to)}, ops...)
		}
		res, err := f.c.CommitIf(ctx, f.ks, []client.Check{{Key: to, Version: version}}, ops...)
		if err != nil {
			return 0, err
		}
		version = res[len(res)-1].Version
	}
	return version, nil
}

// dropHidden deletes a hidden copy that no staple came to point to. Best
// effort: a copy left by a failure here, or by a client that died between
// copy and commit, is an orphan, which the servers sweep
// (internal/server/fshidden.go).
func (f *FS) dropHidden(ctx context.Context, hidden string) {
	_, _ = f.c.Commit(ctx, f.ks, client.DeleteOp(hidden))
}

// stapleOps returns the ops that make the file at clean path from, whose
// header is h (with the ctime to set), a staple at clean path to, in a
// rename's commit. data is the blob with the file's data: from's own blob
// for a plain file (then marked moved out), else its pointer's target. A
// staple renamed onto its own data blob's path comes home instead: the
// data blob becomes the plain file. The caller has emptied to's blobs.
func stapleOps(from, to string, h []byte, data string, stapled bool) []client.Op {
	fk, tk := fslayout.FileKey(from), fslayout.FileKey(to)
	h = append([]byte(nil), h[:HeaderBytes]...)
	if data == tk { // home
		fslayout.SetFlags(h, 0)
		return []client.Op{client.WriteOp(tk, 0, h, false), client.DeleteOp(fk),
			client.DeleteOp(fslayout.PointerKey(from)), client.DeleteOp(fslayout.BackKey(data))}
	}
	var ops []client.Op
	if stapled {
		ops = append(ops, client.DeleteOp(fk), client.DeleteOp(fslayout.PointerKey(from)),
			client.TruncateOp(fslayout.BackKey(data), 0))
	} else {
		out := append([]byte(nil), h...)
		fslayout.SetFlags(out, fslayout.FlagMovedOut)
		ops = append(ops, client.WriteOp(fk, 0, out, false), client.CreateOp(fslayout.BackKey(data)))
	}
	fslayout.SetFlags(h, fslayout.FlagStapled)
	pk := fslayout.PointerKey(to)
	return append(ops, client.WriteOp(tk, 0, h, true),
		client.CreateOp(pk), client.WriteOp(pk, 0, []byte(data), false),
		client.WriteOp(fslayout.BackKey(data), 0, []byte(to), false))
}

// dropStapleOps returns the ops deleting the staple at clean path p, whose
// data blob is data, with its pointer, data blob and back name.
func dropStapleOps(p, data string) []client.Op {
	return []client.Op{client.DeleteOp(fslayout.FileKey(p)), client.DeleteOp(fslayout.PointerKey(p)),
		client.DeleteOp(data), client.DeleteOp(fslayout.BackKey(data))}
}

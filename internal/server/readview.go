package server

import (
	"context"

	"github.com/tyrstore/tyr/internal/mvcc"
	"github.com/tyrstore/tyr/internal/storage"
)

// readViews are the views (mvcc.View) a data connection reads a run of
// pipelined requests from, one per keyspace read. A read may be answered
// from any state of the store taken after it arrived, so a view serves the
// requests that had all arrived when it was taken: serveData counts their
// bytes (budget) and drops the views before the first request past them,
// before a commit, and when the run's answers leave. Reads of a run in key
// order, a batch of fetches of one directory's files, then seek forward
// through one view rather than each opening the LSM anew.
type readViews struct {
	engine *storage.Engine
	// budget is how many bytes of requests after the one being served
	// had arrived when the views were taken; negative with no views.
	budget int
	held   map[string]heldView
}

type heldView struct {
	ks *storage.Keyspace
	v  *mvcc.View
}

// view returns the view of ks's store, taking it if the run has none, or
// nil if none can be taken or none is worth it: a lone request reads the
// store as it is. buffered is what serveData has of the following
// requests now.
func (r *readViews) view(ks *storage.Keyspace, buffered int) *mvcc.View {
	if h, ok := r.held[ks.Name]; ok {
		if h.ks != ks {
			return nil // the keyspace was dropped and made anew
		}
		return h.v
	}
	if buffered == 0 && len(r.held) == 0 {
		return nil
	}
	held, err := r.engine.Acquire(ks.Name)
	if err != nil || held != ks {
		if err == nil {
			held.Release()
		}
		return nil
	}
	v, err := ks.Store.NewView()
	if err != nil {
		ks.Release()
		return nil
	}
	if r.held == nil {
		r.held = map[string]heldView{}
	}
	if len(r.held) == 0 {
		// A later view serves at least the requests an earlier one
		// does: the run's budget is the first view's.
		r.budget = buffered
	}
	r.held[ks.Name] = heldView{ks, v}
	return v
}

// spend counts a request of n bytes in against the budget, dropping the
// views if it arrived after they were taken.
func (r *readViews) spend(n int) {
	r.budget -= n
	if r.budget < 0 {
		r.close()
	}
}

// close drops the views.
func (r *readViews) close() {
	for name, h := range r.held {
		h.v.Close()
		h.ks.Release()
		delete(r.held, name)
	}
	r.budget = -1
}

type readViewsKey struct{}

// withReadViews returns ctx carrying r for reads of the newest versions.
func withReadViews(ctx context.Context, r *readViews, buffered int) context.Context {
	return context.WithValue(ctx, readViewsKey{}, viewsAt{r, buffered})
}

type viewsAt struct {
	r        *readViews
	buffered int
}

// storeRead reads as ks.Store.Read does, through the run's view if ctx
// carries one.
func storeRead(ctx context.Context, ks *storage.Keyspace, key string, off, n uint64) ([]byte, mvcc.BlobInfo, error) {
	if at, ok := ctx.Value(readViewsKey{}).(viewsAt); ok {
		if v := at.r.view(ks, at.buffered); v != nil {
			return v.Read(key, off, n)
		}
	}
	return ks.Store.Read(key, off, n)
}

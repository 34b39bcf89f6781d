package worker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spool-run/spool/registry"
)

// A thread whose worker waits on the blob store says so. The worker's
// store tries a failing operation again for Config.StoragePatience
// (blobstore.Retrying), during which the thread makes no progress: its
// record's stalled field says "storage", since when, and the last error,
// for `thread show` and the monitor. The first operation of the
// activation that gets an answer from the store clears it.
//
//	activation ──▶ store op fails ──▶ Stalled: mark once (MarkStalled)
//	                    │ tried again ...
//	                    ▼
//	               an answer ──▶ Answered: clear once (ClearStalled)
//
// The mark belongs to the activation's context (withStallMark): an
// operation outside an activation marks nothing.

// stallKey is the context key of an activation's stallMark.
type stallKey struct{}

// stallMark is what one activation knows of its thread's stall mark.
type stallMark struct {
	id     string
	mu     sync.Mutex
	marked atomic.Bool // the record holds a stall mark (as far as this activation knows)
}

// withStallMark gives ctx the stall mark of thread id's activation;
// marked says whether its claimed record holds one already.
func withStallMark(ctx context.Context, id string, marked bool) context.Context {
	m := &stallMark{id: id}
	m.marked.Store(marked)
	return context.WithValue(ctx, stallKey{}, m)
}

// storeWatch is the worker store's blobstore.Watcher: it marks and
// clears the stalls of the activations whose operations they are.
type storeWatch struct {
	acts interface {
		MarkStalled(ctx context.Context, id string, s registry.Stall) error
		ClearStalled(ctx context.Context, id string) error
	}
	log *slog.Logger
}

// stallWriteTimeout bounds the Redis write of a mark (Redis may be down
// too).
const stallWriteTimeout = 5 * time.Second

func (w storeWatch) Stalled(ctx context.Context, op, key string, since time.Time, err error) {
	m, _ := ctx.Value(stallKey{}).(*stallMark)
	if m == nil || m.marked.Load() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.marked.Load() {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stallWriteTimeout)
	defer cancel()
	s := registry.Stall{On: registry.StalledOnStorage, Since: since.UTC(), Op: op, Error: err.Error()}
	if werr := w.acts.MarkStalled(wctx, m.id, s); werr != nil {
		w.log.Warn("could not mark the thread stalled on the store", "thread_id", m.id, "error", werr)
		return
	}
	m.marked.Store(true)
	w.log.Warn("thread waits on the blob store", "thread_id", m.id, "op", op, "key", key, "error", err)
}

func (w storeWatch) Answered(ctx context.Context) {
	m, _ := ctx.Value(stallKey{}).(*stallMark)
	if m == nil || !m.marked.Load() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.marked.Load() {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stallWriteTimeout)
	defer cancel()
	if err := w.acts.ClearStalled(wctx, m.id); err != nil {
		w.log.Warn("could not clear the thread's stall on the store", "thread_id", m.id, "error", err)
		return
	}
	m.marked.Store(false)
	w.log.Info("the blob store answers again", "thread_id", m.id)
}

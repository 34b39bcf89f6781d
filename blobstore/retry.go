package blobstore

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// RetryConfig configures Retrying.
type RetryConfig struct {
	// Patience is how long an operation is tried again after its first
	// failure before the failure is returned. Required (> 0).
	Patience time.Duration
	// First is the first wait between attempts; it doubles up to Max.
	// Defaults 100ms and 5s.
	First, Max time.Duration
	// Logger gets one line per failure that is tried again. Default
	// slog.Default().
	Logger *slog.Logger
	// OnRetry, when set, is called before each wait (for metrics).
	OnRetry func(op string, err error)
	// Watch, when set, is told of each operation that fails and is tried
	// again, and of each that gets an answer: what its caller shows as
	// waiting on the store (the worker marks the thread whose operation it
	// is).
	Watch Watcher
}

// Watcher is told what a Retrying store's operations go through; its
// calls get the operation's context.
type Watcher interface {
	// Stalled: the operation failed (err) and waits to be tried again;
	// since is its first failure.
	Stalled(ctx context.Context, op, key string, since time.Time, err error)
	// Answered: the store gave the operation a definite answer (success,
	// or one such as ErrNotFound).
	Answered(ctx context.Context)
}

// Retrying wraps s so that an operation that fails with anything but a
// definite answer — ErrNotFound, ErrExists, ErrSymlink, ErrBadKey, or the caller's
// context ending — is tried again with exponential backoff until it
// succeeds or cfg.Patience has passed: a store that is down for a while
// (an S3 outage, a restart) delays the work that needs it instead of
// failing it. The worker runs on such a store, so a storage failure is
// neither a model-visible tool error nor a lost write; once patience runs
// out the failure is returned and the activation fails (and is retried
// from its last checkpoint).
//
// A PutIfAbsent whose earlier attempt may have landed (a timeout after
// the request was sent) and that then finds the key taken compares the
// stored bytes with its own: the same bytes are its own write, success.
func Retrying(s Store, cfg RetryConfig) Store {
	if cfg.First <= 0 {
		cfg.First = 100 * time.Millisecond
	}
	if cfg.Max <= 0 {
		cfg.Max = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &retrying{Store: s, cfg: cfg}
	if v, ok := s.(ViewWriter); ok {
		return &retryingViews{retrying: r, views: v}
	}
	return r
}

type retrying struct {
	Store
	cfg RetryConfig
}

// definite reports whether err is an answer rather than a failure to get
// one.
func definite(ctx context.Context, err error) bool {
	return err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrExists) || errors.Is(err, ErrSymlink) ||
		errors.Is(err, ErrBadKey) || ctx.Err() != nil
}

// do runs f until it gives a definite answer or patience runs out:
// backoff.Retry with exponential waits from cfg.First, doubling up to
// cfg.Max, no jitter, each wait only if it ends within patience of the
// first failure.
func (r *retrying) do(ctx context.Context, op, key string, f func() error) error {
	p := &patience{BackOff: &backoff.ExponentialBackOff{InitialInterval: r.cfg.First, Multiplier: 2, MaxInterval: r.cfg.Max}}
	var last error // f's last answer, which is do's however Retry ends
	attempt := 1
	_, _ = backoff.Retry(ctx, func() (struct{}, error) {
		if last = f(); definite(ctx, last) {
			return struct{}{}, backoff.Permanent(last)
		}
		if p.first.IsZero() {
			p.first = time.Now()
			p.deadline = p.first.Add(r.cfg.Patience)
		}
		return struct{}{}, last
	}, backoff.WithBackOff(p), backoff.WithMaxElapsedTime(0), backoff.WithNotify(func(err error, wait time.Duration) {
		attempt++
		r.cfg.Logger.Warn("blob store failed; trying again", "op", op, "key", key, "attempt", attempt, "wait", wait, "error", err)
		if r.cfg.OnRetry != nil {
			r.cfg.OnRetry(op, err)
		}
		if r.cfg.Watch != nil {
			r.cfg.Watch.Stalled(ctx, op, key, p.first, err)
		}
	}))
	if definite(ctx, last) {
		r.answered(ctx)
	}
	return last
}

// patience stops a backoff whose next wait would end past the deadline
// (patience after the first failure).
type patience struct {
	backoff.BackOff
	first, deadline time.Time
}

func (p *patience) NextBackOff() time.Duration {
	d := p.BackOff.NextBackOff()
	if d == backoff.Stop || time.Now().Add(d).After(p.deadline) {
		return backoff.Stop
	}
	return d
}

// answered tells the watcher that an operation got an answer (not when
// the caller's context ended: that is no answer of the store's).
func (r *retrying) answered(ctx context.Context) {
	if r.cfg.Watch != nil && ctx.Err() == nil {
		r.cfg.Watch.Answered(ctx)
	}
}

func (r *retrying) Put(ctx context.Context, key string, data []byte) error {
	return r.do(ctx, "put", key, func() error { return r.Store.Put(ctx, key, data) })
}

func (r *retrying) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	tried := false
	return r.do(ctx, "put_if_absent", key, func() error {
		err := r.Store.PutIfAbsent(ctx, key, data)
		if errors.Is(err, ErrExists) && tried {
			// An earlier attempt may have written it: the same bytes are
			// this write.
			if got, gerr := r.Store.Get(ctx, key); gerr == nil && bytes.Equal(got, data) {
				return nil
			} else if gerr != nil && !errors.Is(gerr, ErrNotFound) {
				return gerr
			}
		}
		tried = true
		return err
	})
}

// doValue is do for a read: it returns what the last attempt of f got.
func doValue[T any](ctx context.Context, r *retrying, op, key string, f func() (T, error)) (T, error) {
	var out T
	err := r.do(ctx, op, key, func() error {
		var err error
		out, err = f()
		return err
	})
	return out, err
}

func (r *retrying) Get(ctx context.Context, key string) ([]byte, error) {
	return doValue(ctx, r, "get", key, func() ([]byte, error) { return r.Store.Get(ctx, key) })
}

func (r *retrying) Stat(ctx context.Context, key string) (Info, error) {
	return doValue(ctx, r, "stat", key, func() (Info, error) { return r.Store.Stat(ctx, key) })
}

func (r *retrying) List(ctx context.Context, prefix string) ([]Info, error) {
	return doValue(ctx, r, "list", prefix, func() ([]Info, error) { return r.Store.List(ctx, prefix) })
}

func (r *retrying) Delete(ctx context.Context, key string) error {
	return r.do(ctx, "delete", key, func() error { return r.Store.Delete(ctx, key) })
}

// retryingViews keeps the wrapped store's cheaper view writes.
type retryingViews struct {
	*retrying
	views ViewWriter
}

func (r *retryingViews) PutView(ctx context.Context, key string, data []byte) error {
	return r.do(ctx, "put_view", key, func() error { return r.views.PutView(ctx, key, data) })
}

package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// The reads of thread records, budgets and leases that the packages above
// the orchestrator make (the API, the monitor, the CLI, the scheduler, the
// MCP server, history): each is the registry's or the ledger's read of the
// same name, so that none of them needs the services themselves.

// Record returns thread id's record, or registry.ErrNotFound.
func (o *Orchestrator) Record(ctx context.Context, id string) (*registry.Record, error) {
	rec, err := o.reg.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	o.admissionWait(ctx, rec)
	return rec, nil
}

// Records returns the records of ids in one round trip, in the order of
// ids; ids that are not registered are left out.
func (o *Orchestrator) Records(ctx context.Context, ids []string) ([]*registry.Record, error) {
	return o.reg.GetMany(ctx, ids)
}

// ResolveChain returns the id of the thread that id's continuation chain
// has reached (registry.Registry.ResolveChain).
func (o *Orchestrator) ResolveChain(ctx context.Context, id string) (string, error) {
	return o.reg.ResolveChain(ctx, id)
}

// Latest returns the record of the thread that id's continuation chain
// has reached: ResolveChain, then Record.
func (o *Orchestrator) Latest(ctx context.Context, id string) (*registry.Record, error) {
	cur, err := o.reg.ResolveChain(ctx, id)
	if err != nil {
		return nil, err
	}
	return o.reg.Get(ctx, cur)
}

// ChainRecords returns the records of the continuation chain id belongs
// to, first thread first (GetChain adds the forks).
func (o *Orchestrator) ChainRecords(ctx context.Context, id string) ([]*registry.Record, error) {
	return o.reg.GetChain(ctx, id)
}

// Children returns the records of a parent's children, oldest first.
func (o *Orchestrator) Children(ctx context.Context, parent string) ([]*registry.Record, error) {
	return o.reg.ListChildren(ctx, parent)
}

// Forks returns the records of the threads forked from id, oldest first.
func (h *Housekeeper) Forks(ctx context.Context, id string) ([]*registry.Record, error) {
	return h.reg.ListForks(ctx, id)
}

// Threads returns the records of the threads that f selects, newest first
// (registry.Registry.List).
func (o *Orchestrator) Threads(ctx context.Context, f registry.Filter) ([]*registry.Record, error) {
	if isAdmissionWait(f.WaitingFor) {
		return o.admissionWaiting(ctx, f)
	}
	return o.reg.List(ctx, f)
}

// Active returns the records of every thread that has not finished,
// oldest first.
func (o *Orchestrator) Active(ctx context.Context) ([]*registry.Record, error) {
	return o.reg.ListActive(ctx)
}

// ThreadsByTime returns a window of every registered thread's id, scored
// by its creation time in milliseconds, oldest first.
func (o *Orchestrator) ThreadsByTime(ctx context.Context, w registry.Window) ([]redis.Z, error) {
	return o.reg.ThreadsByTime(ctx, w)
}

// Statuses returns the status of each of ids in one round trip; an id
// that is not registered is left out.
func (o *Orchestrator) Statuses(ctx context.Context, ids []string) (map[string]thread.Status, error) {
	return o.reg.Statuses(ctx, ids)
}

// Subscribe subscribes to the status changes of every thread.
func (o *Orchestrator) Subscribe(ctx context.Context) (*registry.Subscription, error) {
	return o.reg.Subscribe(ctx)
}

// LedgerEntry returns the ledger entry of thread id (its budget and
// spend), or ledger.ErrNotFound.
func (o *Orchestrator) LedgerEntry(ctx context.Context, id string) (ledger.Entry, error) {
	return o.ledger.Get(ctx, id)
}

// LedgerEntries returns the ledger entries of ids in one round trip, by
// id; ids without an entry are left out.
func (o *Orchestrator) LedgerEntries(ctx context.Context, ids []string) (map[string]ledger.Entry, error) {
	return o.ledger.GetMany(ctx, ids)
}

// LeaseHeld reports whether thread id's activation lease is alive: a
// worker is running it.
func (h *Housekeeper) LeaseHeld(ctx context.Context, id string) (bool, error) {
	return h.acts.LeaseHeld(ctx, id)
}

// NewFollower returns a follower of thread id's transcript segments,
// verified against the orchestrator's keyring.
func (o *Orchestrator) NewFollower(id string) (*transcript.Follower, error) {
	return transcript.NewFollower(o.store, id, o.keyring)
}

// ReadStored reads thread id's transcript as the store holds it,
// verified against the orchestrator's keyring in mode, not held to the
// registry's mark (ReadTranscript and ReadVerified are).
func (o *Orchestrator) ReadStored(ctx context.Context, id string, mode transcript.Mode) (*transcript.Transcript, error) {
	return transcript.Read(ctx, o.store, id, o.keyring, mode)
}

// Unverified reports whether the orchestrator holds no trusted key:
// transcripts are read without verifying their signatures.
func (o *Orchestrator) Unverified() bool { return o.keyring.Unverified() }

// CanSign reports whether the orchestrator holds a signing key: without
// one it reads transcripts and signs nothing (no approval, send, cancel
// or resume that writes a segment).
func (o *Orchestrator) CanSign() bool { return o.signer != nil }

// Logger returns the orchestrator's logger.
func (o *Orchestrator) Logger() *slog.Logger { return o.log }

// Namespace returns the namespace of the orchestrator's Redis keys.
func (o *Orchestrator) Namespace() string { return o.keys.Namespace() }

// StateSnapshot reads state snapshot sha of graph run id as it is stored
// (blobkey.GraphState), unchecked: the caller checks it against its
// address.
func (o *Orchestrator) StateSnapshot(ctx context.Context, id, sha string) ([]byte, error) {
	return o.store.Get(ctx, blobkey.GraphState(id, sha))
}

// ThreadsPage is Threads for a listing that pages: at most f.Limit
// records (all when 0), newest first, and the cursor of the next page
// ("" when there is none: the listing ended).
func (o *Orchestrator) ThreadsPage(ctx context.Context, f registry.Filter) ([]*registry.Record, string, error) {
	limit := f.Limit
	if limit > 0 {
		f.Limit = limit + 1 // one more says whether the listing goes on
	}
	recs, err := o.Threads(ctx, f)
	if err != nil || limit <= 0 || len(recs) <= limit {
		return recs, "", err
	}
	recs = recs[:limit]
	return recs, registry.CursorOf(recs[limit-1]).String(), nil
}

// ListRange fills f's tags ("key=value" each: runs that carry all of
// them), its creation time range (ParseTimeBound) and the cursor of its
// page, as the CLI's flags and the API's parameters of those names give
// them ("" for none). Its errors name the flag or parameter.
func ListRange(f *Filter, tags []string, since, until, cursor string) error {
	var err error
	if f.Tags, err = thread.ParseTags(tags); err != nil {
		return err
	}
	now := time.Now()
	for _, b := range []struct {
		name, v string
		to      *time.Time
	}{{"since", since, &f.Since}, {"until", until, &f.Until}} {
		if b.v == "" {
			continue
		}
		if *b.to, err = ParseTimeBound(b.v, now); err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
	}
	if cursor != "" {
		cur, err := ParseCursor(cursor)
		if err != nil {
			return fmt.Errorf("cursor: %w", err)
		}
		f.After = &cur
	}
	return nil
}

// ParseTimeBound reads a listing's --since or --until: an RFC 3339 time
// or date (2026-12-01), or a duration before now (90m, 24h, 7d).
func ParseTimeBound(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("time %q: want an RFC 3339 time, a date (2026-12-01) or a duration ago (90m, 24h, 7d)", s)
}

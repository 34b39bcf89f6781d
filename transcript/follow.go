package transcript

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
)

// Follower reads a transcript incrementally, verifying each new segment
// against the chain of those before it: the engine of
// `spool thread transcript --follow`. Not safe for concurrent use.
type Follower struct {
	store blobstore.Store
	v     *verifier
	err   error
}

// NewFollower starts following threadID from its first segment.
func NewFollower(store blobstore.Store, threadID string, keyring *Keyring) (*Follower, error) {
	if err := validateThreadID(threadID); err != nil {
		return nil, err
	}
	return &Follower{store: store, v: newVerifier(threadID, keyring)}, nil
}

// LastState is the state of the last checkpoint seen (nil if none).
func (f *Follower) LastState() *State { return f.v.lastState }

// Next returns the verified events of the segments committed since the last
// call (nil when there are none). A segment that does not verify is a
// *VerifyError, and the follower stays failed.
func (f *Follower) Next(ctx context.Context) ([]Event, error) {
	if f.err != nil {
		return nil, f.err
	}
	infos, err := f.store.List(ctx, f.v.prefix)
	if err != nil {
		return nil, fmt.Errorf("follow %s: %w", f.v.threadID, err)
	}
	var nums []int64
	for _, in := range infos {
		if n, ok := blobkey.ParseSegment(f.v.threadID, in.Key); ok && n >= f.v.nextSegment {
			nums = append(nums, n)
		}
	}
	sort.Slice(nums, func(i, j int) bool { return nums[i] < nums[j] })
	var out []Event
	for _, n := range nums {
		key := blobkey.Segment(f.v.threadID, n)
		data, err := f.store.Get(ctx, key)
		if err != nil && !errors.Is(err, blobstore.ErrNotFound) {
			return out, fmt.Errorf("follow %s: %w", f.v.threadID, err)
		}
		if err != nil {
			err = &VerifyError{Key: key, Reason: "segment vanished between list and get"}
		} else {
			var evs []Event
			evs, _, err = f.v.segment(key, data)
			out = append(out, evs...)
		}
		if err != nil {
			f.err = err
			return out, err
		}
	}
	return out, nil
}

// Terminal reports whether ev ends a thread's transcript for a follower:
// thread_completed, thread_cancelled or thread_handoff.
func Terminal(ev Event) bool {
	switch ev.Type {
	case TypeThreadCompleted, TypeThreadCancelled, TypeThreadHandoff:
		return true
	}
	return false
}

// Follow polls the transcript every interval (default 500ms) and passes new
// verified events to fn, until a Terminal event has been passed, fn returns
// an error (returned, except ErrStopFollow which ends it cleanly), or ctx
// ends.
func Follow(ctx context.Context, store blobstore.Store, threadID string, keyring *Keyring, interval time.Duration, fn func([]Event) error) error {
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	f, err := NewFollower(store, threadID, keyring)
	if err != nil {
		return err
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		evs, err := f.Next(ctx)
		if len(evs) > 0 {
			if ferr := fn(evs); ferr != nil {
				if errors.Is(ferr, ErrStopFollow) {
					return nil
				}
				return ferr
			}
			for _, ev := range evs {
				if Terminal(ev) {
					return nil
				}
			}
		}
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// ErrStopFollow is returned by a Follow callback to end Follow without
// error.
var ErrStopFollow = errors.New("stop following")

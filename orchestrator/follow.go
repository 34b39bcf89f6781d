package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/transcript"
)

// ReadTranscript reads what verifies of rec's transcript (lenient), held
// to the registry's mark so that missing last segments count as damage
// too: the transcript's Warnings say what is wrong, and its Events are the
// intact prefix.
func (o *Orchestrator) ReadTranscript(ctx context.Context, rec *registry.Record) (*transcript.Transcript, error) {
	return o.readHeld(ctx, rec, transcript.Lenient)
}

// ReadVerified reads rec's transcript strictly (any damage is an error),
// held to the registry's mark: what a graph resume or fork continues from.
func (o *Orchestrator) ReadVerified(ctx context.Context, rec *registry.Record) (*transcript.Transcript, error) {
	return o.readHeld(ctx, rec, transcript.Strict)
}

// readHeld reads rec's transcript in mode, held to the registry's mark.
func (o *Orchestrator) readHeld(ctx context.Context, rec *registry.Record, mode transcript.Mode) (*transcript.Transcript, error) {
	return transcript.ReadWith(ctx, o.store, rec.ThreadID, o.keyring,
		transcript.ReadOptions{Mode: mode, Marks: []transcript.Mark{RegistryMark(rec)}})
}

// FollowOptions shape Follow.
type FollowOptions struct {
	// After: only the events with a greater seq are passed (a resumed
	// stream's last seen seq). Default 0: every event.
	After int64
	// Interval is how often the durable segments are read. Default 500ms.
	Interval time.Duration
}

// Follow passes thread id's transcript events to emit as they happen, in
// seq order, each once, without gaps: the durable ones from its segments
// (read every Interval), and, between checkpoints, the lines its worker
// publishes live (registry.Registry.Live, asked for with RequestFollow and
// asked again every registry.FollowRefresh). A live line that arrives ahead
// of one not passed yet waits for it; a lost one comes from the next
// segment. It is the engine of `spool thread transcript --follow` and of
// the API's event stream.
//
// It returns the last transcript read once the thread has finished (or
// waits on children: continued, completed, error, cancelled) and every
// event of its last segment is passed; a transcript that fails
// verification ends it early, with the transcript's Warnings saying why
// (no event verifies past the damage). An error from emit is returned as
// is, and ctx ending returns ctx.Err().
func (o *Orchestrator) Follow(ctx context.Context, id string, opt FollowOptions, emit func(transcript.Event) error) (*transcript.Transcript, error) {
	if opt.Interval <= 0 {
		opt.Interval = 500 * time.Millisecond
	}
	rec, err := o.reg.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	live, err := o.reg.Live(ctx, id)
	if err != nil {
		return nil, err
	}
	defer live.Close()
	lines := live.Channel()
	next := max(opt.After, 0) + 1 // the seq to pass next (a transcript's seqs are 1, 2, ...)
	held := map[int64]transcript.Event{}
	pass := func(ev transcript.Event) error {
		if ev.Seq < next {
			return nil // passed already
		}
		if err := emit(ev); err != nil {
			return err
		}
		next = ev.Seq + 1
		for { // live lines that were waiting for this one
			h, ok := held[next]
			if !ok {
				return nil
			}
			delete(held, next)
			if err := emit(h); err != nil {
				return err
			}
			next++
		}
	}
	requested := time.Time{}
	read := time.NewTicker(opt.Interval)
	defer read.Stop()
	for {
		if time.Since(requested) >= registry.FollowRefresh {
			if err := o.reg.RequestFollow(ctx, id); err != nil {
				return nil, err
			}
			requested = time.Now()
		}
		tr, err := o.ReadTranscript(ctx, rec)
		if err != nil {
			return nil, err
		}
		for _, ev := range tr.Events {
			if err := pass(ev); err != nil {
				return tr, err
			}
		}
		if len(tr.Warnings) > 0 || rec.Status.Terminal() {
			return tr, nil // damaged, or read once more after it ended: that was the last
		}
		for seq := range held {
			if seq < next {
				delete(held, seq)
			}
		}
		if rec, err = o.reg.Get(ctx, id); err != nil {
			return nil, err
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-read.C:
				break wait
			case m, ok := <-lines:
				if !ok {
					return nil, fmt.Errorf("live transcript of %s: subscription closed", id)
				}
				var ev transcript.Event
				if json.Unmarshal([]byte(m.Payload), &ev) != nil {
					continue
				}
				switch {
				case ev.Seq == next:
					if err := pass(ev); err != nil {
						return tr, err
					}
				case ev.Seq > next:
					held[ev.Seq] = ev
				}
			}
		}
	}
}

package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

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
func (rt *Runtime) ReadVerified(ctx context.Context, rec *registry.Record) (*transcript.Transcript, error) {
	return rt.readVerified(ctx, rec)
}

// readVerified is ReadVerified, which a graph run's resume runs too.
func (o *Orchestrator) readVerified(ctx context.Context, rec *registry.Record) (*transcript.Transcript, error) {
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
	f := &following{id: id, emit: emit, lines: live.Channel(), next: max(opt.After, 0) + 1, held: map[int64]transcript.Event{}}
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
		if err := f.passAll(tr.Events); err != nil {
			return tr, err
		}
		if len(tr.Warnings) > 0 || rec.Status.Terminal() {
			return tr, nil // damaged, or read once more after it ended: that was the last
		}
		f.forgetPassed()
		if rec, err = o.reg.Get(ctx, id); err != nil {
			return nil, err
		}
		emitErr, err := f.liveUntil(ctx, read.C)
		if emitErr != nil {
			return tr, emitErr
		}
		if err != nil {
			return nil, err
		}
	}
}

// following is where one Follow is: the seq it passes next and the live
// lines that arrived ahead of it.
type following struct {
	id    string
	emit  func(transcript.Event) error
	lines <-chan *redis.Message
	// next is the seq to pass next (a transcript's seqs are 1, 2, ...).
	next int64
	held map[int64]transcript.Event
}

// pass emits ev unless it was passed already, and then the live lines
// that were waiting for it.
func (f *following) pass(ev transcript.Event) error {
	if ev.Seq < f.next {
		return nil // passed already
	}
	if err := f.emit(ev); err != nil {
		return err
	}
	f.next = ev.Seq + 1
	for { // live lines that were waiting for this one
		h, ok := f.held[f.next]
		if !ok {
			return nil
		}
		delete(f.held, f.next)
		if err := f.emit(h); err != nil {
			return err
		}
		f.next++
	}
}

// passAll passes the events of a read of the segments.
func (f *following) passAll(evs []transcript.Event) error {
	for _, ev := range evs {
		if err := f.pass(ev); err != nil {
			return err
		}
	}
	return nil
}

// forgetPassed drops the held lines that a read of the segments passed.
func (f *following) forgetPassed() {
	for seq := range f.held {
		if seq < f.next {
			delete(f.held, seq)
		}
	}
}

// liveUntil passes the live lines that arrive in order, and holds those
// ahead of one not passed yet, until the next read of the segments is
// due (read). emitErr is an error from emit; err is ctx's, or the
// subscription's closing.
func (f *following) liveUntil(ctx context.Context, read <-chan time.Time) (emitErr, err error) {
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-read:
			return nil, nil
		case m, ok := <-f.lines:
			if !ok {
				return nil, fmt.Errorf("live transcript of %s: subscription closed", f.id)
			}
			var ev transcript.Event
			if json.Unmarshal([]byte(m.Payload), &ev) != nil {
				continue
			}
			switch {
			case ev.Seq == f.next:
				if err := f.pass(ev); err != nil {
					return err, nil
				}
			case ev.Seq > f.next:
				f.held[ev.Seq] = ev
			}
		}
	}
}

package history

import (
	"context"
	"errors"
	"fmt"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// MaxThreads bounds the threads of one recording.
const MaxThreads = 1000

// Thread is one recorded thread of a tree: its record, its verified model
// turns, the children it started and the thread that continued it.
type Thread struct {
	Record *spooltype.Record
	// Turns are its model turns, in order (transcript.Turns).
	Turns []transcript.Turn
	// Children are the threads it started, in the order of its
	// child_spawned events, each the first thread of its chain.
	Children []*Thread
	// Continuation is the thread that continued it (a handoff or a
	// resume), if any.
	Continuation *Thread
	// children[i] are the ids the conversation had shown started before
	// turn i+1 (provider.SpawnedChildren), for export.
	children [][]string
	// ended is the timestamp of the transcript's last event.
	ended transcript.Event
}

// ID is the thread's id.
func (t *Thread) ID() string { return t.Record.ThreadID }

// Walk calls f for t, its continuations and every descendant, depth first
// in the order they were started.
func (t *Thread) Walk(f func(*Thread)) { t.walk(f, true) }

// WalkReplayed calls f for t and every thread of its tree a replay runs
// and compares: its children and continuations, but not what comes after
// a resume (a person's message, which a replay does not send).
func (t *Thread) WalkReplayed(f func(*Thread)) { t.walk(f, false) }

// walk is Walk, and WalkReplayed without resumes.
func (t *Thread) walk(f func(*Thread), resumes bool) {
	if t == nil {
		return
	}
	f(t)
	for _, k := range t.Children {
		k.walk(f, resumes)
	}
	if c := t.Continuation; c != nil && (resumes || c.Record.ContinuationKind != "resume") {
		c.walk(f, resumes)
	}
}

// Load reads the recorded tree of thread id: the continuation chain id
// belongs to from its first thread (handoffs and resumes), and the
// children every thread of it started, recursively. Every transcript is
// verified strictly (orchestrator.VerifyThread): a recording that does
// not verify is refused (transcript.ErrTampered).
func Load(ctx context.Context, o *orchestrator.Orchestrator, id string) (*Thread, error) {
	chain, err := o.ChainRecords(ctx, id)
	if err != nil {
		return nil, err
	}
	n := 0
	return load(ctx, o, chain[0].ThreadID, &n)
}

// load reads the recorded thread id and, recursively, the children it
// started and the thread that continued it; n counts the threads read so
// far, against MaxThreads.
func load(ctx context.Context, o *orchestrator.Orchestrator, id string, n *int) (*Thread, error) {
	if *n++; *n > MaxThreads {
		return nil, fmt.Errorf("the recording has more than %d threads", MaxThreads)
	}
	v, err := o.VerifyThread(ctx, id, transcript.Strict)
	if err != nil {
		return nil, err
	}
	t := &Thread{Record: v.Record()}
	evs := v.Transcript.Events
	if t.Turns, err = transcript.Turns(evs); err != nil {
		return nil, err
	}
	if len(evs) > 0 {
		t.ended = evs[len(evs)-1]
	}
	kids, err := t.scan(evs)
	if err != nil {
		return nil, err
	}
	for _, k := range kids {
		kt, err := load(ctx, o, k, n)
		if errors.Is(err, orchestrator.ErrNotFound) {
			continue // a child whose registration Redis lost: never ran
		}
		if err != nil {
			return nil, err
		}
		t.Children = append(t.Children, kt)
	}
	if c := t.Record.ContinuationThreadID; c != "" && t.Record.Status == thread.StatusContinued {
		if t.Continuation, err = load(ctx, o, c, n); err != nil && !errors.Is(err, orchestrator.ErrNotFound) {
			return nil, err
		}
	}
	return t, nil
}

// scan reads t's transcript events evs once: it sets t.children to the
// children the conversation shows before each of t.Turns, as the scripted
// provider computes them from the messages it is given, and returns the
// ids of the children t started, in the order of its child_spawned events.
func (t *Thread) scan(evs []transcript.Event) ([]string, error) {
	var kids []string
	next := 0
	for i, ev := range evs {
		switch ev.Type {
		case transcript.TypeCognitionOut:
			if next < len(t.Turns) && t.Turns[next].Seq == ev.Seq {
				msgs, err := transcript.Reconstruct(evs[:i])
				if err != nil {
					return nil, err
				}
				t.children = append(t.children, provider.SpawnedChildren(msgs))
				next++
			}
		case transcript.TypeChildSpawned:
			var p transcript.ChildSpawned
			if err := ev.Decode(&p); err != nil {
				return nil, fmt.Errorf("%s: event seq %d: %w", t.ID(), ev.Seq, err)
			}
			kids = append(kids, p.ChildID)
		}
	}
	return kids, nil
}

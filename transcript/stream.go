package transcript

import (
	"context"
	"fmt"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/thread"
)

// WalkSummary is what Walk verified: a Transcript without its events.
type WalkSummary struct {
	ThreadID  string
	Segments  int64 // verified segments (the number of the last)
	Events    int64 // verified events, checkpoints included
	ChainHash string
	// LastState is the state of the last verified checkpoint (nil if none).
	LastState         *State
	LastCheckpointSeq int64
	// Warnings lists what lenient mode skipped.
	Warnings []string
}

// Walk verifies a thread's transcript exactly as ReadWith does (the same
// checks, modes, marks and errors) but streams it: each verified segment's
// events go to visit in order, and Walk keeps none of them. Memory is
// bounded by the fetch window (opts.Concurrency segments) and what visit
// keeps, whatever the transcript's length, so a transcript of millions of
// events verifies in a few MiB. A visit error stops the walk and is
// returned as it is.
func Walk(ctx context.Context, store blobstore.Store, threadID string, keyring *Keyring, opts ReadOptions, visit func(SegmentInfo, []Event) error) (*WalkSummary, error) {
	sum, _, err := walk(ctx, store, threadID, keyring, opts, visit)
	return sum, err
}

// Reconstructor rebuilds the conversation from events as Reconstruct does,
// one event at a time, keeping at most the trailing messages whose content
// fits in MaxBytes (0: everything). Trimming keeps the conversation valid
// for a provider: it drops whole messages from the front, and a tool
// message whose call was dropped goes with it. Fed a transcript through
// Walk, it reconstructs what a resume needs in bounded memory.
type Reconstructor struct {
	// MaxBytes bounds the content and tool inputs the kept messages hold.
	MaxBytes int

	msgs  []thread.Message
	head  int // msgs[:head] are dropped
	bytes int
	total int64
}

// Add takes the next event; events that are not part of the conversation
// are skipped. A payload that does not decode is an error naming the
// event's seq.
func (r *Reconstructor) Add(ev Event) error {
	m, ok, err := message(ev)
	if err != nil || !ok {
		return err
	}
	r.msgs = append(r.msgs, m)
	r.bytes += messageBytes(m)
	r.total++
	if r.MaxBytes <= 0 {
		return nil
	}
	for r.bytes > r.MaxBytes && len(r.msgs)-r.head > 1 {
		r.drop()
	}
	// A conversation opens with a user or assistant message: a tool
	// result whose call went is dropped too.
	for len(r.msgs)-r.head > 1 && r.msgs[r.head].Role == thread.RoleTool {
		r.drop()
	}
	if r.head > len(r.msgs)/2 && r.head > 64 {
		r.msgs = append(r.msgs[:0:0], r.msgs[r.head:]...)
		r.head = 0
	}
	return nil
}

func (r *Reconstructor) drop() {
	r.bytes -= messageBytes(r.msgs[r.head])
	r.msgs[r.head] = thread.Message{}
	r.head++
}

// Messages returns the kept conversation.
func (r *Reconstructor) Messages() []thread.Message { return r.msgs[r.head:] }

// Total is how many messages were reconstructed, kept or not.
func (r *Reconstructor) Total() int64 { return r.total }

func messageBytes(m thread.Message) int {
	n := len(m.Content)
	for _, c := range m.ToolCalls {
		n += len(c.Input) + len(c.Name) + len(c.ID)
	}
	return n
}

// message is the conversation message an event stands for, if any:
// cognition_in a user message, cognition_out an assistant message with
// its tool calls, tool_call_result a tool message answering its call id.
func message(ev Event) (thread.Message, bool, error) {
	fail := func(err error) (thread.Message, bool, error) {
		return thread.Message{}, false, fmt.Errorf("reconstruct: event seq %d (%s): %w", ev.Seq, ev.Type, err)
	}
	switch ev.Type {
	case TypeCognitionIn:
		var p CognitionIn
		if err := ev.Decode(&p); err != nil {
			return fail(err)
		}
		return thread.Message{Role: thread.RoleUser, Content: p.Content}, true, nil
	case TypeCognitionOut:
		var p CognitionOut
		if err := ev.Decode(&p); err != nil {
			return fail(err)
		}
		return thread.Message{Role: thread.RoleAssistant, Content: p.Content, ToolCalls: p.ToolCalls}, true, nil
	case TypeToolCallResult:
		var p ToolCallResult
		if err := ev.Decode(&p); err != nil {
			return fail(err)
		}
		return thread.Message{Role: thread.RoleTool, Content: p.Output, ToolCallID: p.CallID, ToolName: p.Tool, IsError: p.IsError}, true, nil
	}
	return thread.Message{}, false, nil
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/transcript"
)

// lineWriter serializes a follow's output: whole lines (a status line)
// and text written a piece at a time (the model's words as they come),
// ending a piece's unfinished line before the next whole line.
type lineWriter struct {
	mu      sync.Mutex
	w       io.Writer
	midLine bool
	// cut: a line ended the text's unfinished line; the text goes on
	// indented on a line of its own.
	cut bool
}

// line writes s as a line of its own.
func (l *lineWriter) line(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endLocked()
	fmt.Fprintln(l.w, s)
}

// piece writes text indented under a head, which it writes first when
// it is not "" (a new block of text).
func (l *lineWriter) piece(head, text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case head != "":
		l.endLocked()
		fmt.Fprint(l.w, head+"\n    ")
	case l.cut:
		fmt.Fprint(l.w, "    ")
	}
	l.cut = false
	fmt.Fprint(l.w, strings.ReplaceAll(text, "\n", "\n    "))
	l.midLine = !strings.HasSuffix(text, "\n")
}

// endLocked ends an unfinished line.
func (l *lineWriter) endLocked() {
	if l.midLine {
		fmt.Fprintln(l.w)
		l.midLine, l.cut = false, true
	}
}

// followText prints the model text of thread id's chain as it is
// written (orchestrator.FollowDeltas) on out, under a head naming the
// thread and turn, until the returned stop is called. It follows the
// chain: when live, the chain's live thread as the caller looks it up,
// names another thread (a handoff), that thread's text follows under its
// own head.
func followText(ctx context.Context, s *services, id string, live <-chan string, out *lineWriter) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		term := id
		for {
			fctx, fcancel := context.WithCancel(ctx)
			followed := make(chan struct{})
			go func(term string) {
				defer close(followed)
				followDeltas(fctx, s, term, out)
			}(term)
			next := nextInChain(ctx, live, term)
			fcancel()
			<-followed
			if next == "" {
				return
			}
			term = next
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// nextInChain waits until live names another thread than term, and
// returns it; "" once ctx ends.
func nextInChain(ctx context.Context, live <-chan string, term string) string {
	for {
		select {
		case <-ctx.Done():
			return ""
		case now := <-live:
			if now != term {
				return now
			}
		}
	}
}

// followDeltas prints thread id's model text on out until ctx ends.
func followDeltas(ctx context.Context, s *services, id string, out *lineWriter) {
	key := ""
	_ = s.orch.FollowDeltas(ctx, id, func(d orchestrator.Delta) error {
		if d.CallID != "" {
			return nil // the status line names the tool once it runs
		}
		head := ""
		if k := fmt.Sprintf("%d/%d", d.Turn, d.Attempt); k != key {
			key, head = k, fmt.Sprintf("[%s] turn %d writes:", id, d.Turn)
		}
		out.piece(head, d.Text)
		return nil
	})
}

// textFollower prints a transcript's events as text as they come, and
// the model's text of a turn as its token deltas come (live, before the
// turn is durable): the turn's cognition_out then gives its header and
// tool calls, without the text again when it is what was written.
type textFollower struct {
	out     *lineWriter
	writing strings.Builder
}

func (f *textFollower) event(ev transcript.Event) {
	if ev.Type == transcript.TypeTokenDelta {
		head := ""
		if f.writing.Len() == 0 {
			head = ev.Timestamp.UTC().Format("15:04:05.000") + "  assistant (writing)"
		}
		text := transcript.Payload[transcript.TokenDelta](ev).Text
		f.writing.WriteString(text)
		f.out.piece(head, text)
		return
	}
	if ev.Type == transcript.TypeCognitionOut && f.writing.Len() > 0 {
		p := transcript.Payload[transcript.CognitionOut](ev)
		if p.Content == f.writing.String() {
			p.Content = "" // written above
			if raw, err := jsonRaw(p); err == nil {
				ev.Payload = raw
			}
		}
	}
	f.writing.Reset()
	if block := strings.TrimRight(transcript.RenderText([]transcript.Event{ev}), "\n"); block != "" {
		f.out.line(block + "\n")
	}
}

// jsonRaw is v as JSON.
func jsonRaw(v any) (json.RawMessage, error) { return json.Marshal(v) }

package monitor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// transcriptCache keeps a transcript.Follower per thread recently viewed,
// with the events it has verified so far, so that a poll fetches only the
// segments committed since the last one. At most max threads are kept;
// the least recently read is dropped first (hashicorp/golang-lru).
type transcriptCache struct {
	// follow makes a thread's follower (orchestrator.NewFollower).
	follow func(id string) (*transcript.Follower, error)

	mu      sync.Mutex // makes each thread's follower once
	entries *lru.Cache[string, *followed]
}

type followed struct {
	mu     sync.Mutex
	f      *transcript.Follower
	events []transcript.Event
	failed error // a verification failure: the follower stays failed
}

func newTranscriptCache(follow func(id string) (*transcript.Follower, error), size int) *transcriptCache {
	entries, err := lru.New[string, *followed](size)
	if err != nil {
		panic(err) // only for a size <= 0: a programming error
	}
	return &transcriptCache{follow: follow, entries: entries}
}

func (c *transcriptCache) entry(id string) (*followed, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries.Get(id); ok {
		return e, nil
	}
	f, err := c.follow(id)
	if err != nil {
		return nil, err
	}
	e := &followed{f: f}
	c.entries.Add(id, e)
	return e, nil
}

// read returns every verified event of thread id so far (the slice must
// not be modified) and, when the transcript failed verification, why: the
// events are then its intact prefix.
func (c *transcriptCache) read(ctx context.Context, id string) ([]transcript.Event, error, error) {
	e, err := c.entry(id)
	if err != nil {
		return nil, nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failed == nil {
		evs, err := e.f.Next(ctx)
		e.events = append(e.events, evs...)
		if errors.Is(err, transcript.ErrTampered) {
			e.failed = err
		} else if err != nil {
			return nil, nil, err
		}
	}
	return e.events, e.failed, nil
}

// after returns the events with seq > after.
func after(evs []transcript.Event, after int64) []transcript.Event {
	i := sort.Search(len(evs), func(i int) bool { return evs[i].Seq > after })
	return evs[i:]
}

// maxText is how much of one text (a tool output, a message) an event
// shows.
const maxText = 8 << 10

// eventView is one transcript event as the page shows it.
type eventView struct {
	Seq       int64
	Type      string
	Time      time.Time
	Class     string // css class: user, assistant, tool, tool-error, child, life, error, limit, hook, other
	Title     string
	Meta      string
	Text      string
	Truncated int // bytes of Text not shown
	Calls     []callView
	Link      string // a thread id the event names (a child, a continuation)
	LinkLabel string
	// Fork is the "fork from here" page of a model turn (forkURL); "" on
	// other events.
	Fork string
}

type callView struct{ Name, Input string }

// hidden reports whether an event is left out of the page: token deltas
// are repeated by cognition_out, tool starts by the assistant's calls and
// the results, checkpoints are bookkeeping.
func hidden(typ string) bool {
	switch typ {
	case transcript.TypeTokenDelta, transcript.TypeToolCallStart, transcript.TypeCheckpoint:
		return true
	}
	return false
}

func (v *eventView) setText(s string) {
	if len(s) <= maxText {
		v.Text = s
		return
	}
	cut := maxText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	v.Text, v.Truncated = s[:cut], len(s)-cut
}

// viewEvent turns an event into what the page shows: each type of event
// the page knows has its viewer in eventViewers; any other shows its
// payload on one line.
func viewEvent(ev transcript.Event) eventView {
	v := eventView{Seq: ev.Seq, Type: ev.Type, Time: ev.Timestamp, Class: "other", Title: ev.Type}
	if view, ok := eventViewers[ev.Type]; ok {
		view(&v, ev)
	} else {
		v.setText(compactJSON(ev.Payload, 2000))
	}
	return v
}

// eventViewers fill an event's view from its payload, by the event's
// type: its class, title, meta line, text and link.
var eventViewers = map[string]func(*eventView, transcript.Event){
	transcript.TypeCognitionIn: func(v *eventView, ev transcript.Event) {
		p := transcript.Payload[transcript.CognitionIn](ev)
		v.Class, v.Title = "user", "user"
		v.setText(p.Content)
	},
	transcript.TypeCognitionOut:   viewModelTurn,
	transcript.TypeToolCallResult: viewToolResult,
	transcript.TypeChildSpawned:   viewChildSpawned,
	transcript.TypeChildRefused: func(v *eventView, ev transcript.Event) {
		p := transcript.Payload[transcript.ChildRefused](ev)
		v.Class, v.Title = "tool-error", "spawn refused: "+p.Directive
		v.Meta = p.Code
		v.setText(p.Message)
	},
	transcript.TypeThreadStarted: func(v *eventView, ev transcript.Event) {
		p := transcript.Payload[transcript.ThreadStarted](ev)
		v.Class, v.Title = "life", "started "+p.Directive
		v.Meta = p.Model
		if len(p.Inputs) > 0 && string(p.Inputs) != "null" {
			v.setText("inputs " + compactJSON(p.Inputs, 2000))
		}
	},
	transcript.TypeThreadWaiting: func(v *eventView, ev transcript.Event) {
		p := transcript.Payload[transcript.ThreadWaiting](ev)
		v.Class, v.Title = "life", fmt.Sprintf("waiting on %d thread(s)", len(p.ChildIDs))
		v.setText(strings.Join(p.ChildIDs, "\n"))
	},
	transcript.TypeThreadCompleted: func(v *eventView, ev transcript.Event) {
		p := transcript.Payload[transcript.ThreadCompleted](ev)
		v.Class, v.Title = "life done", "completed"
		v.Meta = costLine(p.Cost)
		v.setText(p.Result)
	},
	transcript.TypeThreadCancelled: func(v *eventView, ev transcript.Event) {
		p := transcript.Payload[transcript.ThreadCancelled](ev)
		v.Class, v.Title = "error", "cancelled"
		v.setText(strings.TrimSpace(p.Reason + " " + byLine(p.By)))
	},
	transcript.TypeThreadHandoff: func(v *eventView, ev transcript.Event) {
		p := transcript.Payload[transcript.ThreadHandoff](ev)
		v.Class, v.Title = "life", "handed off"
		v.Link, v.LinkLabel = p.NewThreadID, "continued by "+p.NewThreadID
	},
	transcript.TypeThreadContinued: func(v *eventView, ev transcript.Event) {
		p := transcript.Payload[transcript.ThreadContinued](ev)
		v.Class, v.Title = "life", "continues ("+thread.Count(p.ReconstructedTurns, "turn", "turns")+" reconstructed)"
		v.Link, v.LinkLabel = p.PreviousThreadID, "previous "+p.PreviousThreadID
	},
	transcript.TypeThreadForked: func(v *eventView, ev transcript.Event) {
		p := transcript.Payload[transcript.ThreadForked](ev)
		v.Class, v.Title = "life", fmt.Sprintf("forked at turn %d (%s carried)", p.ForkTurn, thread.Count(p.ReconstructedTurns, "turn", "turns"))
		v.Meta = fmt.Sprintf("segment %d · chain hash %.16s…", p.SourceSegment, p.SourceChainHash)
		v.Link, v.LinkLabel = p.ForkedFrom, "forked from "+p.ForkedFrom
		v.setText(p.Message)
	},
	transcript.TypeThreadResumed: func(v *eventView, ev transcript.Event) {
		p := transcript.Payload[transcript.ThreadResumed](ev)
		v.Class, v.Title = "life", "resumed"
		v.Link, v.LinkLabel = p.NewThreadID, "as "+p.NewThreadID
		v.setText(p.MessagePreview)
	},
	transcript.TypeThreadError: func(v *eventView, ev transcript.Event) {
		p := transcript.Payload[transcript.Error](ev)
		v.Class, v.Title = "error", "error"
		v.Meta = strings.Trim(p.Class+" · "+p.Code, " ·")
		v.setText(p.Message)
	},
	transcript.TypeLimitExceeded: func(v *eventView, ev transcript.Event) {
		p := transcript.Payload[transcript.LimitExceeded](ev)
		v.Class, v.Title = "limit", "limit exceeded: "+p.Code
		v.Meta = fmt.Sprintf("%g of %g", p.Current, p.Max)
	},
	transcript.TypeHookFired: viewHookFired,
	transcript.TypeDirectiveReturn: func(v *eventView, ev transcript.Event) {
		var p struct {
			Outputs json.RawMessage `json:"outputs"`
		}
		_ = ev.Decode(&p)
		v.Class, v.Title = "life done", "directive return"
		v.setText(prettyJSON(p.Outputs))
	},
}

// viewModelTurn shows a model call's answer: the model, tokens and spend,
// its text and tool calls, and, for a turn of the thread's own (not a
// continuation's reconstructed history), the page that forks from it.
func viewModelTurn(v *eventView, ev transcript.Event) {
	p := transcript.Payload[transcript.CognitionOut](ev)
	v.Class, v.Title = "assistant", fmt.Sprintf("assistant · turn %d", p.Turn)
	v.Meta = fmt.Sprintf("%d in / %s · $%.6f", p.Usage.InputTokens, thread.Count(p.Usage.OutputTokens, "out token", "out tokens"), p.Spend)
	if p.Model != "" {
		v.Meta = p.Model + " · " + v.Meta
	}
	v.setText(p.Content)
	for _, c := range p.ToolCalls {
		v.Calls = append(v.Calls, callView{Name: c.Name, Input: compactJSON(c.Input, 600)})
	}
	if p.Turn > 0 {
		v.Fork = forkURL(ev.ThreadID, p.Turn)
	}
}

// viewToolResult shows a tool's output, classed as an error when the tool
// failed, with where the full output went when it was cut.
func viewToolResult(v *eventView, ev transcript.Event) {
	p := transcript.Payload[transcript.ToolCallResult](ev)
	v.Class, v.Title = "tool", "tool "+p.Tool
	if p.IsError {
		v.Class, v.Title = "tool-error", "tool "+p.Tool+" · error"
	}
	if p.Artifact != "" {
		v.Meta = "full output: " + p.Artifact
	}
	v.setText(p.Output)
}

// viewChildSpawned links to the child a spawn started, by the id the event
// carries under either of its names.
func viewChildSpawned(v *eventView, ev transcript.Event) {
	var p struct {
		ChildID      string `json:"child_id"`
		ChildThread  string `json:"child_thread_id"`
		Directive    string `json:"directive"`
		Asynchronous bool   `json:"async"`
	}
	_ = ev.Decode(&p)
	v.Class, v.Title = "child", "spawned "+p.Directive
	v.Link = p.ChildID
	if v.Link == "" {
		v.Link = p.ChildThread
	}
	v.LinkLabel = v.Link
	if p.Asynchronous {
		v.Meta = "async"
	}
}

// viewHookFired shows what a hook fired on and its result, or its error,
// which the page then shows instead.
func viewHookFired(v *eventView, ev transcript.Event) {
	p := transcript.Payload[transcript.HookFired](ev)
	v.Class, v.Title = "hook", "hook "+p.HookID
	v.Meta = strings.Trim(p.Event+" · "+strings.TrimSpace(p.Action+" "+p.ItemType+" "+p.ItemID), " ·")
	if len(p.Result) > 0 {
		v.setText(compactJSON(p.Result, 2000))
	}
	if p.Error != "" {
		v.Class, v.Title = "error", "hook "+p.HookID+" · error"
		v.setText(p.Error)
	}
}

func byLine(by string) string {
	if by == "" {
		return ""
	}
	return "(by " + by + ")"
}

func costLine(c thread.Cost) string {
	return fmt.Sprintf("%s · %s · $%.6f", thread.Count(c.Turns, "turn", "turns"), thread.Count(c.Tokens(), "token", "tokens"), c.Spend)
}

// compactJSON renders raw JSON on one line, at most n bytes.
func compactJSON(raw json.RawMessage, n int) string {
	var buf bytes.Buffer
	s := string(raw)
	if json.Compact(&buf, raw) == nil {
		s = buf.String()
	}
	if len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func prettyJSON(raw json.RawMessage) string {
	var buf bytes.Buffer
	if json.Indent(&buf, raw, "", "  ") != nil {
		return string(raw)
	}
	return buf.String()
}

// renderEvent renders one event's HTML fragment ("" for a hidden event).
func (p *pages) renderEvent(ev transcript.Event) (template.HTML, error) {
	if hidden(ev.Type) {
		return "", nil
	}
	var buf bytes.Buffer
	if err := p.event.ExecuteTemplate(&buf, "event", viewEvent(ev)); err != nil {
		return "", err
	}
	return template.HTML(buf.String()), nil //nolint:gosec // produced by html/template, escaped
}

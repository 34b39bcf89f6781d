package history

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// Divergence kinds: how a replayed turn differs from the recorded one.
const (
	// KindTool: the turn called other tools, or another number of them.
	KindTool = "tool"
	// KindInput: a tool call's input differs.
	KindInput = "input"
	// KindResult: a tool call's result differs (or only one has one).
	KindResult = "result"
	// KindTurns: one side has a turn the other does not.
	KindTurns = "turns"
	// KindStatus: every turn matches, the thread ended otherwise.
	KindStatus = "status"
	// KindThread: a recorded thread was not started in the replay.
	KindThread = "thread"
)

// Divergence is the first difference between a recording and its replay.
type Divergence struct {
	ThreadID  string `json:"thread_id"`
	Directive string `json:"directive"`
	// Turn is the thread's turn (from 1) that differs; 0 for a thread-level
	// difference (KindStatus, KindThread).
	Turn int    `json:"turn"`
	Kind string `json:"kind"`
	// Call is the 1-based tool call of the turn that differs, and Tool
	// its recorded tool (KindInput, KindResult).
	Call int    `json:"call,omitempty"`
	Tool string `json:"tool,omitempty"`
	// Path is where in the input or result (JSON) the first difference
	// is: "" for the whole value, ".content", ".thread_ids[1]".
	Path     string `json:"path,omitempty"`
	Recorded string `json:"recorded"`
	Replayed string `json:"replayed"`
	// at orders divergences of different threads: the recorded time of
	// the turn.
	at time.Time
}

// String says which turn differs and how, on one line.
func (d *Divergence) String() string {
	where := fmt.Sprintf("turn %d of %s (%s)", d.Turn, d.ThreadID, d.Directive)
	if d.Turn == 0 {
		where = fmt.Sprintf("thread %s (%s)", d.ThreadID, d.Directive)
	}
	what := d.Kind
	switch d.Kind {
	case KindTool:
		what = "calls other tools"
	case KindInput:
		what = fmt.Sprintf("call %d (%s): the input differs", d.Call, d.Tool)
	case KindResult:
		what = fmt.Sprintf("call %d (%s): the result differs", d.Call, d.Tool)
	case KindTurns:
		what = "the turns differ"
	case KindStatus:
		what = "ended otherwise"
	case KindThread:
		what = "was not started in the replay"
	}
	if d.Path != "" {
		what += " at " + d.Path
	}
	return fmt.Sprintf("%s %s: recorded %s, replayed %s", where, what, clip(d.Recorded, 300), clip(d.Replayed, 300))
}

// clip shortens s to about n bytes, on one line.
func clip(s string, n int) string {
	s = strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(s)
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Compare compares each recorded thread of rec with the replayed thread
// of the same id in rep (a replay names its threads as the recording
// did), turn by turn: the tool calls (their tools and inputs, in order)
// and the tool results (output and error flag); a thread's model text is
// not compared. It returns how many threads and turns matched and the
// first divergence: of the threads that differ, the one whose differing
// turn was recorded first (the cause, rather than a parent that waited on
// it), or nil.
//
// Results are compared as JSON where they are JSON, leaving out what two
// runs cannot share: "elapsed_seconds", and the "cost" of a child's result
// (a replay may spend otherwise). A thread continued by a resume is
// compared up to the resume: what a person added is not part of a replay.
func Compare(rec, rep *Thread) (threads, turns int, first *Divergence) {
	replayed := map[string]*Thread{}
	rep.Walk(func(t *Thread) { replayed[t.ID()] = t })
	var divs []*Divergence
	walk := func(r *Thread) {
		p := replayed[r.ID()]
		if p == nil {
			divs = append(divs, &Divergence{ThreadID: r.ID(), Directive: r.Record.Directive, Kind: KindThread,
				Recorded: string(r.Record.Status), Replayed: "not started", at: startTime(r)})
			return
		}
		n, d := compareThread(r, p)
		turns += n
		if d != nil {
			divs = append(divs, d)
		} else {
			threads++
		}
	}
	rec.WalkReplayed(walk)
	sort.SliceStable(divs, func(i, j int) bool { return divs[i].at.Before(divs[j].at) })
	if len(divs) > 0 {
		first = divs[0]
	}
	return threads, turns, first
}

func startTime(t *Thread) time.Time {
	if len(t.Turns) > 0 {
		return t.Turns[0].Time
	}
	return t.Record.CreatedAt
}

// compareThread compares one recorded thread with its replay.
func compareThread(r, p *Thread) (int, *Divergence) {
	div := func(turn int, kind string, at time.Time) *Divergence {
		return &Divergence{ThreadID: r.ID(), Directive: r.Record.Directive, Turn: turn, Kind: kind, at: at}
	}
	matched := 0
	for i := 0; i < max(len(r.Turns), len(p.Turns)); i++ {
		switch {
		case i >= len(p.Turns):
			d := div(i+1, KindTurns, r.Turns[i].Time)
			d.Recorded, d.Replayed = describeTurn(&r.Turns[i]), fmt.Sprintf("no turn %d: the thread ended %s", i+1, ending(p))
			return matched, d
		case i >= len(r.Turns):
			d := div(i+1, KindTurns, r.ended.Timestamp)
			if d.at.IsZero() {
				d.at = r.Record.UpdatedAt
			}
			d.Recorded, d.Replayed = fmt.Sprintf("no turn %d: the thread ended %s", i+1, ending(r)), describeTurn(&p.Turns[i])
			return matched, d
		}
		if d := compareTurn(&r.Turns[i], &p.Turns[i]); d != nil {
			d.ThreadID, d.Directive, d.at = r.ID(), r.Record.Directive, r.Turns[i].Time
			return matched, d
		}
		matched++
	}
	resumed := r.Record.Status == thread.StatusContinued && r.Continuation != nil &&
		r.Continuation.Record.ContinuationKind == "resume"
	if r.Record.Status != p.Record.Status && !resumed {
		d := div(0, KindStatus, r.Record.UpdatedAt)
		d.Recorded, d.Replayed = ending(r), ending(p)
		return matched, d
	}
	return matched, nil
}

func ending(t *Thread) string {
	s := string(t.Record.Status)
	if e := t.Record.Error; e != nil {
		s += " (" + e.Line() + ")"
	}
	return s
}

func describeTurn(t *transcript.Turn) string {
	if len(t.Out.ToolCalls) == 0 {
		return fmt.Sprintf("text %q", clip(t.Out.Content, 80))
	}
	return "calls " + toolNames(t)
}

func toolNames(t *transcript.Turn) string {
	names := make([]string, len(t.Out.ToolCalls))
	for i, c := range t.Out.ToolCalls {
		names[i] = c.Name
	}
	return "[" + strings.Join(names, ", ") + "]"
}

// compareTurn compares the tool calls and results of one turn.
func compareTurn(r, p *transcript.Turn) *Divergence {
	rc, pc := r.Out.ToolCalls, p.Out.ToolCalls
	if len(rc) != len(pc) {
		return &Divergence{Turn: r.N, Kind: KindTool, Recorded: toolNames(r), Replayed: toolNames(p)}
	}
	for i := range rc {
		if rc[i].Name != pc[i].Name {
			return &Divergence{Turn: r.N, Kind: KindTool, Recorded: toolNames(r), Replayed: toolNames(p)}
		}
		if path, a, b, same := jsonDiff(rc[i].Input, pc[i].Input); !same {
			return &Divergence{Turn: r.N, Kind: KindInput, Call: i + 1, Tool: rc[i].Name, Path: path, Recorded: a, Replayed: b}
		}
	}
	for i := range rc {
		rr, _, rok := r.Result(rc[i].ID)
		pr, _, pok := p.Result(pc[i].ID)
		d := &Divergence{Turn: r.N, Kind: KindResult, Call: i + 1, Tool: rc[i].Name}
		switch {
		case rok != pok:
			d.Recorded, d.Replayed = resultText(rr, rok), resultText(pr, pok)
			return d
		case !rok:
			continue
		case rr.IsError != pr.IsError:
			d.Recorded, d.Replayed = resultText(rr, rok), resultText(pr, pok)
			return d
		}
		if path, a, b, same := jsonDiff(normalizeResult(rr.Output), normalizeResult(pr.Output)); !same {
			d.Path, d.Recorded, d.Replayed = path, a, b
			return d
		}
	}
	return nil
}

func resultText(r transcript.ToolCallResult, ok bool) string {
	switch {
	case !ok:
		return "no result"
	case r.IsError:
		return "error " + r.Output
	}
	return r.Output
}

// normalizeResult is a tool result as Compare compares it: a JSON result
// without what two runs cannot share; any other text as it is (quoted as
// a JSON string).
func normalizeResult(out string) []byte {
	var v any
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil || dec.More() {
		b, _ := json.Marshal(out)
		return b
	}
	b, _ := json.Marshal(stripVolatile(v))
	return b
}

func stripVolatile(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		_, child := x["thread_id"]
		for k, e := range x {
			if k == "elapsed_seconds" || (k == "cost" && child) {
				continue
			}
			out[k] = stripVolatile(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = stripVolatile(e)
		}
		return out
	}
	return v
}

// jsonDiff compares two JSON values and says where they first differ (a
// path like .a.b[2]) and what each side has there; text that is not JSON
// is compared as it is.
func jsonDiff(a, b []byte) (path, av, bv string, same bool) {
	var x, y any
	if decode(a, &x) != nil || decode(b, &y) != nil {
		if bytes.Equal(bytes.TrimSpace(a), bytes.TrimSpace(b)) {
			return "", "", "", true
		}
		return "", string(a), string(b), false
	}
	return diffValue("", x, y)
}

func decode(b []byte, v *any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		*v = nil
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

// diffValue compares the decoded JSON values x and y at path and says
// where they first differ and what each side has there (as JSON, or
// "nothing" for a key or element one side lacks). Objects and arrays are
// compared member by member, numbers by value (1 and 1.0 are the same),
// anything else by its JSON.
func diffValue(path string, x, y any) (string, string, string, bool) {
	switch a := x.(type) {
	case map[string]any:
		if b, ok := y.(map[string]any); ok {
			return diffMap(path, a, b)
		}
		return path, showJSON(x), showJSON(y), false
	case []any:
		if b, ok := y.([]any); ok {
			return diffSlice(path, a, b)
		}
		return path, showJSON(x), showJSON(y), false
	case json.Number:
		if b, ok := y.(json.Number); ok && sameNumber(a, b) {
			return "", "", "", true
		}
	}
	if showJSON(x) == showJSON(y) {
		return "", "", "", true
	}
	return path, showJSON(x), showJSON(y), false
}

// diffMap compares two JSON objects key by key, in sorted key order, so
// that the first difference it reports is the same from run to run.
func diffMap(path string, a, b map[string]any) (string, string, string, bool) {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		av, aok := a[k]
		bv, bok := b[k]
		p := path + "." + k
		switch {
		case !aok:
			return p, "nothing", showJSON(bv), false
		case !bok:
			return p, showJSON(av), "nothing", false
		}
		if p, s1, s2, same := diffValue(p, av, bv); !same {
			return p, s1, s2, false
		}
	}
	return "", "", "", true
}

// diffSlice compares two JSON arrays element by element; the longer one's
// first extra element is a difference.
func diffSlice(path string, a, b []any) (string, string, string, bool) {
	for i := 0; i < max(len(a), len(b)); i++ {
		p := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case i >= len(a):
			return p, "nothing", showJSON(b[i]), false
		case i >= len(b):
			return p, showJSON(a[i]), "nothing", false
		}
		if p, s1, s2, same := diffValue(p, a[i], b[i]); !same {
			return p, s1, s2, false
		}
	}
	return "", "", "", true
}

// sameNumber says whether two JSON numbers have the same value, whatever
// their spelling.
func sameNumber(a, b json.Number) bool {
	fa, err1 := a.Float64()
	fb, err2 := b.Float64()
	return err1 == nil && err2 == nil && fa == fb
}

// showJSON is v as JSON, the way a difference shows it.
func showJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

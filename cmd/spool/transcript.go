package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

func threadTranscript(c *cli.Context) error {
	id, err := oneID(c)
	if err != nil {
		return err
	}
	format, err := transcriptFormat(c)
	if err != nil {
		return err
	}
	s, rec, err := openRecord(c, id, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	if c.Bool("follow") {
		if s.embedded != nil && !rec.Status.Terminal() { // see nothingRuns
			return noWorker(s, rec.ThreadID, "follow it")
		}
		return followTranscript(c, s, rec, format)
	}
	tr, err := readPrefix(c, s, rec)
	if err != nil {
		return err
	}
	if format == "markdown" {
		if err := printMarkdown(c, rec, tr.Events); err != nil {
			return err
		}
	} else {
		for _, ev := range tr.Events {
			printEvent(c, format, ev)
		}
	}
	warnUnverified(c, s, "transcript of "+id)
	return damaged(c, tr)
}

// transcriptFormat is the format `thread transcript` prints in: --format,
// or jsonl with --json, which takes no other --format.
func transcriptFormat(c *cli.Context) (string, error) {
	format := c.String("format")
	if c.Bool("json") {
		if c.IsSet("format") && format != "jsonl" {
			return "", usagef("--json prints jsonl: not with --format %s", format)
		}
		format = "jsonl"
	}
	if format != "jsonl" && format != "text" && format != "markdown" {
		return "", usagef("--format %q: want jsonl, text or markdown", format)
	}
	return format, nil
}

// printMarkdown prints rec's events as one markdown document, whose
// header holds rec's status, turns and spend.
func printMarkdown(c *cli.Context, rec *spooltype.Record, events []transcript.Event) error {
	meta := transcript.KnowledgeMeta{ThreadID: rec.ThreadID, Directive: rec.Directive, Status: string(rec.Status), Model: rec.Model, Turns: rec.Cost.Turns, Spend: rec.Cost.Spend}
	_, err := c.App.Writer.Write(transcript.RenderKnowledge(meta, events))
	return err
}

// noKeysNote says why signatures went unchecked.
const noKeysNote = "signatures unverified: no trusted public keys (put the signing key's .pub in the key dir, or set SPOOL_TRUSTED_KEYS)"

// warnUnverified says on stderr that what was shown of what is
// unverified, when the command was given no key to verify with (see
// loadKeys).
func warnUnverified(c *cli.Context, s *services, what string) {
	if s.orch.Unverified() {
		fmt.Fprintf(c.App.ErrWriter, "spool: warning: %s: %s\n", what, noKeysNote)
	}
}

// readPrefix reads what verifies of rec's transcript (lenient), held to
// the registry's mark so that missing last segments count as damage too.
func readPrefix(c *cli.Context, s *services, rec *spooltype.Record) (*transcript.Transcript, error) {
	return s.orch.ReadTranscript(c.Context, rec)
}

// damaged reports a transcript that failed verification, once its intact
// prefix is printed: an error (exit 1) naming the first problem, or with
// --lenient a warning line per problem on stderr.
func damaged(c *cli.Context, tr *transcript.Transcript) error {
	if len(tr.Warnings) == 0 {
		return nil
	}
	if c.Bool("lenient") {
		for _, w := range tr.Warnings {
			fmt.Fprintf(c.App.ErrWriter, "spool: warning: %s\n", oneLine(w))
		}
		return nil
	}
	more := ""
	if n := len(tr.Warnings) - 1; n > 0 {
		more = fmt.Sprintf(" (and %d more)", n)
	}
	return &exitError{code: 1, err: fmt.Errorf("transcript of %s failed verification: %s%s; printed its intact prefix (%s); --lenient accepts it",
		tr.ThreadID, oneLine(tr.Warnings[0]), more, thread.Count(len(tr.Events), "event", "events"))}
}

func printEvent(c *cli.Context, format string, ev transcript.Event) {
	if format == "jsonl" {
		b, _ := json.Marshal(ev)
		fmt.Fprintln(c.App.Writer, string(b))
		return
	}
	fmt.Fprint(c.App.Writer, transcript.RenderText([]transcript.Event{ev}))
}

// followTranscript prints a thread's events as they happen, in seq order,
// each once (orchestrator.Follow: the durable ones from its segments, the
// live ones its worker publishes between checkpoints). It returns when the
// thread has finished (or waits on children: continued, completed, error,
// cancelled) and its last segment is printed, or when interrupted. A
// markdown document, whose header says how the thread ended, is printed
// whole at that point, of the events followed.
func followTranscript(c *cli.Context, s *services, rec *spooltype.Record, format string) error {
	var events []transcript.Event
	text := &textFollower{out: &lineWriter{w: c.App.Writer}}
	tr, err := s.orch.Follow(c.Context, rec.ThreadID, orchestrator.FollowOptions{}, func(ev transcript.Event) error {
		switch format {
		case "markdown":
			events = append(events, ev)
		case "jsonl":
			printEvent(c, format, ev)
		default:
			text.event(ev) // the model's words as they come
		}
		return nil
	})
	if format == "markdown" && (err == nil || c.Err() != nil) {
		if final, gerr := s.orch.Record(context.WithoutCancel(c.Context), rec.ThreadID); gerr == nil {
			rec = final
		}
		if perr := printMarkdown(c, rec, events); perr != nil {
			return perr
		}
	}
	if c.Err() != nil {
		return nil
	}
	if err != nil {
		return err
	}
	if len(tr.Warnings) > 0 {
		return damaged(c, tr) // no event verifies past the damage
	}
	warnUnverified(c, s, "transcript of "+rec.ThreadID)
	return nil
}

func threadVerify(c *cli.Context) error {
	s, _, err := openThread(c)
	if err != nil {
		return err
	}
	defer s.Close()
	id := c.Args().First()
	// Signed metadata against the registry, then the transcript held to
	// the transcript marks of the registry and thread.json.
	v, err := s.orch.VerifyThread(c.Context, id, transcript.Strict)
	if err != nil {
		if c.Bool("json") {
			_ = printJSON(c.App.Writer, map[string]any{"thread_id": id, "verified": false, "error": err.Error()})
		}
		return err
	}
	tr := v.Transcript
	if s.orch.Unverified() {
		// The hash chain and the marks held; nothing says who wrote them.
		if c.Bool("json") {
			_ = printJSON(c.App.Writer, map[string]any{"thread_id": id, "verified": false, "signatures": "unverified",
				"segments": len(tr.Segments), "events": len(tr.Events), "error": noKeysNote})
		}
		return fmt.Errorf("%s: hash chain intact over %d segments, but %s", id, len(tr.Segments), noKeysNote)
	}
	present := func(ok bool) string {
		if ok {
			return "verified"
		}
		return "absent"
	}
	tj, caps := present(v.Metadata.ThreadJSON != nil), present(v.Metadata.Capabilities != nil)
	out := map[string]any{"thread_id": id, "verified": true, "segments": len(tr.Segments), "events": len(tr.Events),
		"thread_json": tj, "capabilities": caps}
	if c.Bool("json") {
		return printJSON(c.App.Writer, out)
	}
	fmt.Fprintf(c.App.Writer, "%s: verified %s, %s; thread.json %s; capabilities.md %s\n", id, thread.Count(len(tr.Segments), "segment", "segments"),
		thread.Count(len(tr.Events), "event", "events"), tj, caps)
	return nil
}

// startFollow prints a live view of a running thread on stderr, one line
// whenever its turn, tokens, spend, status or last tool change, and the
// model's words as it writes them, under "[ID] turn N writes:":
//
//	[t/leaf-…] running    turn 2/4 · 240 tokens · $0.000400 of $0.5 · last tool rye/file-system/fs_read
//
// It follows the continuation chain to its live thread. The returned stop
// ends the view and prints the final state (the line is only printed if it
// differs from the last one shown).
func startFollow(c *cli.Context, s *services, id string) (stop func()) {
	ctx, cancel := context.WithCancel(c.Context)
	done := make(chan struct{})
	var last string
	out := &lineWriter{w: c.App.ErrWriter}
	// live carries the chain's live thread, as each look finds it, to the
	// text follower (the newest only: it waits for a change).
	live := make(chan string, 1)
	show := func(ctx context.Context) {
		term, err := s.orch.ResolveChain(ctx, id)
		if err != nil {
			return
		}
		select {
		case <-live:
		default:
		}
		live <- term
		if line := followLine(ctx, s, term); line != "" && line != last {
			out.line(line)
			last = line
		}
	}
	stopText := followText(ctx, s, id, live, out)
	go func() {
		defer close(done)
		for {
			show(ctx)
			select {
			case <-ctx.Done():
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	return func() {
		cancel()
		<-done
		stopText()
		show(c.Context)
	}
}

// followLine is the live view's line for term, the live thread of the
// followed chain.
func followLine(ctx context.Context, s *services, term string) string {
	r, err := s.orch.Record(ctx, term)
	if err != nil {
		return ""
	}
	if r.IsGraph() {
		return graphFollowLine(ctx, s, r)
	}
	tool := lastTool(ctx, s, term)
	turn := fmt.Sprintf("turn %d", r.Cost.Turns)
	if thread.Bounded(r.Limits.Turns) {
		turn += fmt.Sprintf("/%d", r.Limits.Turns)
	}
	line := fmt.Sprintf("[%s] %-9s %s · %s · $%.6f of $%g%s", short(r), r.Status, turn,
		thread.Count(r.Cost.InputTokens+r.Cost.OutputTokens, "token", "tokens"), r.Cost.Spend, r.Limits.Spend, tool)
	if r.Error != nil {
		line += " · " + r.Error.Code
	}
	if kids := childProgress(ctx, s, term); kids != "" {
		line += " · " + kids
	}
	return line
}

// childProgress says how thread id's children are doing, "" when it has
// none: "20 children: 7 done, 10 running, 3 queued".
func childProgress(ctx context.Context, s *services, id string) string {
	kids, err := s.orch.Children(ctx, id)
	if err != nil || len(kids) == 0 {
		return ""
	}
	states := []string{"done", "running", "waiting", "paused", "queued", "failed", "cancelled"}
	n := map[string]int{}
	for _, k := range kids {
		switch k.Status {
		case thread.StatusCompleted:
			n["done"]++
		case thread.StatusRunning, thread.StatusContinued: // a continued child's chain goes on
			n["running"]++
		case thread.StatusWaiting:
			n["waiting"]++
		case thread.StatusPaused:
			n["paused"]++
		case thread.StatusCreated:
			n["queued"]++
		case thread.StatusError:
			n["failed"]++
		case thread.StatusCancelled:
			n["cancelled"]++
		}
	}
	var parts []string
	for _, st := range states {
		if n[st] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[st], st))
		}
	}
	what := "children"
	if len(kids) == 1 {
		what = "child"
	}
	return fmt.Sprintf("%d %s: %s", len(kids), what, strings.Join(parts, ", "))
}

func short(r *spooltype.Record) string {
	if r.ChainIndex > 0 && r.IsGraph() {
		// A graph run's chain grows only by resumes.
		return fmt.Sprintf("%s (resume %d)", r.ThreadID, r.ChainIndex)
	}
	if r.ChainIndex > 0 {
		return fmt.Sprintf("%s (continuation %d)", r.ThreadID, r.ChainIndex)
	}
	return r.ThreadID
}

func lastTool(ctx context.Context, s *services, id string) string {
	tr, err := s.orch.ReadStored(ctx, id, transcript.Lenient)
	if err != nil {
		return ""
	}
	for i := len(tr.Events) - 1; i >= 0; i-- {
		if tr.Events[i].Type == transcript.TypeToolCallStart {
			var p transcript.ToolCallStart
			if json.Unmarshal(tr.Events[i].Payload, &p) == nil {
				return " · last tool " + p.Tool
			}
		}
	}
	return ""
}

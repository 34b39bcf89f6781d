package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/transcript"
)

func threadTranscript(c *cli.Context) error {
	id, err := oneID(c)
	if err != nil {
		return err
	}
	format := c.String("format")
	if c.Bool("json") {
		if c.IsSet("format") && format != "jsonl" {
			return usagef("--json prints jsonl: not with --format %s", format)
		}
		format = "jsonl"
	}
	if format != "jsonl" && format != "text" && format != "markdown" {
		return usagef("--format %q: want jsonl, text or markdown", format)
	}
	s, err := openServices(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	rec, err := s.orch.Registry.Get(c.Context, id)
	if err != nil {
		return notFound(id, err)
	}
	printed := 0
	for {
		tr, err := transcript.Read(c.Context, s.store, id, s.orch.Keyring, transcript.Lenient)
		if err != nil {
			return err
		}
		if format == "markdown" && !c.Bool("follow") {
			meta := transcript.KnowledgeMeta{ThreadID: rec.ThreadID, Directive: rec.Directive, Status: string(rec.Status), Model: rec.Model, Turns: rec.Cost.Turns, Spend: rec.Cost.Spend}
			_, err = c.App.Writer.Write(transcript.RenderKnowledge(meta, tr.Events))
			return err
		}
		for _, ev := range tr.Events[min(printed, len(tr.Events)):] {
			if format == "jsonl" {
				b, _ := json.Marshal(ev)
				fmt.Fprintln(c.App.Writer, string(b))
			} else {
				fmt.Fprint(c.App.Writer, transcript.RenderText([]transcript.Event{ev}))
			}
		}
		printed = len(tr.Events)
		if !c.Bool("follow") {
			return nil
		}
		rec, err = s.orch.Registry.Get(c.Context, id)
		if err != nil {
			return err
		}
		if rec.Status.Terminal() && rec.Status != "waiting" {
			return nil
		}
		select {
		case <-c.Context.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func threadVerify(c *cli.Context) error {
	id, err := oneID(c)
	if err != nil {
		return err
	}
	s, err := openServices(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := s.orch.Registry.Get(c.Context, id); err != nil {
		return notFound(id, err)
	}
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
	fmt.Fprintf(c.App.Writer, "%s: verified %d segments, %d events; thread.json %s; capabilities.md %s\n", id, len(tr.Segments), len(tr.Events), tj, caps)
	return nil
}

// startFollow prints a live view of a running thread on stderr, one line
// whenever its turn, tokens, spend, status or last tool change:
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
	show := func(ctx context.Context) {
		if line := followLine(ctx, s, id); line != "" && line != last {
			fmt.Fprintln(c.App.ErrWriter, line)
			last = line
		}
	}
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
		show(c.Context)
	}
}

func followLine(ctx context.Context, s *services, id string) string {
	term, err := s.orch.Registry.ResolveChain(ctx, id)
	if err != nil {
		return ""
	}
	r, err := s.orch.Registry.Get(ctx, term)
	if err != nil {
		return ""
	}
	tool := lastTool(ctx, s, term)
	line := fmt.Sprintf("[%s] %-9s turn %d/%d · %d tokens · $%.6f of $%g%s", short(r), r.Status, r.Cost.Turns, r.Limits.Turns,
		r.Cost.InputTokens+r.Cost.OutputTokens, r.Cost.Spend, r.Limits.Spend, tool)
	if r.Error != nil {
		line += " · " + r.Error.Code
	}
	return line
}

func short(r *queue.Record) string {
	if r.ChainIndex > 0 {
		return fmt.Sprintf("%s (continuation %d)", r.ThreadID, r.ChainIndex)
	}
	return r.ThreadID
}

func lastTool(ctx context.Context, s *services, id string) string {
	tr, err := transcript.Read(ctx, s.store, id, s.orch.Keyring, transcript.Lenient)
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

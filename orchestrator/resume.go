package orchestrator

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// ResumeResult is the spec's resume response (spooltype.ResumeResult).
type ResumeResult = spooltype.ResumeResult

// NotResumableError is a resume of a thread that has not finished: the
// thread its chain has reached is created, running or waiting.
type NotResumableError struct {
	ThreadID string
	Status   thread.Status
}

func (e *NotResumableError) Error() string {
	return fmt.Sprintf("thread %q is %s: only completed, error or cancelled threads can be resumed", e.ThreadID, e.Status)
}

// IntegrityMode is the transcript verification mode of a project.
func (p *Project) IntegrityMode() transcript.Mode {
	if p.Coordination.TranscriptIntegrity == "lenient" {
		return transcript.Lenient
	}
	return transcript.Strict
}

// Resume continues a finished thread with a user message, as the spec's
// resume flow: resolve the chain to its terminal thread, refuse one that is
// still running or created, verify and rebuild its transcript, spawn a
// sibling with the message, link the chain and log thread_resumed.
func (o *Orchestrator) Resume(ctx context.Context, id, message string) (*ResumeResult, error) {
	if strings.TrimSpace(message) == "" {
		return nil, fmt.Errorf("resume %s: the message is empty", id)
	}
	rec, err := o.Latest(ctx, id)
	if err != nil {
		return nil, err
	}
	resolved := rec.ThreadID
	if !rec.Status.Resumable() {
		return nil, &NotResumableError{ThreadID: resolved, Status: rec.Status}
	}
	if rec.IsGraph() {
		return nil, fmt.Errorf("%s is a graph run: resume it with `spool graph resume %s` (a run goes on from its last checkpoint, not with a message)", resolved, resolved)
	}
	turns, err := o.reconstructedTurns(ctx, rec)
	if err != nil {
		return nil, err
	}
	newRec, err := o.Start(ctx, StartRequest{
		Directive: rec.Directive, Inputs: rec.Inputs, Model: rec.Model, ParentID: rec.ParentID, Bundle: rec.Bundle,
		Queue: rec.Queue, PreviousThreadID: resolved, Kind: KindResume, Message: message,
	})
	if err != nil {
		return nil, err
	}
	if _, _, err := o.reg.LinkContinuation(ctx, resolved, newRec.ThreadID); err != nil {
		// Another resume linked first: withdraw this one.
		_, _ = o.Cancel(ctx, newRec.ThreadID, true)
		return nil, fmt.Errorf("resume %s: %w", resolved, err)
	}
	if err := o.logEvent(ctx, resolved, transcript.TypeThreadResumed, map[string]any{
		"new_thread_id": newRec.ThreadID, "directive": rec.Directive, "message_preview": preview(message, 200), "reconstructed_turns": turns,
	}); err != nil {
		o.threadLog(resolved).Warn("thread_resumed not logged", "error", err)
	}
	res := &ResumeResult{Success: true, Resumed: true, ThreadID: newRec.ThreadID, OldThreadID: resolved, NewThreadID: newRec.ThreadID,
		ResolvedThreadID: resolved, Directive: rec.Directive, ReconstructedTurns: turns, NewThreadResult: newRec}
	if id != resolved {
		orig := id
		res.OriginalThreadID = &orig
	}
	return res, nil
}

// reconstructedTurns verifies the transcript of rec, the thread Resume
// continues, in its project's integrity mode (a lenient one's problems
// logged), rebuilds its conversation and counts the model's turns in it.
func (o *Orchestrator) reconstructedTurns(ctx context.Context, rec *registry.Record) (int, error) {
	id := rec.ThreadID
	proj, err := o.Project(ctx, rec.Bundle)
	if err != nil {
		return 0, err
	}
	v, err := o.VerifyThread(ctx, id, proj.IntegrityMode())
	if err != nil {
		return 0, fmt.Errorf("resume %s: %w", id, err)
	}
	for _, w := range v.Warnings {
		o.threadLog(id).Warn("resuming despite an integrity problem (transcript_integrity: lenient)", "warning", w)
	}
	msgs, err := transcript.Reconstruct(v.Transcript.Events)
	if err != nil {
		return 0, fmt.Errorf("resume %s: %w", id, err)
	}
	turns := 0
	for _, m := range msgs {
		if m.Role == thread.RoleAssistant {
			turns++
		}
	}
	return turns, nil
}

// logEvent appends one event to a finished thread's transcript as a new
// signed segment, then raises the registry's transcript mark to it and
// rewrites thread.json. A crash between the segment and the mark leaves
// the mark one segment behind, which verifies (a mark is a lower bound);
// the registry's mark only rises, so concurrent calls cannot lower it.
func (o *Orchestrator) logEvent(ctx context.Context, id, typ string, payload any) error {
	rec, err := o.reg.Get(ctx, id)
	if err != nil {
		return err
	}
	w, err := transcript.OpenWriter(ctx, o.store, id, o.signer, o.keyring, RegistryMark(rec))
	if err != nil {
		return err
	}
	if _, err := w.Append(typ, payload); err != nil {
		return err
	}
	st := transcript.State{}
	if last := w.LastState(); last != nil {
		st = *last
	}
	if _, err = w.Checkpoint(ctx, st); err != nil {
		return err
	}
	if _, err := o.reg.Commit(ctx, id, 0, registry.Changes{Transcript: RecordMark(w.Mark())}); err != nil {
		return err
	}
	if rec, err = o.reg.Get(ctx, id); err != nil {
		return err
	}
	return o.WriteThreadJSON(ctx, rec)
}

func preview(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Search runs a regular expression over the transcripts of every thread in
// id's continuation chain, at most limit matches (50 when limit <= 0).
func (o *Orchestrator) Search(ctx context.Context, id, query string, limit int) ([]transcript.Match, error) {
	re, err := regexp.Compile(query)
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", query, err)
	}
	chain, err := o.reg.GetChain(ctx, id)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(chain))
	for i, r := range chain {
		ids[i] = r.ThreadID
	}
	if limit <= 0 {
		limit = 50
	}
	return transcript.ChainSearch(ctx, o.store, o.keyring, ids, re, limit)
}

// TranscriptText renders a thread's transcript as text, at most limit
// bytes (the most recent part when longer).
func (rt *Runtime) TranscriptText(ctx context.Context, id string, limit int) (string, error) {
	tr, err := transcript.Read(ctx, rt.store, id, rt.keyring, transcript.Lenient)
	if err != nil {
		return "", err
	}
	text := transcript.RenderText(tr.Events)
	if limit > 0 && len(text) > limit {
		text = "…" + text[len(text)-limit:]
	}
	return text, nil
}

// Wait blocks until every thread (following continuation chains) has
// finished, or the timeout passes; the map is keyed by the ids given.
func (o *Orchestrator) Wait(ctx context.Context, ids []string, timeout time.Duration) (map[string]*registry.Record, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return o.reg.WaitTerminal(ctx, ids)
}

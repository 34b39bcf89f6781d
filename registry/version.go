package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/spool-run/spool/internal/reply"
	"github.com/spool-run/spool/thread"
)

// Changes is one optimistic-concurrency write to a thread record
// (spec/versioned-changesets.md). Zero fields are left unchanged.
type Changes struct {
	Status       thread.Status // checked against the transition table
	Cost         *thread.Cost
	Result       *string
	Outputs      map[string]any
	Error        *ErrorInfo
	Model        *string
	Capabilities []string
	Limits       *thread.Resolved
	// Transcript raises the thread's transcript mark (Record.Transcript).
	// The mark only moves forward: a mark with no more segments than the
	// recorded one leaves it as it is, so a late writer cannot lower it.
	Transcript *TranscriptMark
	// Fields are extra raw hash fields (other packages' bookkeeping). They
	// may not name a field the registry owns (status, version, ...).
	Fields map[string]string
}

// protectedFields may only change through the registry's own operations.
var protectedFields = map[string]bool{
	"thread_id": true, "status": true, "version": true, "activation": true, "created_at": true,
	"updated_at": true, "parent_id": true, "ancestors": true, "depth": true, "continuation_thread_id": true,
	"cancel_requested": true, "cancel_cascade": true, "pause_requested": true, "transcript_segments": true, "transcript_chain_hash": true,
}

func (c Changes) pairs() ([]any, error) {
	var out []any
	for _, jf := range []struct {
		name string
		set  bool
		v    any
	}{{"cost", c.Cost != nil, c.Cost}, {"outputs", c.Outputs != nil, c.Outputs}, {"error", c.Error != nil, c.Error},
		{"capabilities", c.Capabilities != nil, c.Capabilities}, {"limits", c.Limits != nil, c.Limits}} {
		if !jf.set {
			continue
		}
		b, err := json.Marshal(jf.v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", jf.name, err)
		}
		out = append(out, jf.name, string(b))
	}
	if c.Result != nil {
		out = append(out, "result", *c.Result)
	}
	if c.Model != nil {
		out = append(out, "model", *c.Model)
	}
	for k, v := range c.Fields {
		if protectedFields[k] || k == "" {
			return nil, fmt.Errorf("field %q is not writable through Changes.Fields", k)
		}
		out = append(out, k, v)
	}
	return out, nil
}

// Commit applies ch to thread id if its version is still expectedVersion
// (0: any version), bumping the version, and returns the new version. A
// stale version is a *ConflictError (errors.Is ErrConflict) and nothing
// changes; a forbidden status change is a *thread.TransitionError and
// nothing changes. A terminal status leaves the active set and every status
// change is published as "<id> <status>".
func (r *Registry) Commit(ctx context.Context, id string, expectedVersion int64, ch Changes) (int64, error) {
	keys, args, err := r.CommitArgs(id, expectedVersion, ch)
	if err != nil {
		return 0, err
	}
	return r.runCommit(ctx, id, expectedVersion, keys, args)
}

// CommitArgs encodes Commit's change as registry.lua's commit takes it:
// its keys (thread hash, active set, events channel, outbox) and
// arguments, for a script that runs it with other steps (package
// orchestrator's finalize.lua).
func (r *Registry) CommitArgs(id string, expectedVersion int64, ch Changes) (keys []string, args []any, err error) {
	if ch.Status != "" && !ch.Status.Valid() {
		return nil, nil, fmt.Errorf("commit thread %q: unknown status %q", id, ch.Status)
	}
	pairs, err := ch.pairs()
	if err != nil {
		return nil, nil, fmt.Errorf("commit thread %q: %w", id, err)
	}
	return r.commitArgs(id, expectedVersion, ch.Status, ch.Transcript, pairs)
}

// commit commits raw field pairs (pairs may name fields Changes.Fields
// refuses).
func (r *Registry) commit(ctx context.Context, id string, expected int64, to thread.Status, mark *TranscriptMark, pairs []any) (int64, error) {
	keys, args, err := r.commitArgs(id, expected, to, mark, pairs)
	if err != nil {
		return 0, err
	}
	return r.runCommit(ctx, id, expected, keys, args)
}

// runCommit runs regCommitScript and returns the new version.
func (r *Registry) runCommit(ctx context.Context, id string, expected int64, keys []string, args []any) (int64, error) {
	res, err := regCommitScript.Run(ctx, r.rdb, keys, args...).Int64Slice()
	if err != nil {
		return 0, scriptError(fmt.Sprintf("commit thread %q", id), id, expected, err)
	}
	if len(res) != 1 {
		return 0, reply.Unexpected("registry commit", res)
	}
	return res[0], nil
}

// commitArgs are regCommitScript's keys and arguments.
func (r *Registry) commitArgs(id string, expected int64, to thread.Status, mark *TranscriptMark, pairs []any) ([]string, []any, error) {
	if expected < 0 {
		return nil, nil, fmt.Errorf("commit thread %q: negative expected version %d", id, expected)
	}
	markSegments, markHash := "", ""
	if mark != nil {
		if mark.Segments < 0 {
			return nil, nil, fmt.Errorf("commit thread %q: negative transcript mark %d", id, mark.Segments)
		}
		markSegments, markHash = strconv.FormatInt(mark.Segments, 10), mark.ChainHash
	}
	keys := []string{r.ks.Thread(id), r.ks.Active(id), r.ks.Events(id), r.ks.Outbox(id)}
	args := append([]any{id, expected, string(to), r.now().UTC().Format(time.RFC3339Nano), markSegments, markHash}, pairs...)
	return keys, args, nil
}

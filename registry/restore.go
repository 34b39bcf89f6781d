package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spool-run/spool/internal/reply"
)

// RestoredField is the hash field (Record.Extra) that a restoration sets,
// to the RFC 3339 time, on the record of a thread that Redis lost and the
// blob store gave back (package orchestrator's Restore).
const RestoredField = "restored_at"

// Restoration is the registration again of a whole record that Redis
// lost, as registry.lua's restore takes it: its Keys and Args, and
// Record, which reads the reply. Restore runs it alone; package
// orchestrator's restore.lua runs it after the thread's ledger entry and
// charges, having checked first with registry.lua's restorable.
type Restoration struct {
	Keys []string
	Args []any

	rec *Record
}

// Restoration encodes rec, every field of it, for registry.lua's
// restore. Ancestors and Depth are not taken from rec: the script derives
// them from the parent's record, as a registration does.
func (r *Registry) Restoration(rec *Record) (*Restoration, error) {
	if rec.ThreadID == "" {
		return nil, errors.New("restore thread: empty thread id")
	}
	if rec.ParentID == rec.ThreadID {
		return nil, fmt.Errorf("restore thread %q: it cannot be its own parent", rec.ThreadID)
	}
	if !rec.Status.Valid() {
		return nil, fmt.Errorf("restore thread %q: unknown status %q", rec.ThreadID, rec.Status)
	}
	fields, err := recordFields(rec)
	if err != nil {
		return nil, fmt.Errorf("restore thread %q: %w", rec.ThreadID, err)
	}
	id := rec.ThreadID
	keys := []string{r.ks.Thread(id), r.ks.Threads(id), r.ks.Active(id), r.ks.Events(id), r.ks.TenantThreads(rec.TenantOrDefault(), id)}
	if rec.ParentID != "" {
		keys = append(keys, r.ks.Thread(rec.ParentID), r.ks.Children(rec.ParentID))
	}
	keys = append(keys, r.tagKeys(rec.Directive, rec.Tags, id)...)
	args := append([]any{id, rec.CreatedAt.UnixMilli(), string(rec.Status), rec.ParentID}, fields...)
	return &Restoration{Keys: keys, Args: args, rec: rec}, nil
}

// Record is the record restored, read from the reply v of registry.lua's
// restore, or from err, the script's failure: ErrExists (the thread is
// registered: someone restored it first), ErrParentNotFound, or the
// failure wrapped.
func (g *Restoration) Record(v any, err error) (*Record, error) {
	id := g.rec.ThreadID
	if err != nil {
		return nil, scriptError(fmt.Sprintf("restore thread %q", id), id, 0, err)
	}
	res := reply.Array(v)
	if len(res) != 2 {
		return nil, reply.Unexpected("registry restore", res)
	}
	out := *g.rec
	out.Ancestors = nil
	if err := json.Unmarshal([]byte(reply.String(res[0])), &out.Ancestors); err != nil {
		return nil, fmt.Errorf("restore thread %q: ancestors: %w", id, err)
	}
	if len(out.Ancestors) == 0 {
		out.Ancestors = nil
	}
	out.Depth = int(reply.Int(res[1]))
	return &out, nil
}

// Restore registers rec again, whole, as registry.lua's restore does:
// for a thread Redis lost. ErrExists when the thread is registered,
// ErrParentNotFound when its parent is not.
func (r *Registry) Restore(ctx context.Context, rec *Record) (*Record, error) {
	g, err := r.Restoration(rec)
	if err != nil {
		return nil, err
	}
	res, err := regRestoreScript.Run(ctx, r.rdb, g.Keys, g.Args...).Result()
	return g.Record(res, err)
}

// recordFields is rec as the hash fields parseRecord reads, but for
// thread_id, parent_id, status, ancestors and depth (restore's own) and
// the fields of a moment that no longer holds (waiting_for,
// pending_approvals, stalled): those are not restored.
func recordFields(rec *Record) ([]any, error) {
	var out []any
	str := func(k, v string) {
		if v != "" {
			out = append(out, k, v)
		}
	}
	for _, f := range []struct{ k, v string }{
		{"directive", rec.Directive}, {"continuation_thread_id", rec.ContinuationThreadID},
		{"continuation_of", rec.ContinuationOf}, {"chain_root_id", rec.ChainRootID}, {"result", rec.Result},
		{"model", rec.Model}, {"bundle", rec.Bundle}, {"queue", rec.Queue}, {"previous_thread_id", rec.PreviousThreadID},
		{"continuation_kind", rec.ContinuationKind}, {"continuation_message", rec.ContinuationMessage},
		{"model_override", rec.ModelOverride}, {"transcript_chain_hash", rec.Transcript.ChainHash},
		{"forked_from", rec.ForkedFrom}, {"fork_chain_hash", rec.ForkChainHash}, {"fork_message", rec.ForkMessage},
		{"workspace", rec.Workspace}, {"kind", rec.Kind}, {"graph_digest", rec.GraphDigest},
		{CurrentNodeField, rec.CurrentNode}, {StateSHA256Field, rec.StateSHA256},
		{"trace_parent", rec.TraceParent}, {"trace_caller", rec.TraceCaller},
		{"tenant", rec.TenantOrDefault()}, {"idempotency_key", rec.IdempotencyKey},
	} {
		str(f.k, f.v)
	}
	for _, f := range []struct {
		k  string
		on bool
	}{{"cancel_requested", rec.CancelRequested}, {"cancel_cascade", rec.CancelCascade}, {"pause_requested", rec.PauseRequested}} {
		if f.on {
			out = append(out, f.k, "1")
		}
	}
	outputs := rec.Outputs
	if outputs == nil {
		outputs = map[string]any{}
	}
	for _, jf := range []struct {
		k    string
		v    any
		keep bool
	}{{"outputs", outputs, true}, {"cost", rec.Cost, true}, {"limits", rec.Limits, true},
		{"capabilities", orEmpty(rec.Capabilities), true}, {"inputs", orEmptyMap(rec.Inputs), true},
		{"dropped_capabilities", rec.DroppedCapabilities, len(rec.DroppedCapabilities) > 0},
		{"ledger_path", rec.LedgerPath, len(rec.LedgerPath) > 0}, {"error", rec.Error, rec.Error != nil},
		{"concurrency_keys", rec.ConcurrencyKeys, len(rec.ConcurrencyKeys) > 0}, {"tags", rec.Tags, len(rec.Tags) > 0}} {
		if !jf.keep {
			continue
		}
		b, err := json.Marshal(jf.v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", jf.k, err)
		}
		out = append(out, jf.k, string(b))
	}
	for _, f := range []struct {
		k string
		v int64
	}{{"version", rec.Version}, {"activation", rec.Activation}, {"transcript_segments", rec.Transcript.Segments},
		{"chain_index", int64(rec.ChainIndex)}, {"fork_turn", int64(rec.ForkTurn)}, {"fork_segment", rec.ForkSegment},
		{StepField, int64(rec.Step)}, {"max_steps", int64(rec.MaxSteps)}, {SuppressedErrorsField, int64(rec.SuppressedErrors)},
		{ItemsDoneField, int64(rec.ItemsDone)}, {ItemsTotalField, int64(rec.ItemsTotal)}, {"priority", int64(rec.PriorityOrDefault())},
		{"paused_ms", rec.PausedMS}} {
		out = append(out, f.k, strconv.FormatInt(f.v, 10))
	}
	for _, f := range []struct {
		k string
		v time.Time
	}{{"created_at", rec.CreatedAt}, {"updated_at", rec.UpdatedAt}, {"started_at", rec.StartedAt}} {
		if !f.v.IsZero() {
			out = append(out, f.k, f.v.UTC().Format(time.RFC3339Nano))
		}
	}
	for k, v := range rec.Extra {
		if knownFields[k] {
			return nil, fmt.Errorf("extra field %s is the registry's", k)
		}
		out = append(out, k, v)
	}
	return out, nil
}

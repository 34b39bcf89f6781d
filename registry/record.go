package registry

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/telemetry"
	"github.com/spool-run/spool/thread"
)

// The record and its parts are the API's types (package spooltype): the
// registry keeps them in Redis, one hash per thread.
type (
	// Record is a thread's registry record (spooltype.Record).
	Record = spooltype.Record
	// ErrorInfo is a thread's error: a code and a message.
	ErrorInfo = spooltype.ErrorInfo
	// ConcurrencyKey is a run's value of a concurrency rule
	// (spooltype.ConcurrencyKey).
	ConcurrencyKey = spooltype.ConcurrencyKey
	// TranscriptMark is a point of a thread's transcript that the
	// registry recorded as durable (spooltype.TranscriptMark).
	TranscriptMark = spooltype.TranscriptMark
)

// Record kinds.
const (
	KindThread = spooltype.KindThread
	KindGraph  = spooltype.KindGraph
)

// Graph run hash fields a graph's checkpoint commits (Changes.Fields).
const (
	CurrentNodeField      = "current_node"
	StepField             = "step"
	SuppressedErrorsField = "suppressed_errors"
	ItemsDoneField        = "items_done"
	ItemsTotalField       = "items_total"
	StateSHA256Field      = "state_sha256"
)

// ArtifactsDeletedField is the hash field (in Record.Extra) that retention
// sets, to the RFC 3339 time, on a finished thread whose persisted
// artifacts (transcript, thread.json, capabilities.md, ...) it deleted.
const ArtifactsDeletedField = "artifacts_deleted_at"

// knownFields are the hash fields Record decodes; the rest go to Extra.
var knownFields = map[string]bool{
	"trace_parent": true, "trace_caller": true,
	"thread_id": true, "directive": true, "parent_id": true, "status": true, "continuation_thread_id": true,
	"continuation_of": true, "chain_root_id": true, "result": true, "outputs": true, "error": true, "cost": true,
	"limits": true, "model": true, "capabilities": true, "dropped_capabilities": true, "bundle": true, "inputs": true, "queue": true,
	"ancestors": true, "depth": true, "previous_thread_id": true, "created_at": true, "updated_at": true,
	"version": true, "cancel_requested": true, "cancel_cascade": true, "activation": true, "chain_index": true, "continuation_kind": true,
	"continuation_message": true, "started_at": true, "ledger_path": true, "waiting_for": true, "pending_approvals": true, StalledField: true, "model_override": true, "transcript_segments": true, "transcript_chain_hash": true,
	"forked_from": true, "fork_turn": true, "fork_segment": true, "fork_chain_hash": true, "fork_message": true, "workspace": true,
	"kind": true, "graph_digest": true, CurrentNodeField: true, StepField: true, "max_steps": true, SuppressedErrorsField: true,
	ItemsDoneField: true, ItemsTotalField: true, StateSHA256Field: true,
	"tenant": true, "priority": true, "idempotency_key": true, "concurrency_keys": true, "tags": true,
	"notify": true, "webhooks": true, "pause_requested": true, "paused_ms": true,
}

// parseRecord decodes a thread hash: the string fields as they are, then
// the JSON, the integer and the time fields, the first one that does not
// decode being the error; the fields it does not know go to Extra.
func parseRecord(m map[string]string) (*Record, error) {
	r := &Record{
		ThreadID: m["thread_id"], Directive: m["directive"], ParentID: m["parent_id"], Status: thread.Status(m["status"]),
		ContinuationThreadID: m["continuation_thread_id"], ContinuationOf: m["continuation_of"], ChainRootID: m["chain_root_id"],
		Result: m["result"], Model: m["model"], Bundle: m["bundle"], Queue: m["queue"],
		PreviousThreadID: m["previous_thread_id"], CancelRequested: m["cancel_requested"] == "1",
		CancelCascade:    m["cancel_cascade"] == "1",
		ContinuationKind: m["continuation_kind"], ContinuationMessage: m["continuation_message"], WaitingFor: m["waiting_for"], ModelOverride: m["model_override"],
		Transcript: TranscriptMark{ChainHash: m["transcript_chain_hash"]},
		ForkedFrom: m["forked_from"], ForkChainHash: m["fork_chain_hash"], ForkMessage: m["fork_message"], Workspace: m["workspace"],
		Kind: m["kind"], GraphDigest: m["graph_digest"], CurrentNode: m[CurrentNodeField], StateSHA256: m[StateSHA256Field],
		TraceParent: m["trace_parent"], TraceCaller: m["trace_caller"],
		Tenant: thread.TenantOrDefault(m["tenant"]), IdempotencyKey: m["idempotency_key"],
		Notify: m["notify"], Webhooks: m["webhooks"] == "1", PauseRequested: m["pause_requested"] == "1",
	}
	if r.Kind == "" {
		r.Kind = KindThread
	}
	r.TraceID = telemetry.TraceID(r.TraceParent)
	if err := parseJSONFields(r, m); err != nil {
		return nil, err
	}
	if err := parseIntFields(r, m); err != nil {
		return nil, err
	}
	if err := parseTimeFields(r, m); err != nil {
		return nil, err
	}
	r.Extra = extraFields(m)
	return r, nil
}

// badField is the error of a record's field that does not decode.
func badField(r *Record, field string, err error) error {
	return fmt.Errorf("thread %q: registry field %s: %w", r.ThreadID, field, err)
}

// parseJSONFields decodes the record's JSON fields into r, the error
// last; an empty field leaves its zero value (and Error nil).
func parseJSONFields(r *Record, m map[string]string) error {
	for _, jf := range []struct {
		name string
		v    any
	}{{"outputs", &r.Outputs}, {"cost", &r.Cost}, {"limits", &r.Limits}, {"capabilities", &r.Capabilities}, {"dropped_capabilities", &r.DroppedCapabilities},
		{"inputs", &r.Inputs}, {"ancestors", &r.Ancestors}, {"ledger_path", &r.LedgerPath}, {"pending_approvals", &r.PendingApprovals},
		{StalledField, &r.Stalled}, {"concurrency_keys", &r.ConcurrencyKeys}, {"tags", &r.Tags}} {
		if s := m[jf.name]; s != "" {
			if err := json.Unmarshal([]byte(s), jf.v); err != nil {
				return badField(r, jf.name, err)
			}
		}
	}
	if s := m["error"]; s != "" {
		r.Error = &ErrorInfo{}
		if err := json.Unmarshal([]byte(s), r.Error); err != nil {
			return badField(r, "error", err)
		}
	}
	return nil
}

// parseIntFields decodes the record's integer fields into r: the int64
// ones (version, activation, segments), then the int ones (depth, chain
// index, a graph run's step and items).
func parseIntFields(r *Record, m map[string]string) error {
	for _, f := range []struct {
		name string
		p    *int64
	}{{"version", &r.Version}, {"activation", &r.Activation}, {"transcript_segments", &r.Transcript.Segments}, {"fork_segment", &r.ForkSegment}, {"paused_ms", &r.PausedMS}} {
		if s := m[f.name]; s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return badField(r, f.name, err)
			}
			*f.p = n
		}
	}
	for _, f := range []struct {
		name string
		p    *int
	}{{"depth", &r.Depth}, {"chain_index", &r.ChainIndex}, {"fork_turn", &r.ForkTurn}, {StepField, &r.Step}, {"max_steps", &r.MaxSteps},
		{SuppressedErrorsField, &r.SuppressedErrors}, {ItemsDoneField, &r.ItemsDone}, {ItemsTotalField, &r.ItemsTotal},
		{"priority", &r.Priority}} {
		if s := m[f.name]; s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				return badField(r, f.name, err)
			}
			*f.p = n
		}
	}
	r.Priority = thread.PriorityOrDefault(r.Priority)
	return nil
}

// parseTimeFields decodes the record's RFC 3339 times into r.
func parseTimeFields(r *Record, m map[string]string) error {
	for _, f := range []struct {
		name string
		p    *time.Time
	}{{"created_at", &r.CreatedAt}, {"updated_at", &r.UpdatedAt}, {"started_at", &r.StartedAt}} {
		if s := m[f.name]; s != "" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return badField(r, f.name, err)
			}
			*f.p = t
		}
	}
	return nil
}

// extraFields are the fields of m that Record does not decode (nil when
// there are none): an extension's, or retention's ArtifactsDeletedField.
func extraFields(m map[string]string) map[string]string {
	var extra map[string]string
	for k, v := range m {
		if !knownFields[k] {
			if extra == nil {
				extra = map[string]string{}
			}
			extra[k] = v
		}
	}
	return extra
}

// parseFlat decodes a script's HGETALL reply (a flat field/value list).
func parseFlat(v any) (*Record, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("registry script: HGETALL reply is %T", v)
	}
	m := make(map[string]string, len(list)/2)
	for i := 0; i+1 < len(list); i += 2 {
		k, _ := list[i].(string)
		s, _ := list[i+1].(string)
		m[k] = s
	}
	return parseRecord(m)
}

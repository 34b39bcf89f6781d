package api_test

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/api"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// TestOpenAPIDocumentIsValid validates the checked-in document against the
// OpenAPI 3.1 specification's schema (libopenapi-validator).
func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	doc, err := libopenapi.NewDocument(api.OpenAPI)
	require.NoError(t, err)
	require.Equal(t, "3.1.0", doc.GetVersion())
	v, errs := validator.NewValidator(doc)
	require.Empty(t, errs)
	ok, verrs := v.ValidateDocument()
	for _, e := range verrs {
		t.Errorf("%s: %s (%s)", e.Message, e.Reason, e.HowToFix)
	}
	require.True(t, ok)
	_, err = doc.BuildV3Model()
	require.NoError(t, err, "every $ref resolves")
}

// TestOpenAPIDocumentMatchesRoutes: the document describes exactly the
// routes the server answers, method by method.
func TestOpenAPIDocumentMatchesRoutes(t *testing.T) {
	t.Parallel()
	doc, err := libopenapi.NewDocument(api.OpenAPI)
	require.NoError(t, err)
	m, err := doc.BuildV3Model()
	require.NoError(t, err)
	var documented []string
	for path, item := range m.Model.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().FromOldest() {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	sort.Strings(documented)
	if diff := cmp.Diff(api.Routes(), documented); diff != "" {
		t.Fatalf("routes (-served +documented):\n%s", diff)
	}
}

// TestOpenAPISchemasDeclareEveryField: every member the Go types put in
// a body is a property of its schema, so the document does not fall
// behind the types (the e2e test validates real responses against it).
func TestOpenAPISchemasDeclareEveryField(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(api.OpenAPI, &doc))
	now := time.Now()
	one, f := 1, 0.5
	s := "x"
	rec := &registry.Record{ThreadID: "d/x-1-a", Directive: "d/x", Status: thread.StatusCompleted, ParentID: "p", ChainRootID: "d/x-1-a",
		ContinuationOf: "c", ContinuationThreadID: "n", Result: "r", Outputs: map[string]any{"k": 1}, Error: &registry.ErrorInfo{Code: "c", Message: "m"},
		Cost:   thread.Cost{Turns: 1, InputTokens: 1, OutputTokens: 1, CacheReadTokens: 1, CacheWriteTokens: 1, Spend: 1, ElapsedSeconds: 1},
		Limits: thread.DefaultLimits(), Model: "m", Capabilities: []string{"c"}, DroppedCapabilities: []string{"d"}, Bundle: "b", Inputs: map[string]any{"a": 1}, Queue: "q",
		Ancestors: []string{"p"}, LedgerPath: []string{"p"}, Depth: 1, PreviousThreadID: "c", CreatedAt: now, UpdatedAt: now, Version: 3,
		CancelRequested: true, CancelCascade: true, PauseRequested: true, PausedMS: 1500, Activation: 2, ChainIndex: 1, ContinuationKind: "resume", ContinuationMessage: "m",
		StartedAt: now, Transcript: registry.TranscriptMark{Segments: 1, ChainHash: "h"}, WaitingFor: registry.WaitingForApproval, TraceID: "t",
		PendingApprovals: []registry.PendingApproval{{CallID: "c", RequestID: "r", Tool: "t", Input: json.RawMessage(`{}`), RequestedAt: now, Deadline: now, OnTimeout: "deny"}},
		Stalled:          &registry.Stall{On: registry.StalledOnStorage, Since: now, Op: "put", Error: "e"},
		WaitingKey:       "per_customer=c1", WaitingSince: &now, Position: 4}
	node := &orchestrator.TreeNode{ThreadID: "a", Directive: "d", Status: thread.StatusRunning, Model: "m", Subtree: &orchestrator.Subtree{Spent: 1, Max: 2},
		Children: []*orchestrator.TreeNode{}, Continuation: &orchestrator.TreeNode{Children: []*orchestrator.TreeNode{}}, Truncated: true,
		DroppedCapabilities: []string{"d"}}
	tenant := &spooltype.Tenant{Tenant: "acme", Weight: 1, Priority: 3, Share: 2, Running: 1, Admitted: 1, Ready: 1, Blocked: map[string]int{"concurrency": 1},
		RunsInFlight: 1, Runs: 2, Limits: spooltype.TenantLimits{MaxRunning: &one, SpendPerDay: &f, SpendPerMonth: &f, StartsPerMinute: &one, RunsInFlight: &one, OnExhausted: "wait"},
		Spend: map[string]spooltype.TenantSpend{"day": {Window: "2026-12-01", Spent: 1, Held: 1, Limit: &f}, "month": {Window: "2026-12", Limit: &f}},
		Keys:  []spooltype.TenantKey{{Rule: "per_customer", Value: "c1", Running: 2, Max: 2, Waiting: 1}}, Sources: map[string]string{"weight": "tenant"},
		Overrides: map[string]string{"weight": "2"}}
	for schema, v := range map[string]any{
		"Record":          rec,
		"Cost":            rec.Cost,
		"Limits":          rec.Limits,
		"ErrorInfo":       rec.Error,
		"TranscriptMark":  rec.Transcript,
		"TreeNode":        node,
		"Subtree":         node.Subtree,
		"Chain":           &orchestrator.Chain{Success: true, ChainLength: 1, Chain: []*registry.Record{rec}},
		"Budget":          &orchestrator.Budget{ThreadID: "a", ParentID: &s, Children: []orchestrator.BudgetChild{}},
		"BudgetChild":     orchestrator.BudgetChild{Guaranteed: true},
		"CancelResult":    &orchestrator.CancelResult{Success: true, ThreadID: "a", Status: thread.StatusCancelled, CancelRequested: true},
		"PauseResult":     &orchestrator.PauseResult{Success: true, ThreadID: "a", Status: thread.StatusPaused, PauseRequested: true, Runs: 2, Paused: 1},
		"ResumeResult":    &orchestrator.ResumeResult{OriginalThreadID: &s, NewThreadResult: rec, Run: rec},
		"PendingApproval": rec.PendingApprovals[0],
		"PendingCall":     orchestrator.PendingCall{ThreadID: "a", Directive: "d", CallID: "c", Tool: "t", Input: json.RawMessage(`{}`), RequestedAt: now, Deadline: now, RequestID: "r"},
		"Stall":           rec.Stalled,
		"DecideResult":    &orchestrator.DecideResult{ThreadID: "a", Decision: "deny", Calls: []string{"c"}, By: "b", Reason: "r", Woken: true},
		"SendResult":      &orchestrator.SendResult{ThreadID: "a", Seq: 1, Status: "running", Interrupt: true, Woken: true},
		"Event":           transcript.Event{Timestamp: now, ThreadID: "a", Seq: 1, Type: "t", Payload: json.RawMessage(`{}`)},
		"End":             api.End{ThreadID: "a", Status: thread.StatusCompleted, LastEventID: 3},
		"Delta":           spooltype.Delta{Turn: 2, Attempt: 1, CallID: "c", Tool: "t", Offset: 3, Text: "x"},
		"Problem":         &api.Problem{Type: "about:blank", Title: "t", Status: 400, Detail: "d", Instance: "/", Code: "c"},
		"RunRequest": api.RunRequest{Directive: "d", Inputs: map[string]any{"a": 1}, Model: "m", Parent: "p", Queue: "q",
			Limits: &thread.Limits{Turns: &one, Tokens: &one, Spend: &f, Depth: &one, Spawns: &one, Duration: &f}},
		"LimitOverrides": thread.Limits{Turns: &one, Tokens: &one, Spend: &f, Depth: &one, Spawns: &one, Duration: &f},
		"CancelRequest":  api.CancelRequest{Cascade: new(bool)},
		"PauseRequest":   api.PauseRequest{Tree: true},
		"ResumeRequest":  api.ResumeRequest{Message: "m"},
		"ApproveRequest": api.ApproveRequest{CallID: "c", RequestID: "r", Reason: "r", By: "b"},
		"DenyRequest":    api.DenyRequest{CallID: "c", RequestID: "r", Reason: "r", By: "b"},
		"SendRequest":    api.SendRequest{Message: "m", By: "b"},
		"ForkRequest":    api.ForkRequest{AtTurn: 1, Message: "m", Model: "m"},
		"DecisionLink": api.DecisionLink{Decision: "approve", Call: orchestrator.PendingCall{ThreadID: "a", Directive: "d", CallID: "c", Tool: "t",
			Input: json.RawMessage(`{}`), RequestedAt: now}},
		"DecisionLinkRequest": api.DecisionLinkRequest{Reason: "r"},
		"Tenant":              tenant,
		"TenantLimits":        tenant.Limits,
		"TenantSpend":         tenant.Spend["day"],
		"TenantKey":           tenant.Keys[0],
		"AdmissionState":      spooltype.AdmissionState{On: true, Digest: "sha256:x", Version: 1},
	} {
		props, ok := doc.Components.Schemas[schema]
		require.True(t, ok, "schema %s", schema)
		b, err := json.Marshal(v)
		require.NoError(t, err)
		var fields map[string]any
		require.NoError(t, json.Unmarshal(b, &fields))
		for k := range fields {
			require.Contains(t, props.Properties, k, "schema %s lacks %q", schema, k)
		}
	}
}

// TestOpenAPIRefusalsRead: the descriptions of a graph run's start and of
// a deny say in plain words what the server answers (e2e TestGraphAPI
// and TestGraphWaitSaysWhatItWaitsFor hold it to them): 400 bad_request
// for a body it cannot read, 422 refused for inputs the graph's schema
// does not accept; a denial's reason goes to a thread's model, or into a
// graph run's result.
func TestOpenAPIRefusalsRead(t *testing.T) {
	t.Parallel()
	var doc struct {
		Paths map[string]map[string]struct {
			Description string `json:"description"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(api.OpenAPI, &doc))
	start := doc.Paths["/v1/graphs"]["post"].Description
	require.Contains(t, start, "a malformed graph name or a bad limit is 400 (bad_request)")
	require.Contains(t, start, "Refused with 422 before anything starts: a graph that does not validate, or inputs that its inputs schema does not accept (code refused)")
	deny := doc.Paths["/v1/threads/{id}/deny"]["post"].Description
	require.Contains(t, deny, "The reason goes to a thread's model as the call's error; a graph run's approval node gets it in its result (result.reason)")
}

// TestOpenAPIStatuses: every status enum of the document (a record's, a
// bulk operation's filter) is thread.Statuses, in lifecycle order, so a
// new status (paused) cannot be left out of it.
func TestOpenAPIStatuses(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(api.OpenAPI, &doc))
	var want []string
	for _, s := range thread.Statuses {
		want = append(want, string(s))
	}
	var status struct {
		Enum []string `json:"enum"`
	}
	require.NoError(t, json.Unmarshal(doc.Components.Schemas["Status"], &status))
	require.Equal(t, want, status.Enum, "Status")
	var bulk struct {
		Properties struct {
			Status struct {
				Enum []string `json:"enum"`
			} `json:"status"`
			Filter struct {
				Properties struct {
					Status struct {
						Enum []string `json:"enum"`
					} `json:"status"`
				} `json:"properties"`
			} `json:"filter"`
		} `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(doc.Components.Schemas["BulkRequest"], &bulk))
	require.Equal(t, want, bulk.Properties.Status.Enum, "BulkRequest.status")
	require.NoError(t, json.Unmarshal(doc.Components.Schemas["BulkOperation"], &bulk))
	require.Equal(t, want, bulk.Properties.Filter.Properties.Status.Enum, "BulkOperation.filter.status")
}

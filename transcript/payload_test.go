package transcript

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

func event(t *testing.T, typ string, payload any) Event {
	t.Helper()
	raw, err := json.Marshal(payload)
	require.NoError(t, err)
	return Event{Timestamp: time.Date(2026, 2, 17, 10, 0, 0, 0, time.UTC), ThreadID: "t/x-1", Seq: 1, Type: typ, Payload: raw}
}

// TestRenderAndSearchEventPayloads: each payload type shows its fields in
// the knowledge render, and error text is what search looks at.
func TestRenderAndSearchEventPayloads(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		ev         Event
		wantRender []string
		wantSearch string // "" skips
	}{
		{name: "error", ev: event(t, TypeThreadError, Error{Class: "permanent", Code: "provider_permanent", Message: "provider permanent: no turn 2"}),
			wantRender: []string{"> **error** permanent provider permanent: no turn 2\n"}, wantSearch: "permanent provider_permanent provider permanent: no turn 2"},
		{name: "limit", ev: event(t, TypeLimitExceeded, LimitExceeded{Code: thread.CodeTurnsExceeded, Current: 1, Max: 1}),
			wantRender: []string{"> **limit** turns_exceeded: 1 of 1\n"}},
		{name: "child", ev: event(t, TypeChildSpawned, ChildSpawned{ChildID: "t/kid-1-a", Directive: "t/kid"}),
			wantRender: []string{"> spawned child `t/kid-1-a` (t/kid)\n"}},
		{name: "child without capabilities", ev: event(t, TypeChildSpawned, ChildSpawned{ChildID: "t/kid-1-a", Directive: "t/kid", DroppedCapabilities: []string{"rye.execute.tool.t.x"}}),
			wantRender: []string{"> spawned child `t/kid-1-a` (t/kid)\n", "> **runs without** `rye.execute.tool.t.x`: this thread does not hold them\n"}},
		{name: "waiting", ev: event(t, TypeThreadWaiting, ThreadWaiting{ChildIDs: []string{"t/kid-1-a", "t/kid-2-b"}}),
			wantRender: []string{"> waiting on `t/kid-1-a`, `t/kid-2-b`\n"}},
		{name: "cancelled", ev: event(t, TypeThreadCancelled, ThreadCancelled{Reason: "cancelled during the model call"}),
			wantRender: []string{"> **cancelled** cancelled during the model call\n"}},
		{name: "failed thread", ev: event(t, TypeThreadCompleted, ThreadCompleted{Status: "error", Error: &Error{Code: "turns_exceeded", Message: "turns 1 of 1"}}),
			wantRender: []string{"## Ended: error\n", "> **error** turns_exceeded turns 1 of 1\n"}},
		{name: "completed thread", ev: event(t, TypeThreadCompleted, ThreadCompleted{Status: "completed", Result: "done"}),
			wantRender: []string{"## Completed\n\ndone\n"}},
		{name: "hook error", ev: event(t, TypeHookFired, HookFired{HookID: "h", Event: "thread_started", Action: "load", Error: "capability rye.load.knowledge.x not held"}),
			wantRender: []string{"> **hook error** `h` (thread_started): capability rye.load.knowledge.x not held\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			md := string(RenderKnowledge(KnowledgeMeta{ThreadID: "t/x-1", Directive: "t/x"}, []Event{tc.ev}))
			for _, want := range tc.wantRender {
				require.Contains(t, md, want)
			}
			if tc.wantSearch != "" {
				require.Equal(t, tc.wantSearch, SearchText(tc.ev))
			}
		})
	}
}

// TestPayloadsReadLegacyKeys: transcripts signed before the worker wrote
// these payload types keep their keys; renders and search still read them.
func TestPayloadsReadLegacyKeys(t *testing.T) {
	t.Parallel()
	legacyErr := event(t, TypeThreadError, map[string]any{"error": "provider transient (HTTP 503): overloaded", "classification": "transient", "status_code": 503, "attempt": 0})
	var e Error
	require.NoError(t, legacyErr.Decode(&e))
	require.Equal(t, Error{Class: "transient", Message: "provider transient (HTTP 503): overloaded"}, e)
	require.Equal(t, "transient provider transient (HTTP 503): overloaded", SearchText(legacyErr))

	legacyLimit := event(t, TypeLimitExceeded, map[string]any{"limit_code": "spend_exceeded", "current_value": 0.5, "current_max": 0.25})
	var l LimitExceeded
	require.NoError(t, legacyLimit.Decode(&l))
	require.Equal(t, LimitExceeded{Code: "spend_exceeded", Current: 0.5, Max: 0.25}, l)

	legacyChild := event(t, TypeChildSpawned, map[string]any{"child_thread_id": "t/kid-1-a", "directive": "t/kid", "async": true})
	var c ChildSpawned
	require.NoError(t, legacyChild.Decode(&c))
	require.Equal(t, ChildSpawned{ChildID: "t/kid-1-a", Directive: "t/kid", Async: true}, c)

	legacyDone := event(t, TypeThreadCompleted, map[string]any{"status": "error", "result": "", "outputs": nil,
		"error": map[string]any{"code": "turns_exceeded", "message": "turns 2 of 2"}, "cost": thread.Cost{Turns: 2}})
	md := string(RenderKnowledge(KnowledgeMeta{ThreadID: "t/x-1", Directive: "t/x"}, []Event{legacyErr, legacyLimit, legacyChild, legacyDone}))
	for _, want := range []string{"> **error** transient provider transient (HTTP 503): overloaded\n", "> **limit** spend_exceeded: 0.5 of 0.25\n",
		"> spawned child `t/kid-1-a` (t/kid)\n", "## Ended: error\n", "> **error** turns_exceeded turns 2 of 2\n"} {
		require.Contains(t, md, want)
	}

	// The current keys win over legacy ones when both are there.
	var both Error
	require.NoError(t, json.Unmarshal([]byte(`{"message":"new","class":"permanent","error":"old","classification":"transient"}`), &both))
	require.Equal(t, Error{Class: "permanent", Message: "new"}, both)
	require.False(t, strings.Contains(SearchText(event(t, TypeThreadError, Error{Message: "x"})), "{"), "typed errors are searched by their text, not their JSON")
}

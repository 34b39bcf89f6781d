package worker

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/transcript"
)

// TestPendingKinds: a checkpoint's pending step, as runs in flight have
// written it, is read back as the kind its name says, and written again
// in the same shape, so a run checkpointed before a change to the kinds
// resumes after it; a kind no code knows is a state that does not
// verify, not a step run as some other kind.
func TestPendingKinds(t *testing.T) {
	t.Parallel()
	// Written by the walker as it was when each kind was a branch on
	// pendingStep.Kind (the shape State.Extra["graph"] holds).
	stored := map[string]struct {
		json   string
		kind   pendingKind
		reason string
	}{
		"child": {`{"step":2,"node":"review","kind":"child","attempt":1,"started_at":"2026-01-02T03:04:05Z","planned":1,"next_item":1,"items":1}`,
			childStep{}, transcript.ReasonWaitingChildren},
		"foreach": {`{"step":3,"node":"each","kind":"foreach","attempt":2,"started_at":"2026-01-02T03:04:05Z","planned":4,"settled":2,"next_item":4,"items":9,"stopping":true}`,
			foreachStep{}, transcript.ReasonWaitingChildren},
		"wait": {`{"step":4,"node":"join","kind":"wait","attempt":1,"started_at":"2026-01-02T03:04:05Z","planned":2,"next_item":0,"items":2,"threads":["g/a","g/b"]}`,
			waitStep{}, transcript.ReasonWaitingChildren},
		"approval": {`{"step":5,"node":"sign_off","kind":"approval","attempt":1,"started_at":"2026-01-02T03:04:05Z","next_item":0,"call_id":"5",` +
			`"approval":{"call_id":"5","request_id":"r1","tool":"graph:approval","input":{"prompt":"ship?"},"requested_at":"2026-01-02T03:04:05Z","on_timeout":"deny"}}`,
			approvalStep{}, transcript.ReasonWaitingApproval},
		"sleep": {`{"step":6,"node":"nap","kind":"sleep","attempt":1,"started_at":"2026-01-02T03:04:05Z","next_item":0,"wake_at":"2026-01-02T03:19:05Z"}`,
			sleepStep{}, transcript.ReasonRetryWait},
	}
	for name, c := range stored {
		var p pendingStep
		require.NoError(t, json.Unmarshal([]byte(c.json), &p), name)
		require.Equal(t, name, p.Kind)
		require.IsType(t, c.kind, p.kind(), name)
		require.Equal(t, c.reason, p.kind().reason(), name)
		_, isChildren := p.kind().(childKind)
		require.Equal(t, name != pendingApproval && name != pendingSleep, isChildren, "%s: a step of children has a window", name)
		again, err := json.Marshal(&p)
		require.NoError(t, err)
		require.JSONEq(t, c.json, string(again), "%s is written in the shape it was read in", name)
	}

	t.Run("a resumed run sleeps to the same end", func(t *testing.T) {
		t.Parallel()
		var p pendingStep
		require.NoError(t, json.Unmarshal([]byte(stored["sleep"].json), &p))
		keep, err := p.kind().carry(context.Background(), nil, "g/run-1", &p)
		require.NoError(t, err)
		require.NotNil(t, keep)
		require.Equal(t, p.WakeAt, keep.WakeAt)
		require.Equal(t, p.StartedAt, keep.StartedAt)
	})

	t.Run("a kind no code knows does not verify", func(t *testing.T) {
		t.Parallel()
		p := &pendingStep{Step: 3, Node: "each", Kind: "tool"}
		require.Nil(t, p.kind())
		err := (&graphRun{}).carryPending(context.Background(), "g/run-1", p, &transcript.Transcript{})
		require.ErrorIs(t, err, errStateInvalid)
	})
}

package worker

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

func TestKnowledgeThreadIDs(t *testing.T) {
	t.Parallel()
	for ref, want := range map[string][]string{
		// A thread id alone: it holds its directive's slashes.
		"t/source-1739820456-abc": {"t/source-1739820456-abc", "source-1739820456-abc"},
		// "<directive>/<thread id>", as the reference lays knowledge out.
		"t/source/t/source-1739820456-abc": {"t/source/t/source-1739820456-abc", "source/t/source-1739820456-abc",
			"t/source-1739820456-abc", "source-1739820456-abc"},
		"plain-1": {"plain-1"},
		"x/":      {"x/"},
	} {
		if diff := cmp.Diff(want, knowledgeThreadIDs(ref)); diff != "" {
			t.Errorf("knowledgeThreadIDs(%q) (-want +got):\n%s", ref, diff)
		}
	}
}

func TestCarriedTurns(t *testing.T) {
	t.Parallel()
	conv := agentConversation(3)
	seed := func(msgs ...thread.Message) []thread.Message {
		return append(msgs, thread.Message{Role: thread.RoleUser, Content: continueMessage})
	}
	trailing, kept := trailingMessages(conv, tokens(conv[3:]))
	for name, tc := range map[string]struct {
		seed []thread.Message
		want int
	}{
		"handoff window with the note": {seed(trailing...), 2}, // turns 2 and 3 with their results
		"whole conversation (resume)":  {seed(conv...), 3},
		"nothing carried":              {seed(), 0},
	} {
		require.Equal(t, tc.want, carriedTurns(tc.seed), name)
	}
	// The window is the note, then turns 2 and 3 with their results.
	require.Equal(t, omittedTurnsNote, trailing[0].Content)
	require.Equal(t, 4, kept)
	require.Len(t, trailing, 5)
}

func TestStringOutputs(t *testing.T) {
	t.Parallel()
	got := stringOutputs(map[string]any{"path": "notes/a.txt", "count": float64(3), "tags": []any{"a", "b"}, "none": nil})
	want := map[string]string{"path": "notes/a.txt", "count": "3", "tags": `["a","b"]`, "none": "null"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stringOutputs (-want +got):\n%s", diff)
	}
	if stringOutputs(nil) != nil {
		t.Error("no outputs: nil, left out of the payload")
	}
}

func TestPendingThreads(t *testing.T) {
	t.Parallel()
	got := pendingThreads([]pending{
		{CallID: "c1", Kind: "spawn", Threads: []string{"k1"}},
		{CallID: "c2", Kind: "wait", Threads: []string{"k2", "k1", "k3"}},
	})
	if diff := cmp.Diff([]string{"k1", "k2", "k3"}, got); diff != "" {
		t.Errorf("pendingThreads (-want +got):\n%s", diff)
	}
}

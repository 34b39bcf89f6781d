package transcript

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

// TestTurnsAndForkAt writes a thread that opens with carried messages
// (turn 0, as a continuation or a fork does), then three model turns,
// one segment each, the second of which spawns a child whose result comes
// in the next segment; Turns must find the three turns with their
// results, and ForkAt cut each at the end of its last result, naming the
// segment that holds it.
func TestTurnsAndForkAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSetup(t)
	w := s.writer(t)
	call := func(id, tool string) thread.ToolCall {
		return thread.ToolCall{ID: id, Name: tool, Input: json.RawMessage(`{"k":"` + id + `"}`)}
	}
	checkpoint := func() {
		t.Helper()
		_, err := w.Checkpoint(ctx, State{})
		require.NoError(t, err)
	}
	// Segment 1: carried messages, then turn 1.
	mustAppend(t, w, TypeCognitionIn, CognitionIn{Content: "prompt"})
	mustAppend(t, w, TypeCognitionOut, CognitionOut{Content: "carried", ToolCalls: []thread.ToolCall{call("c0", "x")}})
	mustAppend(t, w, TypeToolCallResult, ToolCallResult{CallID: "c0", Tool: "x", Output: "carried result"})
	mustAppend(t, w, TypeCognitionOut, CognitionOut{ToolCalls: []thread.ToolCall{call("c1", "fs")}, Turn: 1, Spend: 0.25})
	mustAppend(t, w, TypeToolCallResult, ToolCallResult{CallID: "c1", Tool: "fs", Output: "r1"})
	checkpoint()
	// Segment 2: turn 2 spawns; its result comes in segment 3.
	mustAppend(t, w, TypeCognitionOut, CognitionOut{ToolCalls: []thread.ToolCall{call("c2", "spawn"), call("c3", "fs")}, Turn: 2, Spend: 0.5})
	mustAppend(t, w, TypeChildSpawned, ChildSpawned{ChildID: "kid-1", Directive: "k"})
	mustAppend(t, w, TypeToolCallResult, ToolCallResult{CallID: "c3", Tool: "fs", Output: "r3", IsError: true})
	checkpoint()
	mustAppend(t, w, TypeToolCallResult, ToolCallResult{CallID: "c2", Tool: "spawn", Output: "kid done"})
	mustAppend(t, w, TypeCognitionIn, CognitionIn{Content: "a person's message"})
	// Turn 3 ends the thread: its call has no result.
	mustAppend(t, w, TypeCognitionOut, CognitionOut{Content: "bye", ToolCalls: []thread.ToolCall{call("c4", "return")}, Turn: 3, Spend: 1})
	checkpoint()

	tr := s.read(t, Strict)
	turns, err := Turns(tr.Events)
	require.NoError(t, err)
	require.Len(t, turns, 3)
	for i, tn := range turns {
		require.Equal(t, i+1, tn.N)
	}
	require.Equal(t, []ToolCallResult{{CallID: "c1", Tool: "fs", Output: "r1"}}, turns[0].Results)
	require.Equal(t, []string{"c3", "c2"}, []string{turns[1].Results[0].CallID, turns[1].Results[1].CallID}, "results in the order recorded")
	r, _, ok := turns[1].Result("c2")
	require.True(t, ok)
	require.Equal(t, "kid done", r.Output)
	require.Empty(t, turns[2].Results)
	require.Equal(t, turns[2].Seq, turns[2].EndSeq)

	seqOf := func(typ, callID string) int64 {
		for _, ev := range tr.Events {
			var p ToolCallResult
			if ev.Type == typ && ev.Decode(&p) == nil && p.CallID == callID {
				return ev.Seq
			}
		}
		t.Fatalf("no %s for %s", typ, callID)
		return 0
	}
	tests := []struct {
		turn     int
		seq      int64
		segment  int64
		spend    float64
		children []string
	}{
		{1, seqOf(TypeToolCallResult, "c1"), 1, 0.25, nil},
		{2, seqOf(TypeToolCallResult, "c2"), 3, 0.75, []string{"kid-1"}},
		{3, turns[2].Seq, 3, 1.75, []string{"kid-1"}},
	}
	for _, tc := range tests {
		pt, err := tr.ForkAt(tc.turn)
		require.NoError(t, err)
		require.Equal(t, tc.seq, pt.Seq, "turn %d", tc.turn)
		require.Equal(t, tc.segment, pt.Segment, "turn %d", tc.turn)
		require.Equal(t, tr.Segments[tc.segment-1].ChainHash, pt.ChainHash)
		require.InDelta(t, tc.spend, pt.Spend, 1e-12)
		require.Equal(t, tc.children, pt.Children)
		require.Equal(t, 3, pt.Turns)
		prefix := tr.Prefix(pt.Seq)
		require.Equal(t, tc.seq, prefix[len(prefix)-1].Seq)
	}
	// The person's message after turn 2's results is not in its prefix.
	pt, err := tr.ForkAt(2)
	require.NoError(t, err)
	msgs, err := Reconstruct(tr.Prefix(pt.Seq))
	require.NoError(t, err)
	require.Equal(t, thread.RoleTool, msgs[len(msgs)-1].Role)
	require.Equal(t, "kid done", msgs[len(msgs)-1].Content)

	for _, n := range []int{0, 4} {
		_, err := tr.ForkAt(n)
		var te *TurnError
		require.True(t, errors.As(err, &te), "turn %d: %v", n, err)
		require.Equal(t, 3, te.Turns)
	}
}

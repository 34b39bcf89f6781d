package transcript

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestObserve: an observer gets every line appended from then on, exactly
// as the segment holds it, and the lines buffered before; nil stops it.
func TestObserve(t *testing.T) {
	s := newSetup(t)
	w := s.writer(t)
	ctx := context.Background()
	if _, err := w.Append(TypeCognitionIn, CognitionIn{Content: "committed"}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Checkpoint(ctx, State{Iteration: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(TypeCognitionIn, CognitionIn{Content: "buffered <&>"}); err != nil {
		t.Fatal(err)
	}
	var seen [][]byte
	buffered := w.Observe(func(line []byte) { seen = append(seen, bytes.Clone(line)) })
	require.Len(t, buffered, 1, "buffered")
	w.AppendDelta("to")
	s.clock.Add(time.Second) // past the delta interval: the next delta flushes
	w.AppendDelta("ken")
	if _, err := w.Append(TypeToolCallStart, ToolCallStart{CallID: "c1", Tool: "rye/file-system/fs_read"}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Checkpoint(ctx, State{Iteration: 2}); err != nil {
		t.Fatal(err)
	}
	w.Observe(nil)
	if _, err := w.Append(TypeCognitionIn, CognitionIn{Content: "unseen"}); err != nil {
		t.Fatal(err)
	}

	got := slices.Concat(buffered, seen)
	tr := s.read(t, Strict)
	// The second segment: the buffered line, the deltas and the tool call,
	// then its checkpoint (not observed: it is not an event appended).
	seg := tr.Events[2:]
	require.Len(t, got, len(seg)-1, "observed %d lines, the segment has %d events before its checkpoint:\n%s", len(got), len(seg)-1, bytes.Join(got, []byte("\n")))
	for i, line := range got {
		var ev Event
		require.NoError(t, json.Unmarshal(line, &ev), "line %d %q", i, line)
		want, _ := json.Marshal(seg[i])
		have, _ := json.Marshal(ev)
		require.Equal(t, want, have, "line %d", i)
	}
	for _, line := range got {
		require.False(t, bytes.Contains(line, []byte("unseen")), "observed after Observe(nil)")
	}
}

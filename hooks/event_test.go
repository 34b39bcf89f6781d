package hooks

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/config"
)

// TestToolErrorContext: a tool failure's error event carries the spec's
// error and classification, says it came from a tool, keeps its message
// bounded on a rune boundary, and runs the item actions of error hooks
// (conditions can pick tool failures) but none of the builtin control hooks.
func TestToolErrorContext(t *testing.T) {
	t.Parallel()
	evctx := ToolErrorContext("t-1", "rye/file-system/fs_read", "call_1_1", "no such file: missing.txt", ClassPermanent)
	want := map[string]any{"thread_id": "t-1", "error": "no such file: missing.txt", "classification": ClassPermanent, "attempt": 1,
		"source": SourceTool, "tool": "rye/file-system/fs_read", "call_id": "call_1_1"}
	if diff := cmp.Diff(want, evctx); diff != "" {
		t.Errorf("context (-want +got):\n%s", diff)
	}
	if got := ErrorContext("t-1", "x", ClassTransient, 1, 0)["source"]; got != SourceModel {
		t.Errorf("model error source = %v", got)
	}

	long := strings.Repeat("é", maxToolErrorBytes) // 2 bytes a rune: the cut falls inside one
	msg := ToolErrorContext("t-1", "x", "c", long, ClassPermanent)["error"].(string)
	if len(msg) > maxToolErrorBytes+len("…") || !utf8.ValidString(msg) || !strings.HasSuffix(msg, "…") {
		t.Errorf("long message cut to %d bytes, valid %v", len(msg), utf8.ValidString(msg))
	}

	only := Hook{ID: "note_tool_errors", Event: EventError, Condition: &Condition{Path: "source", Op: OpEq, Value: SourceTool},
		Action: Action{Primary: PrimaryExecute, ItemType: "tool", ItemID: "notes/append", Params: map[string]any{"text": "${classification}: ${error}"}}}
	d := NewDispatcher(Merge(nil, []Hook{only}, Builtin(config.DefaultRetryPolicy()), nil, nil))
	r := &fakeRunner{}
	outs, err := d.Run(context.Background(), EventError, evctx, r)
	require.NoError(t, err, "run: %v %+v", err, outs)
	require.Len(t, outs, 1, "run: %v", err)
	wantCalls := []call{{"execute", "tool", "notes/append", map[string]any{"text": "permanent: no such file: missing.txt"}}}
	if diff := cmp.Diff(wantCalls, r.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	r = &fakeRunner{}
	outs, _ = d.Run(context.Background(), EventError, ErrorContext("t-1", "boom", ClassPermanent, 1, 0), r)
	require.Empty(t, outs, "a model error ran the tool-only hook")
}

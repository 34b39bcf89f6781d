package history

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

func TestJSONDiff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b       string
		same       bool
		path, x, y string
	}{
		{`{"a":1,"b":[1,2]}`, `{"b":[1,2],"a":1.0}`, true, "", "", ""},
		{`{"a":{"b":"x"}}`, `{"a":{"b":"y"}}`, false, ".a.b", `"x"`, `"y"`},
		{`{"ids":["p","q"]}`, `{"ids":["p"]}`, false, ".ids[1]", `"q"`, "nothing"},
		{`{"a":1}`, `{"a":1,"z":true}`, false, ".z", "nothing", "true"},
		{`[1]`, `{"a":1}`, false, "", "[1]", `{"a":1}`},
		{`not json`, `not json`, true, "", "", ""},
		{`not json`, `not JSON`, false, "", "not json", "not JSON"},
	}
	for _, tc := range tests {
		path, x, y, same := jsonDiff([]byte(tc.a), []byte(tc.b))
		require.Equal(t, tc.same, same, "%s vs %s", tc.a, tc.b)
		require.Equal(t, tc.path, path, "%s vs %s", tc.a, tc.b)
		require.Equal(t, tc.x, x)
		require.Equal(t, tc.y, y)
	}
}

// TestNormalizeResult: what two runs cannot share is left out of a
// child's result, nothing else.
func TestNormalizeResult(t *testing.T) {
	t.Parallel()
	a := normalizeResult(`{"thread_id":"k","status":"completed","cost":{"turns":2,"spend":0.1,"elapsed_seconds":1.5},"result":"x"}`)
	b := normalizeResult(`{"result":"x","status":"completed","thread_id":"k","cost":{"turns":2,"spend":0.2,"elapsed_seconds":0.2}}`)
	require.JSONEq(t, string(a), string(b))
	require.JSONEq(t, `{"cost":1,"elapsed":2}`, string(normalizeResult(`{"cost":1,"elapsed_seconds":3,"elapsed":2}`)))
	require.Equal(t, `"plain text\n"`, string(normalizeResult("plain text\n")))
}

func turn(n int, calls []thread.ToolCall, results ...transcript.ToolCallResult) transcript.Turn {
	tn := transcript.Turn{N: n, Out: transcript.CognitionOut{ToolCalls: calls, Turn: n}, Results: results}
	tn.ResultTimes = make([]time.Time, len(results))
	return tn
}

func TestCompareTurns(t *testing.T) {
	t.Parallel()
	call := func(id, tool, in string) thread.ToolCall {
		return thread.ToolCall{ID: id, Name: tool, Input: json.RawMessage(in)}
	}
	res := func(id, out string, isErr bool) transcript.ToolCallResult {
		return transcript.ToolCallResult{CallID: id, Output: out, IsError: isErr}
	}
	rec := turn(2, []thread.ToolCall{call("a", "fs", `{"p":"x"}`)}, res("a", "ok", false))
	tests := []struct {
		name string
		rep  transcript.Turn
		kind string
		path string
	}{
		{"same, other call ids", turn(2, []thread.ToolCall{call("z", "fs", `{"p": "x"}`)}, res("z", "ok", false)), "", ""},
		{"other tool", turn(2, []thread.ToolCall{call("z", "net", `{"p":"x"}`)}, res("z", "ok", false)), KindTool, ""},
		{"more calls", turn(2, []thread.ToolCall{call("z", "fs", `{"p":"x"}`), call("y", "fs", `{}`)}), KindTool, ""},
		{"input", turn(2, []thread.ToolCall{call("z", "fs", `{"p":"y"}`)}, res("z", "ok", false)), KindInput, ".p"},
		{"result", turn(2, []thread.ToolCall{call("z", "fs", `{"p":"x"}`)}, res("z", "ko", false)), KindResult, ""},
		{"error flag", turn(2, []thread.ToolCall{call("z", "fs", `{"p":"x"}`)}, res("z", "ok", true)), KindResult, ""},
		{"no result", turn(2, []thread.ToolCall{call("z", "fs", `{"p":"x"}`)}), KindResult, ""},
	}
	for _, tc := range tests {
		d := compareTurn(&rec, &tc.rep)
		if tc.kind == "" {
			require.Nil(t, d, tc.name)
			continue
		}
		require.NotNil(t, d, tc.name)
		require.Equal(t, tc.kind, d.Kind, tc.name)
		require.Equal(t, 2, d.Turn, tc.name)
		require.Equal(t, tc.path, d.Path, tc.name)
	}
}

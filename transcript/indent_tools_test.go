package transcript

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

// TestIndentToolsIsMarshalIndent: capabilities.md's tool list is what
// json.MarshalIndent writes, byte for byte, whether the tools' objects
// come from the cache or not.
func TestIndentToolsIsMarshalIndent(t *testing.T) {
	read := thread.ToolDef{Name: "rye/file-system/fs_read", Description: "Read a file <of> the workspace & more", InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"é"}},"required":["path"]}`)}
	write := thread.ToolDef{Name: "rye/file-system/fs_write", Description: "Write", InputSchema: json.RawMessage(` { "type" : "object" } `)}
	bare := thread.ToolDef{Name: "directive_return"}
	sameNameOtherSchema := read
	sameNameOtherSchema.InputSchema = json.RawMessage(`{"type":"object"}`)
	for _, tools := range [][]thread.ToolDef{nil, {}, {read}, {read, write, bare}, {bare, read}, {sameNameOtherSchema, write}, {read, write, bare}} {
		want, err := json.MarshalIndent(tools, "", "  ")
		require.NoError(t, err)
		got, err := indentTools(tools)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	}
	_, err := indentTools([]thread.ToolDef{{Name: "bad", InputSchema: json.RawMessage(`{`)}})
	require.Error(t, err)
}

func BenchmarkRenderCapabilities(b *testing.B) {
	tools := benchToolDefs()
	b.ReportAllocs()
	for b.Loop() {
		_, err := RenderCapabilities("agency-kiwi/discover_leads-1739820456", tools, benchCapabilities)
		require.NoError(b, err)
	}
}

// TestFence: a fence is longer than the longest run of backticks in what
// it fences, and at least three.
func TestFence(t *testing.T) {
	for s, want := range map[string]string{"": "```", "a`b``c": "```", "````": "`````", "x```y````": "`````", "é`é``é```": "````", "`": "```"} {
		require.Equal(t, want, fence(s), "%q", s)
	}
}

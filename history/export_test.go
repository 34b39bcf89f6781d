package history

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/thread"
)

// TestTemplatedPlaysBack writes strings as the export does and plays them
// through the scripted provider: what comes back is the recorded text,
// with the ids of the thread that plays it.
func TestTemplatedPlaysBack(t *testing.T) {
	t.Parallel()
	ids := idTemplates("t/a-1-aaaaaaaaaa", "t/p-1-pppppppppp", "", []string{"t/k-1-kkkkkkkkkk", "t/k-1-kkkkkkkkk2"})
	tests := []struct{ in, tmpl string }{
		{"plain", "plain"},
		{"{{.inputs.x}} literal", `{{"{{"}}.inputs.x}} literal`},
		{"{{", `{{"{{"}}`},
		{"a }} b {{{{", `a }} b {{"{{"}}{{"{{"}}`},
		{"t/k-1-kkkkkkkkkk", "{{index .children 0}}"},
		{"wait for t/k-1-kkkkkkkkk2 and t/k-1-kkkkkkkkkk of t/p-1-pppppppppp",
			"wait for {{index .children 1}} and {{index .children 0}} of {{.parent_id}}"},
		{"me: t/a-1-aaaaaaaaaa {{x}}", `me: {{.thread_id}} {{"{{"}}x}}`},
	}
	for _, tc := range tests {
		got := templated(tc.in, ids)
		require.Equal(t, tc.tmpl, got, tc.in)
		// Played by a thread of other ids, the script says the same with
		// those ids.
		script := "directives:\n  t/a:\n    - text: " + yamlQuote(got) + "\n"
		s, err := provider.ParseScript("t", []byte(script))
		require.NoError(t, err)
		msgs := []thread.Message{
			{Role: thread.RoleAssistant, ToolCalls: []thread.ToolCall{{ID: "1", Name: provider.SpawnTool}}},
			{Role: thread.RoleTool, ToolName: provider.SpawnTool, ToolCallID: "1", Content: `{"success":true,"thread_id":"NEW-K0"}`},
			{Role: thread.RoleTool, ToolName: provider.SpawnTool, ToolCallID: "2", Content: `{"thread_id":"NEW-K1","status":"completed"}`},
		}
		resp, err := s.Complete(t.Context(), &provider.Request{Messages: msgs, Thread: provider.ThreadInfo{
			ID: "NEW-A", Directive: "t/a", ParentID: "NEW-P", Turn: 1}}, nil)
		require.NoError(t, err)
		want := tc.in
		for old, new := range map[string]string{"t/k-1-kkkkkkkkkk": "NEW-K0", "t/k-1-kkkkkkkkk2": "NEW-K1", "t/p-1-pppppppppp": "NEW-P", "t/a-1-aaaaaaaaaa": "NEW-A"} {
			want = strings.ReplaceAll(want, old, new)
		}
		require.Equal(t, want, resp.Text, tc.in)
	}
}

func yamlQuote(s string) string {
	out := `"`
	for _, r := range s {
		switch r {
		case '"', '\\':
			out += `\` + string(r)
		default:
			out += string(r)
		}
	}
	return out + `"`
}

package provider

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

func TestContextUsage(t *testing.T) {
	t.Parallel()
	// Nothing added: exactly the provider's count.
	used, ratio := ContextUsage(90000, nil, 100000)
	require.Equal(t, 90000, used)
	require.InDelta(t, 0.9, ratio, 1e-12)

	// Unknown window: ratio 0, used still reported.
	used, ratio = ContextUsage(500, nil, 0)
	require.Equal(t, 500, used)
	require.Zero(t, ratio)

	since := []thread.Message{
		{Role: thread.RoleAssistant, Content: "calling", ToolCalls: []thread.ToolCall{{ID: "c", Name: "rye/file-system/fs_read", Input: json.RawMessage(`{"path":"a.txt"}`)}}},
		{Role: thread.RoleTool, ToolCallID: "c", Content: strings.Repeat("x", 4000)},
	}
	used, ratio = ContextUsage(10000, since, 200000)
	require.Greater(t, used, 10000+1000, "the tool result (~1000 tokens) is counted")
	require.Less(t, used, 10000+1200)
	require.InDelta(t, float64(used)/200000, ratio, 1e-12)

	// Dense JSON/punctuation is estimated above len/4.
	dense := strings.Repeat(`{"a":1},`, 500) // 4000 bytes, ~3000 punctuation runes
	used, _ = ContextUsage(0, []thread.Message{{Role: thread.RoleTool, Content: dense}}, 1)
	require.Greater(t, used, len(dense)/4*2)
}

package worker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

// turnConversation is a conversation whose last answer made three tool
// calls, the first answered, followed by a message a person sent.
func turnConversation() conversation {
	return conversation{
		{Role: thread.RoleUser, Content: "go"},
		{Role: thread.RoleAssistant, Content: "first answer"},
		{Role: thread.RoleUser, Content: "more"},
		{Role: thread.RoleAssistant, ToolCalls: []thread.ToolCall{{ID: "c-1"}, {ID: "c-2"}, {ID: "c-3"}}},
		{Role: thread.RoleTool, ToolCallID: "c-1", Content: "done"},
		{Role: thread.RoleUser, Content: "stop"},
	}
}

// TestConversation: what the conversation says of its last answer (its
// text, the place of a call, the calls still unanswered) and of the
// messages after it.
func TestConversation(t *testing.T) {
	t.Parallel()
	c := turnConversation()
	require.Equal(t, "first answer", c.lastAssistantText(), "the last answer with text")
	require.Equal(t, 1, c.callIndex("c-2"))
	require.Equal(t, 3, c.callIndex("c-9"), "not a call of the last answer: the count of its calls")
	var ids []string
	for _, call := range c.unanswered() {
		ids = append(ids, call.ID)
	}
	require.Equal(t, []string{"c-2", "c-3"}, ids)
	require.Equal(t, []thread.Message(c[4:]), c.since(2))
	require.Equal(t, []thread.Message(c), c.since(10), "more than there are: all of them")

	var none conversation
	require.Empty(t, none.lastAssistantText())
	require.Zero(t, none.callIndex("c-1"))
	require.Empty(t, none.unanswered())
	require.Empty(t, none.since(0))
}

package thread

import "encoding/json"

// Roles of a conversation message.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one entry of a thread's conversation, provider-neutral. An
// assistant message may carry tool calls; a tool message answers exactly one
// call by ToolCallID. Providers translate to their wire formats.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	ToolName   string     `json:"tool_name,omitempty"` // for tool messages: the item id that ran
	IsError    bool       `json:"is_error,omitempty"`  // for tool messages: the call failed
}

// ToolCall is a model's request to run a tool, by item id
// ("rye/file-system/fs_write").
type ToolCall struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// ToolDef describes a tool offered to the model.
type ToolDef struct {
	Name        string          `json:"name"` // item id
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"` // JSON Schema object
}

// EstimateTokens is a rough token count for text: one token per four bytes,
// at least one for non-empty text.
func EstimateTokens(s string) int {
	if s == "" {
		return 0
	}
	return len(s)/4 + 1
}

// EstimateMessageTokens estimates a message's tokens, tool calls included.
func EstimateMessageTokens(m Message) int {
	n := EstimateTokens(m.Content) + 4
	for _, c := range m.ToolCalls {
		n += EstimateTokens(c.Name) + EstimateTokens(string(c.Input)) + 4
	}
	return n
}

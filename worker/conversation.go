package worker

import "github.com/spool-run/spool/thread"

// conversation is a thread's messages as the model reads them, restored
// from the transcript and grown by each turn (session.appendMessage,
// toolResult). Its methods read it and nothing else: what the last answer
// said and asked, and what came after it.
type conversation []thread.Message

// lastAssistant is the index of the last assistant message (the turn's
// answer); -1 when there is none.
func (c conversation) lastAssistant() int {
	for i := len(c) - 1; i >= 0; i-- {
		if c[i].Role == thread.RoleAssistant {
			return i
		}
	}
	return -1
}

// lastAssistantText is the text of the last assistant message that has
// any: what a thread that ends without directive_return answered.
func (c conversation) lastAssistantText() string {
	for i := len(c) - 1; i >= 0; i-- {
		if c[i].Role == thread.RoleAssistant && c[i].Content != "" {
			return c[i].Content
		}
	}
	return ""
}

// callIndex is the position of call id among the tool calls of the
// turn's answer (the last assistant message), or the count of calls when
// it is not there.
func (c conversation) callIndex(id string) int {
	a := c.lastAssistant()
	if a < 0 {
		return 0
	}
	for j, call := range c[a].ToolCalls {
		if call.ID == id {
			return j
		}
	}
	return len(c[a].ToolCalls)
}

// since are the last n messages (State.SinceResponse: those added after
// the last response), or all of them when there are fewer, whose size
// the context estimate adds to the last prompt's.
func (c conversation) since(n int) []thread.Message {
	if n < len(c) {
		return c[len(c)-n:]
	}
	return c
}

// unanswered are the tool calls of the last answer that no message after
// it answers.
func (c conversation) unanswered() []thread.ToolCall {
	a := c.lastAssistant()
	if a < 0 {
		return nil
	}
	answered := map[string]bool{}
	for _, m := range c[a+1:] {
		answered[m.ToolCallID] = true
	}
	var calls []thread.ToolCall
	for _, call := range c[a].ToolCalls {
		if !answered[call.ID] {
			calls = append(calls, call)
		}
	}
	return calls
}

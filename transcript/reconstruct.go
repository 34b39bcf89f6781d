package transcript

import "github.com/spool-run/spool/thread"

// Reconstruct rebuilds the conversation from events: cognition_in becomes a
// user message, cognition_out an assistant message with its tool calls, and
// tool_call_result a tool message answering its call id. Every other event
// is skipped. This is the input to resume and handoff. A payload that does
// not decode is an error naming the event's seq.
func Reconstruct(events []Event) ([]thread.Message, error) {
	var msgs []thread.Message
	for _, ev := range events {
		m, ok, err := message(ev)
		if err != nil {
			return nil, err
		}
		if ok {
			msgs = append(msgs, m)
		}
	}
	return msgs, nil
}

// DanglingToolCalls returns the tool calls of the last assistant message
// that no later tool message answers: a checkpoint taken after the model's
// answer but before its tool results leaves these, and a provider rejects a
// conversation that ends with them. The caller re-runs or cancels them.
func DanglingToolCalls(msgs []thread.Message) []thread.ToolCall {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != thread.RoleAssistant {
			continue
		}
		answered := map[string]bool{}
		for _, m := range msgs[i+1:] {
			if m.Role == thread.RoleTool {
				answered[m.ToolCallID] = true
			}
		}
		var out []thread.ToolCall
		for _, c := range msgs[i].ToolCalls {
			if !answered[c.ID] {
				out = append(out, c)
			}
		}
		return out
	}
	return nil
}

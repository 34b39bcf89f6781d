package transcript

import (
	"encoding/json"
	"fmt"
	"strings"
)

// RenderText renders events as plain text, one block per event, for
// `spool thread transcript` and the orchestrator's read_transcript.
// Token deltas and checkpoints are summarized, not repeated.
func RenderText(events []Event) string {
	var b strings.Builder
	for _, ev := range events {
		ts := ev.Timestamp.UTC().Format("15:04:05.000")
		switch ev.Type {
		case TypeCognitionIn:
			p := Payload[CognitionIn](ev)
			fmt.Fprintf(&b, "%s  user\n%s\n\n", ts, indent(p.Content))
		case TypeCognitionOut:
			p := Payload[CognitionOut](ev)
			fmt.Fprintf(&b, "%s  assistant (turn %d, %d in / %d out tokens, $%.6f)\n", ts, p.Turn, p.Usage.InputTokens, p.Usage.OutputTokens, p.Spend)
			if p.Content != "" {
				b.WriteString(indent(p.Content) + "\n")
			}
			for _, c := range p.ToolCalls {
				fmt.Fprintf(&b, "    → %s %s\n", c.Name, compact(c.Input))
			}
			b.WriteString("\n")
		case TypeToolCallResult:
			p := Payload[ToolCallResult](ev)
			tag := "result"
			if p.IsError {
				tag = "error"
			}
			fmt.Fprintf(&b, "%s  tool %s %s\n%s\n\n", ts, p.Tool, tag, indent(p.Output))
		case TypeToolCallStart, TypeTokenDelta, TypeCheckpoint:
			// Shown through cognition_out and tool_call_result.
		default:
			fmt.Fprintf(&b, "%s  [%s] %s\n\n", ts, ev.Type, compact(ev.Payload))
		}
	}
	return b.String()
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

func compact(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	s := string(b)
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

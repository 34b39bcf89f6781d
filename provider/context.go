package provider

import "github.com/spool-run/spool/thread"

// ContextUsage estimates how much of a model's context window the next
// request will use: lastPromptTokens is the provider-reported prompt size of
// the last response (Usage.PromptTokens(): input plus cache reads and
// writes, exact), and messagesSinceLastResponse are the messages appended
// after that prompt (the assistant message of that response and the tool
// results that followed), which are estimated. Only the delta is estimated,
// so the error does not grow with the conversation. A window <= 0 (unknown)
// gives ratio 0.
func ContextUsage(lastPromptTokens int, messagesSinceLastResponse []thread.Message, window int) (used int, ratio float64) {
	used = lastPromptTokens
	for _, m := range messagesSinceLastResponse {
		used += estimateMessage(m)
	}
	if window <= 0 {
		return used, 0
	}
	return used, float64(used) / float64(window)
}

// estimateMessage is a conservative token estimate for one message: the
// larger of bytes/4 and a word/punctuation count (dense JSON and code run
// well over one token per four bytes), plus the per-message framing.
func estimateMessage(m thread.Message) int {
	n := estimateText(m.Content) + 4
	for _, c := range m.ToolCalls {
		n += estimateText(c.Name) + estimateText(string(c.Input)) + 8
	}
	if m.Role == thread.RoleTool {
		n += 8 // tool_result / tool message wrapper and id
	}
	return n
}

// estimateText is the token estimate of a text: the larger of bytes/4 and
// the number of words and of other runes, each a token of its own.
func estimateText(s string) int {
	if s == "" {
		return 0
	}
	byBytes := len(s)/4 + 1
	words, punct := 0, 0
	in := false
	for _, r := range s {
		switch {
		case isBlank(r):
			in = false
		case isASCIIAlnum(r):
			if !in {
				words++
				in = true
			}
		default:
			punct++ // punctuation, symbols and non-ASCII runes are mostly tokens of their own
			in = false
		}
	}
	if byWords := words + punct; byWords > byBytes {
		return byWords
	}
	return byBytes
}

// isBlank reports whether r is white space between words: a space, tab,
// newline or carriage return.
func isBlank(r rune) bool {
	return r == ' ' || r == '\n' || r == '\t' || r == '\r'
}

// isASCIIAlnum reports whether r is an ASCII letter or digit, which words
// are made of.
func isASCIIAlnum(r rune) bool {
	return r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
}

package thread

// Cost is what a thread has used so far. Spend is in USD.
type Cost struct {
	Turns            int     `json:"turns"`
	InputTokens      int     `json:"input_tokens"`
	OutputTokens     int     `json:"output_tokens"`
	CacheReadTokens  int     `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int     `json:"cache_write_tokens,omitempty"`
	Spend            float64 `json:"spend"`
	ElapsedSeconds   float64 `json:"elapsed_seconds,omitempty"`
	// Steps counts a graph run's steps (node visits and retry attempts);
	// a thread has none.
	Steps int `json:"steps,omitempty"`
}

// Tokens is the total token count the tokens limit applies to.
func (c Cost) Tokens() int {
	return c.InputTokens + c.OutputTokens + c.CacheReadTokens + c.CacheWriteTokens
}

// CheckLimits returns a *LimitError for the first limit c has reached
// (turns, tokens, spend, duration), or nil. It runs before each turn: a
// thread that has used all its turns may not start another. A limit of 0
// allows nothing (see Limits): a thread with turns 0 stops before its first
// turn.
func (c Cost) CheckLimits(l Resolved) error {
	switch {
	case c.Turns >= l.Turns:
		return &LimitError{Code: CodeTurnsExceeded, Current: float64(c.Turns), Max: float64(l.Turns)}
	case c.Tokens() >= l.Tokens:
		return &LimitError{Code: CodeTokensExceeded, Current: float64(c.Tokens()), Max: float64(l.Tokens)}
	case c.Spend >= l.Spend:
		return &LimitError{Code: CodeSpendExceeded, Current: c.Spend, Max: l.Spend}
	case c.ElapsedSeconds >= l.Duration:
		return &LimitError{Code: CodeDurationExceeded, Current: c.ElapsedSeconds, Max: l.Duration}
	}
	return nil
}

package spooltype

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestErrorInfoReadsOnce: "code: message" says the code once, whatever
// the message repeats of it at its start (a limit error's text, a
// provider error's class), and keeps messages that only mention it.
func TestErrorInfoReadsOnce(t *testing.T) {
	t.Parallel()
	cases := []struct{ code, msg, line string }{
		{"spend_exceeded", "spend_exceeded: 0.6 of 0.5", "spend_exceeded: 0.6 of 0.5"},
		{"spend_exceeded", "spend_exceeded: spend_exceeded: the ledger refused", "spend_exceeded: the ledger refused"},
		{"provider_transient", "provider transient: HTTP 503: overloaded (retry after 2s)", "provider_transient: HTTP 503: overloaded (retry after 2s)"},
		{"provider_permanent", "provider permanent: quota: HTTP 429: quota", "provider_permanent: quota: HTTP 429: quota"},
		{"turns_exceeded", "turns_exceeded: 2 of 1", "turns_exceeded: 2 of 1"},
		{"cancelled", "cancelled by request", "cancelled: cancelled by request"},
		{"spend_exceeded", "spend_exceeded: ", "spend_exceeded: spend_exceeded: "}, // nothing after the repeat: kept
		{"pricing_error", `unknown model "x": add it`, `pricing_error: unknown model "x": add it`},
		{"handoff_failed", "", "handoff_failed"},
	}
	for _, tc := range cases {
		e := &ErrorInfo{Code: tc.code, Message: tc.msg}
		require.Equal(t, tc.line, e.Line(), "%+v", e)
		require.Equal(t, tc.msg, e.Message, "Tidy and Line leave the original as it is")
	}
	require.Nil(t, (*ErrorInfo)(nil).Tidy())
}

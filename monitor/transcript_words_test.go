package monitor

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/transcript"
)

// TestModelTurnCountsOne: a model turn's line counts one token in the
// singular, as every count of the pages does.
func TestModelTurnCountsOne(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		out  int
		want string
	}{{1, "m · 12 in / 1 out token · $0.000010"}, {2, "m · 12 in / 2 out tokens · $0.000010"}} {
		payload, err := json.Marshal(transcript.CognitionOut{Model: "m", Turn: 1, Usage: transcript.Usage{InputTokens: 12, OutputTokens: tc.out}, Spend: 0.00001})
		require.NoError(t, err)
		var v eventView
		viewModelTurn(&v, transcript.Event{Type: transcript.TypeCognitionOut, Payload: payload})
		require.Equal(t, tc.want, v.Meta)
	}
}

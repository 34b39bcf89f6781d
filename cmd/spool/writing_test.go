package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/transcript"
)

// TestLineWriter: pieces of text go on one indented line under their
// head; a whole line between them ends the text's line, and the text
// goes on indented on the next.
func TestLineWriter(t *testing.T) {
	var b strings.Builder
	l := &lineWriter{w: &b}
	l.piece("[t] turn 1 writes:", "Hello")
	l.piece("", ", wor")
	l.line("[t] running")
	l.piece("", "ld\nbye")
	l.line("[t] completed")
	require.Equal(t, "[t] turn 1 writes:\n    Hello, wor\n[t] running\n    ld\n    bye\n[t] completed\n", b.String())
}

// TestTextFollower: a turn's token deltas print as they come, and its
// cognition_out then prints its header and calls without the text again;
// when the deltas were not the whole text (some dropped), the text is
// printed whole.
func TestTextFollower(t *testing.T) {
	ev := func(typ string, v any) transcript.Event {
		raw, err := json.Marshal(v)
		require.NoError(t, err)
		return transcript.Event{Type: typ, Timestamp: time.Date(2026, 12, 4, 7, 0, 0, 0, time.UTC), Payload: raw}
	}
	var b strings.Builder
	f := &textFollower{out: &lineWriter{w: &b}}
	f.event(ev(transcript.TypeTokenDelta, transcript.TokenDelta{Text: "Thinking "}))
	f.event(ev(transcript.TypeTokenDelta, transcript.TokenDelta{Text: "aloud."}))
	f.event(ev(transcript.TypeCognitionOut, transcript.CognitionOut{Content: "Thinking aloud.", Turn: 1}))
	f.event(ev(transcript.TypeTokenDelta, transcript.TokenDelta{Text: "Part"}))
	f.event(ev(transcript.TypeCognitionOut, transcript.CognitionOut{Content: "Partly dropped.", Turn: 2}))
	out := b.String()
	require.Equal(t, 1, strings.Count(out, "Thinking aloud."), out)
	require.Contains(t, out, "07:00:00.000  assistant (writing)\n    Thinking aloud.\n07:00:00.000  assistant (turn 1")
	require.Contains(t, out, "    Partly dropped.", "text not all written is printed whole")
}

package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

func TestPrintPaused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rec  spooltype.Record
		want string
	}{
		{"paused while waiting", spooltype.Record{ThreadID: "g/r-1", Kind: spooltype.KindGraph, Status: thread.StatusPaused,
			Extra: map[string]string{"paused_at": "1796384578000", "paused_from": "message"}},
			"paused     since 2026-12-04T11:42:58Z (it was waiting for message): spool graph unpause g/r-1 lets it go on where it was\n"},
		{"paused at a boundary", spooltype.Record{ThreadID: "d/t-1", Status: thread.StatusPaused, Extra: map[string]string{"paused_at": "1796384578000"}},
			"paused     since 2026-12-04T11:42:58Z: spool thread unpause d/t-1 lets it go on where it was\n"},
		{"requested", spooltype.Record{ThreadID: "d/t-1", Status: thread.StatusRunning, PauseRequested: true},
			"paused     requested: it pauses at its next boundary (spool thread unpause d/t-1 takes the request back)\n"},
		{"ended with a request", spooltype.Record{ThreadID: "d/t-1", Status: thread.StatusCompleted, PauseRequested: true}, ""},
		{"running", spooltype.Record{ThreadID: "d/t-1", Status: thread.StatusRunning}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			printPaused(&b, &tt.rec)
			require.Equal(t, tt.want, b.String())
		})
	}
}

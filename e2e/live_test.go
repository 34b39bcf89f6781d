package e2e

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// followedEvents are the transcript events a `transcript --follow
// --format jsonl` process printed so far.
func followedEvents(t *testing.T, p *spooltest.Proc) []transcript.Event {
	t.Helper()
	var out []transcript.Event
	sc := bufio.NewScanner(strings.NewReader(p.Log()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, `{"timestamp"`) {
			continue // a log line
		}
		var ev transcript.Event
		require.NoError(t, json.Unmarshal([]byte(line), &ev), line)
		out = append(out, ev)
	}
	return out
}

// TestTranscriptFollowIsLive: `spool thread transcript --follow` prints a
// turn's events while the turn runs, before its checkpoint makes them
// durable (here: the tool call of a tool that runs for a minute), then
// every event of the transcript once, in order, and ends with the thread.
func TestTranscriptFollowIsLive(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, cancelProject(), "2")
	id := startThread(t, e, "t/tooling", "--model", "script:scripts/cancel.yaml")
	follower := e.Start(nil, "thread", "transcript", id, "--follow", "--format", "jsonl")

	hasToolCall := func(evs []transcript.Event) bool {
		for _, ev := range evs {
			if ev.Type == transcript.TypeToolCallStart {
				return true
			}
		}
		return false
	}
	require.Eventually(t, func() bool { return hasToolCall(followedEvents(t, follower)) }, 30*time.Second, 20*time.Millisecond,
		"the follower did not print the tool call: %s", follower.Log())
	// The tool runs for a minute: its turn has no checkpoint yet.
	durable, err := transcript.Read(t.Context(), e.Store, id, e.Keyring, transcript.Lenient)
	require.NoError(t, err)
	require.False(t, hasToolCall(durable.Events), "the tool call is durable already: the test shows nothing live")

	res := e.Spool("thread", "cancel", id)
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, thread.StatusCancelled, e.Wait([]string{id}, time.Minute)[id].Status)
	require.Eventually(t, follower.Exited, 30*time.Second, 50*time.Millisecond, "the follower did not end with the thread")

	final := events(t, e, id)
	got := followedEvents(t, follower)
	require.Len(t, got, len(final), "every event once")
	for i, ev := range final {
		want, _ := json.Marshal(ev)
		have, _ := json.Marshal(got[i])
		require.JSONEq(t, string(want), string(have), "event %d", i)
	}
}

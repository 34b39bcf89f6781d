package worker

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/transcript"
)

// liveRecords is the registry as far as a live feed uses it: the lines
// it publishes, by thread.
type liveRecords struct {
	threadRecords
	mu    sync.Mutex
	lines map[string][]string
}

func (l *liveRecords) PublishLive(_ context.Context, id string, line []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines[id] = append(l.lines[id], string(line))
	return nil
}

func (l *liveRecords) published(id string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines[id]...)
}

// newFeedBundle is a live feed of thread t/x-1's new transcript, and the
// registry it publishes on.
func newFeedBundle(t *testing.T) (*liveFeed, *liveRecords) {
	t.Helper()
	signer, _, err := transcript.InitKeys(t.TempDir(), false)
	require.NoError(t, err)
	tw, err := transcript.CreateWriter("t/x-1", blobstore.NewMemory(), signer)
	require.NoError(t, err)
	reg := &liveRecords{lines: map[string][]string{}}
	return &liveFeed{reg: reg, thread: "t/x-1", log: slog.New(slog.DiscardHandler), tw: tw}, reg
}

// TestLiveFeed: a started feed publishes what the writer buffered before
// it and what is appended while it runs, all of it by the time stop
// returns, and nothing after; a feed never started stops at once.
func TestLiveFeed(t *testing.T) {
	t.Parallel()
	f, reg := newFeedBundle(t)
	_, err := f.tw.Append(transcript.TypeUserMessage, transcript.UserMessage{Content: "before"})
	require.NoError(t, err)
	f.start()
	_, err = f.tw.Append(transcript.TypeUserMessage, transcript.UserMessage{Content: "while"})
	require.NoError(t, err)
	f.stop()
	lines := reg.published("t/x-1")
	require.Len(t, lines, 2)
	require.True(t, strings.Contains(lines[0], "before") && strings.Contains(lines[1], "while"), "%q", lines)
	_, err = f.tw.Append(transcript.TypeUserMessage, transcript.UserMessage{Content: "after"})
	require.NoError(t, err)
	require.Len(t, reg.published("t/x-1"), 2, "stopped: nothing more")

	idle, reg := newFeedBundle(t)
	idle.stop()
	require.Empty(t, reg.published("t/x-1"))
}

package transcript

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
)

func TestChainSearch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := newSetup(t)
	writeTranscript(t, a, 2)
	b := newSetup(t)
	b.store, b.signer, b.keyring = a.store, a.signer, a.keyring
	b.threadID = a.threadID + "-cont"
	writeTranscript(t, b, 3)
	ms, err := ChainSearch(ctx, a.store, a.keyring, []string{a.threadID, b.threadID}, regexp.MustCompile(`^wrote 1[23] bytes$`), 0)
	require.NoError(t, err)
	require.Len(t, ms, 3, "matches")
	require.Equal(t, a.threadID, ms[0].ThreadID, "matches %+v", ms)
	require.Equal(t, b.threadID, ms[1].ThreadID, "matches %+v", ms)
	require.Equal(t, TypeToolCallResult, ms[0].Type, "matches %+v", ms)
	require.Equal(t, 1, ms[0].Line, "matches %+v", ms)
	// The model (chain_search) and `thread search --json` read the same
	// snake_case fields as every other JSON of spool.
	b0, err := json.Marshal(ms[0])
	require.NoError(t, err)
	require.JSONEq(t, fmt.Sprintf(`{"thread_id":%q,"seq":%d,"event_type":%q,"line":1,"text":%q}`, a.threadID, ms[0].Seq, TypeToolCallResult, ms[0].Text), string(b0))
	ms, _ = ChainSearch(ctx, a.store, a.keyring, []string{a.threadID, b.threadID}, regexp.MustCompile(`ünïcode`), 0)
	require.Len(t, ms, 5, "multi-line matches")
	require.Equal(t, 2, ms[0].Line, "multi-line matches %+v", ms)
	require.True(t, strings.HasPrefix(ms[0].Text, "Second line"), "multi-line matches %+v", ms)
	ms, _ = ChainSearch(ctx, a.store, a.keyring, []string{a.threadID, b.threadID}, regexp.MustCompile(`Turn`), 2)
	require.Len(t, ms, 2, "max ignored")
}

func TestClean(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSetup(t)
	writeTranscript(t, s, 2)
	_ = s.store.Put(ctx, blobkey.ThreadJSON(s.threadID), []byte("{}"))
	_ = s.store.Put(ctx, blobkey.Capabilities(s.threadID), []byte("x"))
	_ = s.store.Put(ctx, blobkey.Knowledge("test/transcript", s.threadID), []byte("x"))
	if _, err := Clean(ctx, s.store, s.threadID, CleanOptions{Checkpoints: true}); err == nil {
		t.Fatal("checkpoints-only clean accepted")
	}
	del, err := Clean(ctx, s.store, s.threadID, CleanOptions{Transcript: true, Checkpoints: true, Directive: "test/transcript"})
	require.NoError(t, err, "clean transcript: %v", del)
	require.Len(t, del, 3, "clean transcript: %v %v", del, err)
	require.Equal(t, blobkey.Segment(s.threadID, 2), del[0], "clean transcript: %v %v", del, err)
	left, _ := s.store.List(ctx, "")
	require.Len(t, left, 2, "left")
	del, err = Clean(ctx, s.store, s.threadID, CleanOptions{Metadata: true})
	require.NoError(t, err, "clean metadata: %v", del)
	require.Len(t, del, 2, "clean metadata: %v %v", del, err)
	del, err = Clean(ctx, s.store, s.threadID, CleanOptions{Transcript: true, Metadata: true})
	require.NoError(t, err, "second clean: %v", del)
	require.Empty(t, del, "second clean: %v %v", del, err)
}

func TestFollower(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSetup(t)
	f, err := NewFollower(s.store, s.threadID, s.keyring)
	require.NoError(t, err)
	if evs, err := f.Next(ctx); err != nil || len(evs) != 0 {
		t.Fatalf("empty: %v %v", evs, err)
	}
	w := s.writer(t)
	writeTurn(t, w, 1)
	evs, err := f.Next(ctx)
	require.NoError(t, err, "first: %d", len(evs))
	require.NotEmpty(t, evs, "first: %d %v", len(evs), err)
	require.EqualValues(t, 1, evs[0].Seq, "first: %d %v", len(evs), err)
	n1 := len(evs)
	writeTurn(t, w, 2)
	evs, err = f.Next(ctx)
	require.NoError(t, err, "second: %d", len(evs))
	require.NotEmpty(t, evs, "second: %d %v", len(evs), err)
	require.Equal(t, int64(n1+1), evs[0].Seq, "second: %d %v", len(evs), err)
	require.Equal(t, 2, f.LastState().Iteration, "second: %d %v", len(evs), err)
	mustAppend(t, w, TypeThreadCompleted, ThreadCompleted{})
	_, err = w.Checkpoint(ctx, stateFor(2))
	require.NoError(t, err)
	all := s.read(t, Strict)
	var got int
	err = Follow(ctx, s.store, s.threadID, s.keyring, time.Millisecond, func(evs []Event) error { got += len(evs); return nil })
	require.NoError(t, err, "Follow: %d events", got)
	require.Equal(t, len(all.Events), got, "Follow: %d events, %v", got, err)
	// A tampered new segment stops the follower.
	writeTurn(t, w, 3)
	key := blobkey.Segment(s.threadID, 4)
	data, _ := s.store.Get(ctx, key)
	data[5] ^= 1
	_ = s.store.Put(ctx, key, data)
	_, err = f.Next(ctx)
	require.ErrorIs(t, err, ErrTampered, "tampered")
}

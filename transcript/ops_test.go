package transcript

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

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
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 || ms[0].ThreadID != a.threadID || ms[1].ThreadID != b.threadID || ms[0].Type != TypeToolCallResult || ms[0].Line != 1 {
		t.Fatalf("matches %+v", ms)
	}
	ms, _ = ChainSearch(ctx, a.store, a.keyring, []string{a.threadID, b.threadID}, regexp.MustCompile(`ünïcode`), 0)
	if len(ms) != 5 || ms[0].Line != 2 || !strings.HasPrefix(ms[0].Text, "Second line") {
		t.Fatalf("multi-line matches %+v", ms)
	}
	ms, _ = ChainSearch(ctx, a.store, a.keyring, []string{a.threadID, b.threadID}, regexp.MustCompile(`Turn`), 2)
	if len(ms) != 2 {
		t.Fatalf("max ignored: %d", len(ms))
	}
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
	if err != nil || len(del) != 3 || del[0] != blobkey.Segment(s.threadID, 2) {
		t.Fatalf("clean transcript: %v %v", del, err)
	}
	left, _ := s.store.List(ctx, "")
	if len(left) != 2 {
		t.Fatalf("left %v", left)
	}
	del, err = Clean(ctx, s.store, s.threadID, CleanOptions{Metadata: true})
	if err != nil || len(del) != 2 {
		t.Fatalf("clean metadata: %v %v", del, err)
	}
	if del, err := Clean(ctx, s.store, s.threadID, CleanOptions{Transcript: true, Metadata: true}); err != nil || len(del) != 0 {
		t.Fatalf("second clean: %v %v", del, err)
	}
}

func TestFollower(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSetup(t)
	f, err := NewFollower(s.store, s.threadID, s.keyring)
	if err != nil {
		t.Fatal(err)
	}
	if evs, err := f.Next(ctx); err != nil || len(evs) != 0 {
		t.Fatalf("empty: %v %v", evs, err)
	}
	w := s.writer(t)
	writeTurn(t, w, 1)
	evs, err := f.Next(ctx)
	if err != nil || len(evs) == 0 || evs[0].Seq != 1 {
		t.Fatalf("first: %d %v", len(evs), err)
	}
	n1 := len(evs)
	writeTurn(t, w, 2)
	evs, err = f.Next(ctx)
	if err != nil || len(evs) == 0 || evs[0].Seq != int64(n1+1) || f.LastState().Iteration != 2 {
		t.Fatalf("second: %d %v", len(evs), err)
	}
	mustAppend(t, w, TypeThreadCompleted, ThreadCompleted{})
	if _, err := w.Checkpoint(ctx, stateFor(2)); err != nil {
		t.Fatal(err)
	}
	all, err := Read(ctx, s.store, s.threadID, s.keyring, Strict)
	if err != nil {
		t.Fatal(err)
	}
	var got int
	err = Follow(ctx, s.store, s.threadID, s.keyring, time.Millisecond, func(evs []Event) error { got += len(evs); return nil })
	if err != nil || got != len(all.Events) {
		t.Fatalf("Follow: %d events, %v", got, err)
	}
	// A tampered new segment stops the follower.
	writeTurn(t, w, 3)
	key := blobkey.Segment(s.threadID, 4)
	data, _ := s.store.Get(ctx, key)
	data[5] ^= 1
	_ = s.store.Put(ctx, key, data)
	if _, err := f.Next(ctx); !errors.Is(err, ErrTampered) {
		t.Fatalf("tampered: %v", err)
	}
}

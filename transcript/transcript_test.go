package transcript

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/thread"
)

func TestWriteReadReconstruct(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	want := writeTranscript(t, s, 5)
	tr := s.read(t, Strict)
	require.Len(t, tr.Segments, 5, "segments %d warnings %q", len(tr.Segments), tr.Warnings)
	require.Empty(t, tr.Warnings, "segments %d warnings", len(tr.Segments))
	for i, ev := range tr.Events {
		require.Equal(t, int64(i+1), ev.Seq, "event %d: seq %d thread %q", i, ev.Seq, ev.ThreadID)
		require.Equal(t, s.threadID, ev.ThreadID, "event %d: seq %d thread", i, ev.Seq)
	}
	for i, seg := range tr.Segments {
		require.Equal(t, int64(i+1), seg.Number, "segment %d: %+v", i, seg)
		require.Equal(t, blobkey.Segment(s.threadID, seg.Number), seg.Key, "segment %d: %+v", i, seg)
		require.Equal(t, s.signer.KeyID(), seg.KeyID, "segment %d: %+v", i, seg)
		require.Equal(t, TypeCheckpoint, tr.Events[seg.LastSeq-1].Type, "segment %d does not end with a checkpoint", i)
	}
	last := tr.Events[len(tr.Events)-1]
	require.Equal(t, TypeCheckpoint, last.Type, "last event %+v, LastCheckpointSeq %d", last, tr.LastCheckpointSeq)
	require.Equal(t, last.Seq, tr.LastCheckpointSeq, "last event %+v, LastCheckpointSeq", last)
	if diff := cmp.Diff(stateFor(5), *tr.LastState); diff != "" {
		t.Fatalf("LastState (-want +got):\n%s", diff)
	}
	got, err := Reconstruct(tr.Events)
	require.NoError(t, err)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Reconstruct (-want +got):\n%s", diff)
	}
	dang := DanglingToolCalls(got)
	require.Empty(t, dang, "dangling calls in a complete transcript")
	// The wire format: one JSON object per line, keys in the spec's order.
	seg, _ := s.store.Get(context.Background(), tr.Segments[0].Key)
	require.True(t, bytes.HasPrefix(seg, []byte(`{"timestamp":"2026-02-17T10:00:00.`)), "unexpected wire format: %.200s", seg)
	require.True(t, bytes.Contains(seg, []byte(`,"thread_id":"`+s.threadID+`","seq":1,"event_type":"thread_started","payload":{`)), "unexpected wire format: %.200s", seg)
}

func TestEmptyTranscript(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	tr := s.read(t, Strict)
	require.Empty(t, tr.Events, "Read of a new thread = %+v", tr)
	require.Nil(t, tr.LastState, "Read of a new thread = %+v", tr)
	_, err := Read(context.Background(), s.store, "../x", s.keyring, Strict)
	require.Error(t, err, "bad thread id accepted")
}

func TestStrictErrorNamesSegmentAndLine(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	writeTranscript(t, s, 3)
	objs := snapshot(t, s.store, "")
	key := blobkey.Segment(s.threadID, 2)
	lines := bytes.SplitAfter(objs[key], []byte("\n"))
	lines[2] = bytes.Replace(lines[2], []byte(`"content"`), []byte(`"c0ntent"`), 1) // still valid JSON
	objs[key] = bytes.Join(lines, nil)
	_, err := Read(context.Background(), storeOf(t, objs), s.threadID, s.keyring, Strict)
	var ve *VerifyError
	require.ErrorAs(t, err, &ve, "err")
	require.ErrorIs(t, err, ErrTampered, "err")
	// An edit that keeps the JSON valid is caught by the checkpoint (the
	// last line of segment 2), which is where the chain breaks.
	require.Equal(t, key, ve.Key, "err = %v (key %s line %d), want %s line %d", err, ve.Key, ve.Line, key, len(lines)-1)
	require.Equal(t, len(lines)-1, ve.Line, "err = %v (key %s line %d), want %s line %d", err, ve.Key, ve.Line, key, len(lines)-1)
	require.Contains(t, err.Error(), key+" line ", "err = %v (key %s line %d), want %s line %d", err, ve.Key, ve.Line, key, len(lines)-1)
	// Broken JSON is reported on its own line.
	objs = snapshot(t, s.store, "")
	lines = bytes.SplitAfter(objs[key], []byte("\n"))
	lines[2][0] = '['
	objs[key] = bytes.Join(lines, nil)
	_, err = Read(context.Background(), storeOf(t, objs), s.threadID, s.keyring, Strict)
	require.ErrorAs(t, err, &ve, "err = %v, want %s line 3", err, key)
	require.Equal(t, key, ve.Key, "err = %v", err)
	require.Equal(t, 3, ve.Line, "err = %v, want %s line 3", err, key)
	// Lenient returns segment 1 and warns.
	tr, err := Read(context.Background(), storeOf(t, objs), s.threadID, s.keyring, Lenient)
	require.NoError(t, err, "lenient = %d segments, warnings %q", len(tr.Segments), tr.Warnings)
	require.Len(t, tr.Segments, 1, "lenient = %d segments, warnings %q, %v", len(tr.Segments), tr.Warnings, err)
	require.Len(t, tr.Warnings, 2, "lenient = %d segments, warnings %q, %v", len(tr.Segments), tr.Warnings, err)
	require.Equal(t, 1, tr.LastState.Iteration, "lenient = %d segments, warnings %q, %v", len(tr.Segments), tr.Warnings, err)
}

func TestKeyRotation(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	old := s.signer
	writeTranscript(t, s, 2)
	next, err := GenerateKey()
	require.NoError(t, err)
	both := NewKeyring(old.PublicKey(), next.PublicKey())
	w, err := WriterConfig{Now: s.clock.Now}.Open(ctx, s.store, s.threadID, next, both)
	require.NoError(t, err)
	writeTurn(t, w, 3)
	writeTurn(t, w, 4)
	tr, err := Read(ctx, s.store, s.threadID, both, Strict)
	require.NoError(t, err)
	ids := []string{tr.Segments[0].KeyID, tr.Segments[1].KeyID, tr.Segments[2].KeyID, tr.Segments[3].KeyID}
	if diff := cmp.Diff([]string{old.KeyID(), old.KeyID(), next.KeyID(), next.KeyID()}, ids); diff != "" {
		t.Fatalf("segment key ids (-want +got):\n%s", diff)
	}
	for _, c := range []struct {
		name    string
		ring    *Keyring
		badSeg  int64
		goodSeg int
	}{
		{"only new key", NewKeyring(next.PublicKey()), 1, 0},
		{"only old key", NewKeyring(old.PublicKey()), 3, 2},
	} {
		_, err := Read(ctx, s.store, s.threadID, c.ring, Strict)
		var ve *VerifyError
		require.ErrorAs(t, err, &ve, "%s: err", c.name)
		require.ErrorIs(t, err, ErrUnknownKey, "%s: err", c.name)
		require.Equal(t, blobkey.Segment(s.threadID, c.badSeg), ve.Key, "%s: err = %v", c.name, err)
		tr, err := Read(ctx, s.store, s.threadID, c.ring, Lenient)
		require.NoError(t, err, "%s lenient: %d segments", c.name, len(tr.Segments))
		require.Len(t, tr.Segments, c.goodSeg, "%s lenient: %d segments, %v", c.name, len(tr.Segments), err)
	}
}

func TestResumeWriter(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	want := writeTranscript(t, s, 2)
	w := s.writer(t)
	res := w.Resumed()
	require.Len(t, res.Segments, 2, "resumed %d segments, state %+v, next %d", len(res.Segments), res.LastState, w.NextSegment())
	require.Equal(t, 2, res.LastState.Iteration, "resumed %d segments, state %+v, next %d", len(res.Segments), res.LastState, w.NextSegment())
	require.EqualValues(t, 3, w.NextSegment(), "resumed %d segments, state %+v, next", len(res.Segments), res.LastState)
	msgs, err := Reconstruct(res.Events)
	require.NoError(t, err, "reconstruct on resume: %v\n%s", err, cmp.Diff(want, msgs))
	require.Equal(t, want, msgs, "reconstruct on resume: %v\n%s", err, cmp.Diff(want, msgs))
	want = append(want, writeTurn(t, w, 3)...)
	tr := s.read(t, Strict)
	got, _ := Reconstruct(tr.Events)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	require.Equal(t, int64(len(tr.Events)), tr.Events[len(tr.Events)-1].Seq, "seq not continuous across writers")
	// A writer cannot open on a transcript that does not verify.
	_, err = OpenWriter(ctx, s.store, s.threadID, s.signer, NewKeyring())
	require.ErrorIs(t, err, ErrUnknownKey, "OpenWriter with an empty keyring")
}

func TestZombieWriterLosesSegment(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	writeTranscript(t, s, 1)
	zombie, live := s.writer(t), s.writer(t)
	mustAppend(t, live, TypeCognitionIn, CognitionIn{Content: "live"})
	if _, err := live.Checkpoint(ctx, stateFor(2)); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, zombie, TypeCognitionIn, CognitionIn{Content: "zombie"})
	_, err := zombie.Checkpoint(ctx, stateFor(2))
	require.ErrorIs(t, err, ErrSegmentExists, "zombie Checkpoint")
	require.Contains(t, err.Error(), blobkey.Segment(s.threadID, 2), "zombie Checkpoint = %v, want ErrSegmentExists naming the segment", err)
	_, err = zombie.Append(TypeCognitionIn, CognitionIn{Content: "more"})
	require.ErrorIs(t, err, ErrSegmentExists, "zombie Append after loss")
	tr := s.read(t, Strict)
	for _, ev := range tr.Events {
		require.NotContains(t, string(ev.Payload), "zombie", "zombie event in history")
	}
}

// echoStore writes on PutIfAbsent and then reports ErrExists, as an SDK
// retry whose first attempt landed would.
type echoStore struct {
	blobstore.Store
	failures int
}

func (e *echoStore) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	if err := e.Store.PutIfAbsent(ctx, key, data); err != nil {
		return err
	}
	if e.failures > 0 {
		e.failures--
		return blobstore.ErrExists
	}
	return nil
}

// failStore fails PutIfAbsent without writing.
type failStore struct {
	blobstore.Store
	failures int
}

func (f *failStore) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	if f.failures > 0 {
		f.failures--
		return errors.New("connection reset")
	}
	return f.Store.PutIfAbsent(ctx, key, data)
}

func TestCheckpointRetrySemantics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSetup(t)
	s.store = &echoStore{Store: blobstore.NewMemory(), failures: 1}
	w := s.writer(t)
	mustAppend(t, w, TypeCognitionIn, CognitionIn{Content: "x"})
	if _, err := w.Checkpoint(ctx, stateFor(1)); err != nil {
		t.Fatalf("own write reported as exists: %v", err)
	}

	s2 := newSetup(t)
	s2.store = &failStore{Store: blobstore.NewMemory(), failures: 1}
	w2 := s2.writer(t)
	mustAppend(t, w2, TypeCognitionIn, CognitionIn{Content: "x"})
	if _, err := w2.Checkpoint(ctx, stateFor(1)); err == nil || errors.Is(err, ErrSegmentExists) {
		t.Fatalf("transport failure = %v", err)
	}
	if _, err := w2.Checkpoint(ctx, stateFor(1)); err != nil {
		t.Fatalf("retry: %v", err)
	}
	tr, err := Read(ctx, s2.store, s2.threadID, s2.keyring, Strict)
	require.NoError(t, err, "after retry: %v, %d events", err, len(tr.Events))
	require.Len(t, tr.Events, 2, "after retry: %v", err)
}

func TestDeltaThrottle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSetup(t)
	w, err := WriterConfig{Now: s.clock.Now, DeltaInterval: 50e6, DeltaChunk: 64, DeltaBudget: 200}.Open(ctx, s.store, s.threadID, s.signer, s.keyring)
	require.NoError(t, err)
	kept, dropped := 0, 0
	for i := 0; i < 100; i++ { // 1ms apart, 5 bytes each: coalesced by size
		if w.AppendDelta("abcd ") {
			kept += 5
		} else {
			dropped += 5
		}
		if i == 10 {
			mustAppend(t, w, TypeToolCallStart, ToolCallStart{CallID: "c1", Tool: "t"}) // never dropped, flushes
		}
	}
	mustAppend(t, w, TypeCognitionOut, CognitionOut{Content: "full"})
	_, err = w.Checkpoint(ctx, State{})
	require.NoError(t, err)
	tr := s.read(t, Strict)
	var deltas []string
	var types []string
	for _, ev := range tr.Events {
		types = append(types, ev.Type)
		if ev.Type == TypeTokenDelta {
			var d TokenDelta
			_ = ev.Decode(&d)
			deltas = append(deltas, d.Text)
		}
	}
	joined := strings.Join(deltas, "")
	require.Len(t, joined, kept, "kept %d (events carry %d) dropped %d", kept, len(joined), dropped)
	require.LessOrEqual(t, kept, 200, "kept %d (events carry %d) dropped %d", kept, len(joined), dropped)
	require.NotEqual(t, 0, dropped, "kept %d (events carry %d) dropped", kept, len(joined))
	require.Equal(t, 500, kept+dropped, "kept %d (events carry %d) dropped %d", kept, len(joined), dropped)
	require.LessOrEqual(t, len(deltas), 6, "%d token_delta events for %d bytes: not coalesced", len(deltas), kept)
	// The tool_call_start is after the deltas appended before it, and
	// cognition_out and the checkpoint are present.
	require.Equal(t, TypeTokenDelta, types[0], "event order %v", types)
	require.True(t, contains(types, TypeToolCallStart), "event order %v", types)
	require.Equal(t, TypeCognitionOut, types[len(types)-2], "event order %v", types)
	var cp Checkpoint
	_ = tr.Events[len(tr.Events)-1].Decode(&cp)
	require.Equal(t, int64(dropped), cp.DroppedDeltaBytes, "checkpoint counts %d dropped bytes, want %d", cp.DroppedDeltaBytes, dropped)
	// Time also flushes: one small delta after the interval is its own event.
	w.AppendDelta("x")
	s.clock.Add(60e6)
	w.AppendDelta("y")
	require.Equal(t, 1, w.Pending(), "pending")
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func TestAppendRejects(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	w := s.writer(t)
	for _, c := range []struct {
		typ     string
		payload any
	}{
		{"", nil}, {TypeCheckpoint, nil}, {TypeCognitionIn, []byte("{bad")}, {TypeCognitionIn, make(chan int)},
	} {
		if _, err := w.Append(c.typ, c.payload); err == nil {
			t.Errorf("Append(%q, %T) accepted", c.typ, c.payload)
		}
	}
	_ = w.Close()
	_, err := w.Append(TypeCognitionIn, nil)
	require.ErrorIs(t, err, ErrWriterClosed, "Append after Close")
}

func TestReconstructDangling(t *testing.T) {
	t.Parallel()
	call := thread.ToolCall{ID: "a", Name: "t", Input: []byte(`{}`)}
	call2 := thread.ToolCall{ID: "b", Name: "t", Input: []byte(`{}`)}
	msgs := []thread.Message{{Role: thread.RoleUser, Content: "u"}, {Role: thread.RoleAssistant, ToolCalls: []thread.ToolCall{call, call2}},
		{Role: thread.RoleTool, ToolCallID: "a"}}
	d := DanglingToolCalls(msgs)
	require.Len(t, d, 1, "dangling")
	require.Equal(t, "b", d[0].ID, "dangling = %v", d)
	_, err := Reconstruct([]Event{{Seq: 7, Type: TypeCognitionOut, Payload: []byte(`{"content":1}`)}})
	require.Error(t, err, "bad payload")
	require.Contains(t, err.Error(), "seq 7", "bad payload: %v", err)
}

// TestUnverifiedKeyring: with no key to check against, a reader still gets
// the transcript (its hash chain, sequence and marks checked), knowing its
// signatures are unverified; a signature-only forgery passes, a changed
// byte does not.
func TestUnverifiedKeyring(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSetup(t)
	writeTranscript(t, s, 3)
	k := UnverifiedKeyring()
	require.True(t, k.Unverified(), "Unverified() is wrong")
	require.False(t, s.keyring.Unverified(), "Unverified() is wrong")
	require.False(t, (*Keyring)(nil).Unverified(), "Unverified() is wrong")
	tr, err := Read(ctx, s.store, s.threadID, k, Strict)
	require.NoError(t, err, "Read with no keys = %v", tr)
	require.Len(t, tr.Segments, 3, "Read with no keys = %v, %v", tr, err)
	_, err = ReadWith(ctx, s.store, s.threadID, k, ReadOptions{Marks: []Mark{{Segments: 4}}})
	require.ErrorIs(t, err, ErrTampered, "a missing segment under the mark")
	key := blobkey.Segment(s.threadID, 2)
	data, _ := s.store.Get(ctx, key)
	require.NoError(t, s.store.Put(ctx, key, bytes.Replace(data, []byte(`"seq":`), []byte(`"seq": `), 1)))
	_, err = Read(ctx, s.store, s.threadID, k, Strict)
	require.ErrorIs(t, err, ErrTampered, "an edited segment with no keys")
}

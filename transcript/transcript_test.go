package transcript

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/thread"
)

func TestWriteReadReconstruct(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	want := writeTranscript(t, s, 5)
	tr, err := Read(context.Background(), s.store, s.threadID, s.keyring, Strict)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Segments) != 5 || len(tr.Warnings) != 0 {
		t.Fatalf("segments %d warnings %q", len(tr.Segments), tr.Warnings)
	}
	for i, ev := range tr.Events {
		if ev.Seq != int64(i+1) || ev.ThreadID != s.threadID {
			t.Fatalf("event %d: seq %d thread %q", i, ev.Seq, ev.ThreadID)
		}
	}
	for i, seg := range tr.Segments {
		if seg.Number != int64(i+1) || seg.Key != blobkey.Segment(s.threadID, seg.Number) || seg.KeyID != s.signer.KeyID() {
			t.Fatalf("segment %d: %+v", i, seg)
		}
		if tr.Events[seg.LastSeq-1].Type != TypeCheckpoint {
			t.Fatalf("segment %d does not end with a checkpoint", i)
		}
	}
	last := tr.Events[len(tr.Events)-1]
	if last.Type != TypeCheckpoint || tr.LastCheckpointSeq != last.Seq {
		t.Fatalf("last event %+v, LastCheckpointSeq %d", last, tr.LastCheckpointSeq)
	}
	if diff := cmp.Diff(stateFor(5), *tr.LastState); diff != "" {
		t.Fatalf("LastState (-want +got):\n%s", diff)
	}
	got, err := Reconstruct(tr.Events)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Reconstruct (-want +got):\n%s", diff)
	}
	if dang := DanglingToolCalls(got); len(dang) != 0 {
		t.Fatalf("dangling calls in a complete transcript: %v", dang)
	}
	// The wire format: one JSON object per line, keys in the spec's order.
	seg, _ := s.store.Get(context.Background(), tr.Segments[0].Key)
	if !bytes.HasPrefix(seg, []byte(`{"timestamp":"2026-02-17T10:00:00.`)) || !bytes.Contains(seg, []byte(`,"thread_id":"`+s.threadID+`","seq":1,"event_type":"thread_started","payload":{`)) {
		t.Fatalf("unexpected wire format: %.200s", seg)
	}
}

func TestEmptyTranscript(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	tr, err := Read(context.Background(), s.store, s.threadID, s.keyring, Strict)
	if err != nil || len(tr.Events) != 0 || tr.LastState != nil {
		t.Fatalf("Read of a new thread = %+v, %v", tr, err)
	}
	if _, err := Read(context.Background(), s.store, "../x", s.keyring, Strict); err == nil {
		t.Fatal("bad thread id accepted")
	}
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
	if !errors.As(err, &ve) || !errors.Is(err, ErrTampered) {
		t.Fatalf("err = %v, want *VerifyError", err)
	}
	// An edit that keeps the JSON valid is caught by the checkpoint (the
	// last line of segment 2), which is where the chain breaks.
	if ve.Key != key || ve.Line != len(lines)-1 || !strings.Contains(err.Error(), key+" line ") {
		t.Fatalf("err = %v (key %s line %d), want %s line %d", err, ve.Key, ve.Line, key, len(lines)-1)
	}
	// Broken JSON is reported on its own line.
	objs = snapshot(t, s.store, "")
	lines = bytes.SplitAfter(objs[key], []byte("\n"))
	lines[2][0] = '['
	objs[key] = bytes.Join(lines, nil)
	_, err = Read(context.Background(), storeOf(t, objs), s.threadID, s.keyring, Strict)
	if !errors.As(err, &ve) || ve.Key != key || ve.Line != 3 {
		t.Fatalf("err = %v, want %s line 3", err, key)
	}
	// Lenient returns segment 1 and warns.
	tr, err := Read(context.Background(), storeOf(t, objs), s.threadID, s.keyring, Lenient)
	if err != nil || len(tr.Segments) != 1 || len(tr.Warnings) != 2 || tr.LastState.Iteration != 1 {
		t.Fatalf("lenient = %d segments, warnings %q, %v", len(tr.Segments), tr.Warnings, err)
	}
}

func TestKeyRotation(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	old := s.signer
	writeTranscript(t, s, 2)
	next, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	both := NewKeyring(old.PublicKey(), next.PublicKey())
	w, err := WriterConfig{Now: s.clock.Now}.Open(ctx, s.store, s.threadID, next, both)
	if err != nil {
		t.Fatal(err)
	}
	writeTurn(t, w, 3)
	writeTurn(t, w, 4)
	tr, err := Read(ctx, s.store, s.threadID, both, Strict)
	if err != nil {
		t.Fatal(err)
	}
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
		if !errors.As(err, &ve) || !errors.Is(err, ErrUnknownKey) || ve.Key != blobkey.Segment(s.threadID, c.badSeg) {
			t.Fatalf("%s: err = %v", c.name, err)
		}
		tr, err := Read(ctx, s.store, s.threadID, c.ring, Lenient)
		if err != nil || len(tr.Segments) != c.goodSeg {
			t.Fatalf("%s lenient: %d segments, %v", c.name, len(tr.Segments), err)
		}
	}
}

func TestResumeWriter(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	want := writeTranscript(t, s, 2)
	w := s.writer(t)
	res := w.Resumed()
	if len(res.Segments) != 2 || res.LastState.Iteration != 2 || w.NextSegment() != 3 {
		t.Fatalf("resumed %d segments, state %+v, next %d", len(res.Segments), res.LastState, w.NextSegment())
	}
	msgs, err := Reconstruct(res.Events)
	if err != nil || !cmp.Equal(want, msgs) {
		t.Fatalf("reconstruct on resume: %v\n%s", err, cmp.Diff(want, msgs))
	}
	want = append(want, writeTurn(t, w, 3)...)
	tr, err := Read(ctx, s.store, s.threadID, s.keyring, Strict)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := Reconstruct(tr.Events)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if tr.Events[len(tr.Events)-1].Seq != int64(len(tr.Events)) {
		t.Fatal("seq not continuous across writers")
	}
	// A writer cannot open on a transcript that does not verify.
	if _, err := OpenWriter(ctx, s.store, s.threadID, s.signer, NewKeyring()); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("OpenWriter with an empty keyring = %v", err)
	}
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
	if !errors.Is(err, ErrSegmentExists) || !strings.Contains(err.Error(), blobkey.Segment(s.threadID, 2)) {
		t.Fatalf("zombie Checkpoint = %v, want ErrSegmentExists naming the segment", err)
	}
	if _, err := zombie.Append(TypeCognitionIn, CognitionIn{Content: "more"}); !errors.Is(err, ErrSegmentExists) {
		t.Fatalf("zombie Append after loss = %v", err)
	}
	tr, err := Read(ctx, s.store, s.threadID, s.keyring, Strict)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range tr.Events {
		if strings.Contains(string(ev.Payload), "zombie") {
			t.Fatal("zombie event in history")
		}
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
	if err != nil || len(tr.Events) != 2 {
		t.Fatalf("after retry: %v, %d events", err, len(tr.Events))
	}
}

func TestDeltaThrottle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSetup(t)
	w, err := WriterConfig{Now: s.clock.Now, DeltaInterval: 50e6, DeltaChunk: 64, DeltaBudget: 200}.Open(ctx, s.store, s.threadID, s.signer, s.keyring)
	if err != nil {
		t.Fatal(err)
	}
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
	if _, err := w.Checkpoint(ctx, State{}); err != nil {
		t.Fatal(err)
	}
	tr, err := Read(ctx, s.store, s.threadID, s.keyring, Strict)
	if err != nil {
		t.Fatal(err)
	}
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
	if len(joined) != kept || kept > 200 || dropped == 0 || kept+dropped != 500 {
		t.Fatalf("kept %d (events carry %d) dropped %d", kept, len(joined), dropped)
	}
	if len(deltas) > 6 {
		t.Fatalf("%d token_delta events for %d bytes: not coalesced", len(deltas), kept)
	}
	// The tool_call_start is after the deltas appended before it, and
	// cognition_out and the checkpoint are present.
	if types[0] != TypeTokenDelta || !contains(types, TypeToolCallStart) || types[len(types)-2] != TypeCognitionOut {
		t.Fatalf("event order %v", types)
	}
	var cp Checkpoint
	_ = tr.Events[len(tr.Events)-1].Decode(&cp)
	if cp.DroppedDeltaBytes != int64(dropped) {
		t.Fatalf("checkpoint counts %d dropped bytes, want %d", cp.DroppedDeltaBytes, dropped)
	}
	// Time also flushes: one small delta after the interval is its own event.
	w.AppendDelta("x")
	s.clock.Advance(60e6)
	w.AppendDelta("y")
	if w.Pending() != 1 {
		t.Fatalf("pending %d after interval flush, want 1", w.Pending())
	}
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
	if _, err := w.Append(TypeCognitionIn, nil); !errors.Is(err, ErrWriterClosed) {
		t.Fatalf("Append after Close = %v", err)
	}
}

func TestReconstructDangling(t *testing.T) {
	t.Parallel()
	call := thread.ToolCall{ID: "a", Name: "t", Input: []byte(`{}`)}
	call2 := thread.ToolCall{ID: "b", Name: "t", Input: []byte(`{}`)}
	msgs := []thread.Message{{Role: thread.RoleUser, Content: "u"}, {Role: thread.RoleAssistant, ToolCalls: []thread.ToolCall{call, call2}},
		{Role: thread.RoleTool, ToolCallID: "a"}}
	if d := DanglingToolCalls(msgs); len(d) != 1 || d[0].ID != "b" {
		t.Fatalf("dangling = %v", d)
	}
	if _, err := Reconstruct([]Event{{Seq: 7, Type: TypeCognitionOut, Payload: []byte(`{"content":1}`)}}); err == nil || !strings.Contains(err.Error(), "seq 7") {
		t.Fatalf("bad payload: %v", err)
	}
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
	if !k.Unverified() || s.keyring.Unverified() || (*Keyring)(nil).Unverified() {
		t.Fatal("Unverified() is wrong")
	}
	tr, err := Read(ctx, s.store, s.threadID, k, Strict)
	if err != nil || len(tr.Segments) != 3 {
		t.Fatalf("Read with no keys = %v, %v", tr, err)
	}
	if _, err := ReadWith(ctx, s.store, s.threadID, k, ReadOptions{Marks: []Mark{{Segments: 4}}}); !errors.Is(err, ErrTampered) {
		t.Fatalf("a missing segment under the mark = %v, want ErrTampered", err)
	}
	key := blobkey.Segment(s.threadID, 2)
	data, _ := s.store.Get(ctx, key)
	if err := s.store.Put(ctx, key, bytes.Replace(data, []byte(`"seq":`), []byte(`"seq": `), 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(ctx, s.store, s.threadID, k, Strict); !errors.Is(err, ErrTampered) {
		t.Fatalf("an edited segment with no keys = %v, want ErrTampered", err)
	}
}

package registry

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/spool-run/spool/thread"
)

// TestTranscriptMark: a commit records the transcript mark; the mark only
// rises, a stale or refused commit does not move it, it cannot be written
// as a raw field, and it is in the record's JSON (thread.json).
func TestTranscriptMark(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	f.register(t, "m", "")
	if got := f.get(t, "m").Transcript; got != (TranscriptMark{}) {
		t.Fatalf("new thread: mark %+v", got)
	}
	lease := f.claim(t, "m")
	v := lease.Version
	var err error
	commit := func(expected int64, m TranscriptMark, ch Changes) (int64, error) {
		ch.Transcript = &m
		return f.reg.Commit(f.ctx, "m", expected, ch)
	}
	if v, err = commit(v, TranscriptMark{Segments: 2, ChainHash: "h2"}, Changes{}); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, "m").Transcript; got != (TranscriptMark{Segments: 2, ChainHash: "h2"}) {
		t.Fatalf("mark %+v, want 2/h2", got)
	}
	// Lower or equal: ignored (the commit itself goes through).
	for _, m := range []TranscriptMark{{Segments: 1, ChainHash: "h1"}, {Segments: 2, ChainHash: "other"}, {}} {
		nv, err := commit(v, m, Changes{})
		if err != nil || nv != v+1 {
			t.Fatalf("commit with mark %+v: %d %v", m, nv, err)
		}
		v = nv
		if got := f.get(t, "m").Transcript; got != (TranscriptMark{Segments: 2, ChainHash: "h2"}) {
			t.Fatalf("mark %+v lowered or replaced the mark: %+v", m, got)
		}
	}
	// A stale commit does not raise it.
	if _, err := commit(v-1, TranscriptMark{Segments: 9, ChainHash: "h9"}, Changes{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale commit: %v", err)
	}
	// Nor does a refused transition.
	if _, err := commit(v, TranscriptMark{Segments: 9, ChainHash: "h9"}, Changes{Status: thread.StatusCreated}); err == nil {
		t.Fatal("running→created committed")
	}
	if got := f.get(t, "m").Transcript; got.Segments != 2 {
		t.Fatalf("a refused commit moved the mark: %+v", got)
	}
	// Raised with the final status.
	if v, err = commit(v, TranscriptMark{Segments: 3, ChainHash: "h3"}, Changes{Status: thread.StatusCompleted}); err != nil {
		t.Fatal(err)
	}
	rec := f.get(t, "m")
	if rec.Transcript != (TranscriptMark{Segments: 3, ChainHash: "h3"}) || rec.Status != thread.StatusCompleted || rec.Version != v {
		t.Fatalf("final record %+v", rec)
	}
	for _, field := range []string{"transcript_segments", "transcript_chain_hash"} {
		if _, err := f.reg.Commit(f.ctx, "m", 0, Changes{Fields: map[string]string{field: "0"}}); err == nil {
			t.Fatalf("%s writable as a raw field", field)
		}
		if _, ok := rec.Extra[field]; ok {
			t.Fatalf("%s decoded into Extra", field)
		}
	}
	if _, err := commit(0, TranscriptMark{Segments: -1}, Changes{}); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("negative mark: %v", err)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var back Record
	if err := json.Unmarshal(b, &back); err != nil || back.Transcript != rec.Transcript {
		t.Fatalf("JSON round trip: %s → %+v, %v", b, back.Transcript, err)
	}
	if !strings.Contains(string(b), `"transcript":{"segments":3,"chain_hash":"h3"}`) {
		t.Fatalf("record JSON lacks the mark: %s", b)
	}
}

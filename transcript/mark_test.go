package transcript

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/thread"
)

// TestWriterMark: a writer's mark is what it has committed, and equals the
// mark of the transcript read back.
func TestWriterMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSetup(t)
	w := s.writer(t)
	if got := w.Mark(); got != (Mark{}) {
		t.Fatalf("empty transcript: mark %+v", got)
	}
	for turn := 1; turn <= 3; turn++ {
		before := w.Mark()
		mustAppend(t, w, TypeCognitionIn, CognitionIn{Content: "hi"})
		if w.Mark() != before {
			t.Fatal("an append moved the mark: only a checkpoint commits")
		}
		info, err := w.Checkpoint(ctx, stateFor(turn))
		require.NoError(t, err)
		if want := (Mark{Segments: info.Number, ChainHash: info.ChainHash}); w.Mark() != want {
			t.Fatalf("turn %d: mark %+v, want %+v", turn, w.Mark(), want)
		}
	}
	tr := s.read(t, Strict)
	if diff := cmp.Diff(w.Mark(), tr.Mark()); diff != "" {
		t.Fatalf("writer and reader marks differ (-writer +reader):\n%s", diff)
	}
	// A writer opened on the transcript starts from the same mark.
	w2, err := OpenWriter(ctx, s.store, s.threadID, s.signer, s.keyring, tr.Mark())
	require.NoError(t, err)
	if w2.Mark() != tr.Mark() {
		t.Fatalf("reopened writer: mark %+v, want %+v", w2.Mark(), tr.Mark())
	}
}

// TestMarks is the deleted-tail property: a transcript held to a mark
// fails strict verification, naming the first missing segment, when its
// last segments were deleted; lenient mode keeps what verified and warns.
// A mark that lags (the registry records what was durable before a
// checkpoint's segment) accepts the segments after it, and a mark whose
// chain hash differs from the segment's fails.
func TestMarks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSetup(t)
	writeTranscript(t, s, 4)
	full := s.read(t, Strict)
	mark := func(n int64) Mark {
		return Mark{Segments: n, ChainHash: full.Segments[n-1].ChainHash, From: "registry"}
	}
	seg := func(n int64) string { return blobkey.Segment(s.threadID, n) }
	intact := snapshot(t, s.store, "")
	without := func(ns ...int64) map[string][]byte {
		objs := map[string][]byte{}
		for k, v := range intact {
			objs[k] = v
		}
		for _, n := range ns {
			delete(objs, seg(n))
		}
		return objs
	}

	cases := []struct {
		name     string
		objs     map[string][]byte
		marks    []Mark
		errKey   string // strict fails naming this key ("" = verifies)
		reason   string
		lenient  int // segments lenient keeps
		warnings bool
	}{
		{name: "exact mark", objs: intact, marks: []Mark{mark(4)}, lenient: 4},
		{name: "lagging mark", objs: intact, marks: []Mark{mark(3)}, lenient: 4},
		{name: "no mark", objs: without(4), lenient: 3},
		{name: "last segment deleted", objs: without(4), marks: []Mark{mark(4)}, errKey: seg(4), reason: "missing segment: 3 verified, 4 committed (registry)", lenient: 3, warnings: true},
		{name: "last two deleted", objs: without(3, 4), marks: []Mark{mark(4)}, errKey: seg(3), reason: "missing segment: 2 verified, 4 committed", lenient: 2, warnings: true},
		{name: "every segment deleted", objs: without(1, 2, 3, 4), marks: []Mark{mark(4)}, errKey: seg(1), reason: "missing segment: 0 verified, 4 committed", lenient: 0, warnings: true},
		{name: "segment after a lagging mark deleted", objs: without(4), marks: []Mark{mark(3)}, lenient: 3},
		{name: "highest of two marks", objs: without(4), marks: []Mark{mark(2), mark(4)}, errKey: seg(4), reason: "missing segment", lenient: 3, warnings: true},
		{name: "hash of another segment", objs: intact, marks: []Mark{{Segments: 2, ChainHash: full.Segments[2].ChainHash}}, errKey: seg(2), reason: "chain hash", lenient: 4, warnings: true},
		{name: "count only", objs: without(4), marks: []Mark{{Segments: 4}}, errKey: seg(4), reason: "missing segment", lenient: 3, warnings: true},
		{name: "zero mark", objs: without(1, 2, 3, 4), marks: []Mark{{}}, lenient: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := storeOf(t, tc.objs)
			tr, err := ReadWith(ctx, st, s.threadID, s.keyring, ReadOptions{Mode: Strict, Marks: tc.marks})
			var ve *VerifyError
			switch {
			case tc.errKey == "" && err != nil:
				t.Fatalf("strict: %v", err)
			case tc.errKey == "" && len(tr.Segments) != tc.lenient:
				t.Fatalf("strict kept %d segments, want %d", len(tr.Segments), tc.lenient)
			case tc.errKey != "" && (!errors.As(err, &ve) || ve.Key != tc.errKey || !strings.Contains(ve.Reason, tc.reason)):
				t.Fatalf("strict: %v, want a *VerifyError naming %s: %s", err, tc.errKey, tc.reason)
			case tc.errKey != "" && !errors.Is(err, ErrTampered):
				t.Fatalf("strict: %v is not ErrTampered", err)
			}
			tr, err = ReadWith(ctx, st, s.threadID, s.keyring, ReadOptions{Mode: Lenient, Marks: tc.marks})
			require.NoError(t, err, "lenient")
			require.Len(t, tr.Segments, tc.lenient, "lenient kept %d segments (want %d), warnings %q", len(tr.Segments), tc.lenient, tr.Warnings)
			require.Equal(t, tc.warnings, len(tr.Warnings) > 0, "lenient kept %d segments (want %d), warnings %q", len(tr.Segments), tc.lenient, tr.Warnings)
			if tc.warnings && !strings.Contains(strings.Join(tr.Warnings, "\n"), tc.errKey) {
				t.Fatalf("lenient warnings %q do not name %s", tr.Warnings, tc.errKey)
			}
			// A writer is opened strictly, held to the same marks.
			_, err = OpenWriter(ctx, st, s.threadID, s.signer, s.keyring, tc.marks...)
			if (err != nil) != (tc.errKey != "") || err != nil && !errors.Is(err, ErrTampered) {
				t.Fatalf("OpenWriter: %v", err)
			}
		})
	}
}

// TestMarkAfterDamage: lenient mode reports a damaged segment once, not
// again as missing; a mark below the damage is still checked.
func TestMarkAfterDamage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSetup(t)
	writeTranscript(t, s, 4)
	full := s.read(t, Strict)
	objs := snapshot(t, s.store, "")
	key3 := blobkey.Segment(s.threadID, 3)
	objs[key3] = append([]byte(nil), objs[key3]...)
	objs[key3][10] ^= 1
	st := storeOf(t, objs)
	marks := []Mark{{Segments: 4, ChainHash: full.Segments[3].ChainHash}, {Segments: 1, ChainHash: "0000"}}
	tr, err := ReadWith(ctx, st, s.threadID, s.keyring, ReadOptions{Mode: Lenient, Marks: marks})
	require.NoError(t, err)
	require.Len(t, tr.Segments, 2, "kept")
	all := strings.Join(tr.Warnings, "\n")
	require.NotContains(t, all, "missing segment", "warnings")
	require.Contains(t, all, key3, "warnings")
	require.Contains(t, all, blobkey.Segment(s.threadID, 1)+": chain hash", "warnings")
	_, err = ReadWith(ctx, st, s.threadID, s.keyring, ReadOptions{Mode: Strict, Marks: marks})
	var ve *VerifyError
	require.ErrorAs(t, err, &ve, "strict")
	require.Equal(t, key3, ve.Key, "strict: %v, want the damaged segment first", err)
}

func TestCapabilitiesFile(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	caps := []string{"rye.execute.tool.rye.file-system.*", "rye.execute.tool.rye.agent.threads.thread_directive"}
	body, err := RenderCapabilities("t-1", []thread.ToolDef{{Name: "rye/file-system/fs_read"}}, caps)
	require.NoError(t, err)
	f, err := ReadCapabilities(SignMarkdown(body, s.signer, s.clock.Now()), s.keyring)
	require.NoError(t, err)
	require.True(t, f.For("t-1"), "For: the title names t-1")
	require.False(t, f.For("t-2"), "For: the title names t-1")
	require.False(t, f.For("t"), "For: the title names t-1")
	require.True(t, f.Lists([]string{caps[1], caps[0]}), "Lists: the same capabilities in another order")
	for _, other := range [][]string{caps[:1], nil, append(caps[:2:2], "rye.execute.tool.other.x")} {
		require.False(t, f.Lists(other), "Lists(%q): the file draws %q", other, caps)
	}
}

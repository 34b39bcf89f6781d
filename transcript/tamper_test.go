package transcript

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"

	"github.com/google/go-cmp/cmp"
)

// TestTamper is the property test of the issue: over many random single-byte
// flips, line deletions, segment swaps and segment deletions of a signed
// multi-segment transcript, strict verification rejects every one, and
// lenient returns exactly the segments before the first damaged one.
func TestTamper(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSetup(t)
	const nSeg = 6
	writeTranscript(t, s, nSeg)
	orig := snapshot(t, s.store, "")
	full := s.read(t, Strict)
	// prefix[k] = events of segments 1..k.
	prefix := make([][]Event, nSeg+1)
	for k := 1; k <= nSeg; k++ {
		prefix[k] = full.Events[:full.Segments[k-1].LastSeq]
	}
	rng := rand.New(rand.NewPCG(1, 2))
	counts := map[string]int{}
	const iterations = 1200
	for i := 0; i < iterations; i++ {
		objs := map[string][]byte{}
		for k, v := range orig {
			objs[k] = append([]byte(nil), v...)
		}
		seg := func(n int) string { return blobkey.Segment(s.threadID, int64(n)) }
		var kind string
		var first int // first damaged segment number
		switch op := rng.IntN(10); {
		case op < 6:
			kind = "flip"
			first = 1 + rng.IntN(nSeg)
			b := objs[seg(first)]
			b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
		case op < 8:
			kind = "delete-line"
			first = 1 + rng.IntN(nSeg)
			lines := bytes.SplitAfter(objs[seg(first)], []byte("\n"))
			lines = lines[:len(lines)-1] // SplitAfter leaves a trailing empty element
			j := rng.IntN(len(lines))
			objs[seg(first)] = bytes.Join(append(lines[:j:j], lines[j+1:]...), nil)
		case op < 9:
			kind = "swap-segments"
			a, b := 1+rng.IntN(nSeg), 1+rng.IntN(nSeg-1)
			if b >= a {
				b++
			}
			objs[seg(a)], objs[seg(b)] = objs[seg(b)], objs[seg(a)]
			first = min(a, b)
		default:
			kind = "delete-segment"
			first = 1 + rng.IntN(nSeg)
			delete(objs, seg(first))
		}
		counts[kind]++
		st := storeOf(t, objs)
		_, err := ReadWith(ctx, st, s.threadID, s.keyring, ReadOptions{Mode: Strict, MinSegments: nSeg})
		require.ErrorIs(t, err, ErrTampered, "iteration %d (%s in segment %d): strict accepted it", i, kind, first)
		tr, err := ReadWith(ctx, st, s.threadID, s.keyring, ReadOptions{Mode: Lenient, MinSegments: nSeg})
		require.NoError(t, err, "iteration %d (%s): lenient", i, kind)
		require.NotEmpty(t, tr.Warnings, "iteration %d (%s in segment %d): lenient kept %d segments, warnings", i, kind, first, len(tr.Segments))
		require.Len(t, tr.Segments, first-1, "iteration %d (%s in segment %d): lenient kept %d segments, warnings %q", i, kind, first, len(tr.Segments), tr.Warnings)
		if !eventsEqual(prefix[first-1], tr.Events) {
			diff := cmp.Diff(prefix[first-1], tr.Events)
			t.Fatalf("iteration %d (%s): lenient events differ from the intact prefix (-want +got):\n%s", i, kind, diff)
		}
		wantState := (*State)(nil)
		if first > 1 {
			st := stateFor(first - 1)
			wantState = &st
		}
		if (wantState == nil) != (tr.LastState == nil) || wantState != nil && (wantState.Iteration != tr.LastState.Iteration || wantState.RunningSummary != tr.LastState.RunningSummary) {
			diff := cmp.Diff(wantState, tr.LastState)
			t.Fatalf("iteration %d (%s): LastState (-want +got):\n%s", i, kind, diff)
		}
	}
	t.Logf("tamper cases: %v", counts)
	require.Equal(t, "4", fmt.Sprint(len(counts)), "not every kind of tampering ran: %v", counts)
}

// Without MinSegments, deleting the last segments is indistinguishable from
// a shorter transcript; the doc says so, and this pins it.
func TestTailTruncationNeedsMinSegments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSetup(t)
	writeTranscript(t, s, 3)
	require.NoError(t, s.store.Delete(ctx, blobkey.Segment(s.threadID, 3)))
	tr := s.read(t, Strict)
	require.Len(t, tr.Segments, 2, "Read = %v", tr)
	_, err := ReadWith(ctx, s.store, s.threadID, s.keyring, ReadOptions{MinSegments: 3})
	var ve *VerifyError
	require.ErrorAs(t, err, &ve, "MinSegments")
	require.Equal(t, blobkey.Segment(s.threadID, 3), ve.Key, "MinSegments: %v", err)
}

// FuzzSegment: no byte string other than the original verifies as the
// transcript's first segment.
func FuzzSegment(f *testing.F) {
	s := newSetup(f)
	writeTranscript(f, s, 1)
	key := blobkey.Segment(s.threadID, 1)
	orig, _ := s.store.Get(context.Background(), key)
	f.Add(orig)
	f.Add(orig[:len(orig)-1])
	f.Fuzz(func(t *testing.T, data []byte) {
		v := newVerifier(s.threadID, s.keyring)
		_, _, err := v.segment(key, data)
		if (err == nil) != bytes.Equal(data, orig) {
			t.Fatalf("verify(%q) = %v", data, err)
		}
	})
}

// eventsEqual is a fast exact comparison (cmp.Diff is for the failure text).
func eventsEqual(a, b []Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Timestamp.Equal(b[i].Timestamp) || a[i].ThreadID != b[i].ThreadID || a[i].Seq != b[i].Seq ||
			a[i].Type != b[i].Type || !bytes.Equal(a[i].Payload, b[i].Payload) {
			return false
		}
	}
	return true
}

package transcript

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/thread"
)

// TestWalkAgreesWithRead: Walk verifies what Read verifies, hands over the
// same events and segments in order, and refuses what Read refuses.
func TestWalkAgreesWithRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSetup(t)
	want := writeTranscript(t, s, 12)
	tr := s.read(t, Strict)

	var evs []Event
	var segs []SegmentInfo
	rec := &Reconstructor{}
	sum, err := Walk(ctx, s.store, s.threadID, s.keyring, ReadOptions{Concurrency: 3, Marks: []Mark{tr.Mark()}}, func(seg SegmentInfo, batch []Event) error {
		segs = append(segs, seg)
		evs = append(evs, batch...)
		for _, ev := range batch {
			require.NoError(t, rec.Add(ev))
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, tr.Events, evs)
	require.Equal(t, tr.Segments, segs)
	require.Equal(t, &WalkSummary{ThreadID: s.threadID, Segments: 12, Events: int64(len(tr.Events)),
		ChainHash: tr.Mark().ChainHash, LastState: tr.LastState, LastCheckpointSeq: tr.LastCheckpointSeq}, sum)
	require.Equal(t, want, rec.Messages())
	require.EqualValues(t, len(want), rec.Total())

	// Marks hold it as they hold Read: a missing segment, a changed hash.
	_, err = Walk(ctx, s.store, s.threadID, s.keyring, ReadOptions{MinSegments: 13}, func(SegmentInfo, []Event) error { return nil })
	var verr *VerifyError
	require.ErrorAs(t, err, &verr)
	require.Equal(t, blobkey.Segment(s.threadID, 13), verr.Key)
	_, err = Walk(ctx, s.store, s.threadID, s.keyring, ReadOptions{Marks: []Mark{{Segments: 5, ChainHash: tr.Segments[4].ChainHash}}}, func(SegmentInfo, []Event) error { return nil })
	require.NoError(t, err)
	_, err = Walk(ctx, s.store, s.threadID, s.keyring, ReadOptions{Marks: []Mark{{Segments: 5, ChainHash: tr.Segments[3].ChainHash}}}, func(SegmentInfo, []Event) error { return nil })
	require.ErrorAs(t, err, &verr)
	require.Equal(t, blobkey.Segment(s.threadID, 5), verr.Key)

	// A tampered segment: strict stops there, lenient keeps the prefix.
	key := blobkey.Segment(s.threadID, 7)
	data, err := s.store.Get(ctx, key)
	require.NoError(t, err)
	data[40] ^= 1
	require.NoError(t, s.store.Put(ctx, key, data))
	_, readErr := Read(ctx, s.store, s.threadID, s.keyring, Strict)
	require.Error(t, readErr)
	_, err = Walk(ctx, s.store, s.threadID, s.keyring, ReadOptions{}, func(SegmentInfo, []Event) error { return nil })
	require.Equal(t, readErr.Error(), err.Error())
	sum, err = Walk(ctx, s.store, s.threadID, s.keyring, ReadOptions{Mode: Lenient}, func(SegmentInfo, []Event) error { return nil })
	require.NoError(t, err)
	lenient := s.read(t, Lenient)
	require.EqualValues(t, 6, sum.Segments)
	require.Equal(t, lenient.Warnings, sum.Warnings)

	// visit's error stops the walk as it is.
	stop := errors.New("enough")
	_, err = Walk(ctx, s.store, s.threadID, s.keyring, ReadOptions{Mode: Lenient}, func(SegmentInfo, []Event) error { return stop })
	require.ErrorIs(t, err, stop)
}

// countingStore counts the segments fetched and not yet handed over.
type countingStore struct {
	blobstore.Store
	mu       sync.Mutex
	fetched  int
	consumed atomic.Int64
	most     int
}

func (c *countingStore) Get(ctx context.Context, key string) ([]byte, error) {
	b, err := c.Store.Get(ctx, key)
	c.mu.Lock()
	c.fetched++
	c.most = max(c.most, c.fetched-int(c.consumed.Load()))
	c.mu.Unlock()
	return b, err
}

// TestWalkFetchesAWindow: however slow the reader, no more than the
// window's segments are fetched ahead of it (Read used to fetch every
// segment and hold them all until the reader came).
func TestWalkFetchesAWindow(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	writeTranscript(t, s, 40)
	cs := &countingStore{Store: s.store}
	n := 0
	_, err := Walk(context.Background(), cs, s.threadID, s.keyring, ReadOptions{Concurrency: 4}, func(SegmentInfo, []Event) error {
		time.Sleep(2 * time.Millisecond)
		n++
		cs.consumed.Add(1)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 40, n)
	require.LessOrEqual(t, cs.most, 4+1, "fetched ahead of the reader")
}

// TestReconstructorKeepsATail: with MaxBytes it keeps the newest messages
// that fit, never opens with a tool result, and keeps the last message
// even when it alone is over the bound.
func TestReconstructorKeepsATail(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	all := writeTranscript(t, s, 30)
	tr := s.read(t, Strict)
	for _, bound := range []int{1, 60, 200, 1000, 1 << 20} {
		r := &Reconstructor{MaxBytes: bound}
		for _, ev := range tr.Events {
			require.NoError(t, r.Add(ev))
		}
		got := r.Messages()
		require.NotEmpty(t, got, "bound %d", bound)
		require.Equal(t, all[len(all)-len(got):], got, "bound %d: a tail of the whole", bound)
		if len(got) > 1 {
			require.NotEqual(t, thread.RoleTool, got[0].Role, "bound %d", bound)
			size := 0
			for _, m := range got {
				size += messageBytes(m)
			}
			require.LessOrEqual(t, size, bound, "bound %d", bound)
		}
		require.EqualValues(t, len(all), r.Total())
	}
}

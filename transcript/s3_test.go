package transcript

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/thread"
)

func newS3Store(t testing.TB) *blobstore.S3 {
	t.Helper()
	env := testenv.NewS3(t)
	s, err := blobstore.NewS3(context.Background(), blobstore.S3Config{Endpoint: env.Endpoint, Bucket: env.Bucket,
		Region: env.Region, PathStyle: true, Prefix: env.Prefix, AccessKey: env.AccessKey, SecretKey: env.SecretKey})
	require.NoError(t, err)
	return s
}

func TestS3WriteReadZombie(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSetup(t)
	s.store = newS3Store(t)
	want := writeTranscript(t, s, 3)
	tr := s.read(t, Strict)
	require.Len(t, tr.Segments, 3, "read")
	got, _ := Reconstruct(tr.Events)
	require.Len(t, got, len(want), "reconstructed")
	zombie, live := s.writer(t), s.writer(t)
	writeTurn(t, live, 4)
	mustAppend(t, zombie, TypeCognitionIn, CognitionIn{Content: "zombie"})
	_, err := zombie.Checkpoint(ctx, stateFor(4))
	require.ErrorIs(t, err, ErrSegmentExists, "zombie on S3")
}

// turnEvents appends a typical turn (about 10 events, ~3 KB).
func turnEvents(b testing.TB, w *Writer, turn int) {
	mustAppend(b, w, TypeCognitionIn, CognitionIn{Content: fmt.Sprintf("Turn %d. %0500d", turn, turn)})
	for i := 0; i < 3; i++ {
		mustAppend(b, w, TypeTokenDelta, TokenDelta{Text: fmt.Sprintf("%0100d", i)})
	}
	calls := []thread.ToolCall{
		{ID: fmt.Sprintf("a%d", turn), Name: "rye/file-system/fs_write", Input: []byte(`{"path":"x.txt","content":"hello"}`)},
		{ID: fmt.Sprintf("b%d", turn), Name: "rye/file-system/fs_read", Input: []byte(`{"path":"y.txt"}`)},
	}
	mustAppend(b, w, TypeCognitionOut, CognitionOut{Content: fmt.Sprintf("%0800d", turn), ToolCalls: calls, Model: "m", Turn: turn})
	for _, c := range calls {
		mustAppend(b, w, TypeToolCallStart, ToolCallStart{CallID: c.ID, Tool: c.Name, Input: c.Input})
		mustAppend(b, w, TypeToolCallResult, ToolCallResult{CallID: c.ID, Tool: c.Name, Output: fmt.Sprintf("%0300d", turn)})
	}
}

func reportPercentiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(d[min(len(d)-1, len(d)*99/100)].Microseconds())/1000, "p99-ms")
}

// BenchmarkCheckpointCommit: latency of Writer.Checkpoint (hash, sign,
// conditional PutObject) on the test S3 server, per turn of ~10 events.
func BenchmarkCheckpointCommit(b *testing.B) {
	ctx := context.Background()
	s := newSetup(b)
	s.store = newS3Store(b)
	w := s.writer(b)
	durs := make([]time.Duration, 0, b.N)
	var size int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		turnEvents(b, w, i+1)
		start := time.Now()
		info, err := w.Checkpoint(ctx, stateFor(i+1))
		durs = append(durs, time.Since(start))
		require.NoError(b, err)
		size = info.Size
	}
	b.StopTimer()
	b.ReportMetric(float64(size), "segment-bytes")
	reportPercentiles(b, durs)
}

// BenchmarkRawPut: a plain PutObject (and a conditional one) of a segment's
// size on the same server: the floor BenchmarkCheckpointCommit is held to.
func BenchmarkRawPut(b *testing.B) {
	ctx := context.Background()
	st := newS3Store(b)
	s := newSetup(b)
	w := s.writer(b)
	turnEvents(b, w, 1)
	info, err := w.Checkpoint(ctx, stateFor(1))
	require.NoError(b, err)
	data, _ := s.store.Get(ctx, info.Key)
	for _, mode := range []string{"put", "put-if-absent"} {
		b.Run(mode, func(b *testing.B) {
			durs := make([]time.Duration, 0, b.N)
			run := testenv.RandomID(4)
			for i := 0; i < b.N; i++ {
				key := fmt.Sprintf("raw/%s/%s/%08d", mode, run, i)
				start := time.Now()
				if mode == "put" {
					err = st.Put(ctx, key, data)
				} else {
					err = st.PutIfAbsent(ctx, key, data)
				}
				durs = append(durs, time.Since(start))
				require.NoError(b, err)
			}
			b.ReportMetric(float64(len(data)), "segment-bytes")
			reportPercentiles(b, durs)
		})
	}
}

// BenchmarkVerifyReconstruct: Read (list, fetch, verify chain and
// signatures) + Reconstruct for transcripts of 1k/10k/100k events, ~10
// events per segment, in the in-memory store (isolates CPU cost).
func BenchmarkVerifyReconstruct(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			ctx := context.Background()
			s := newSetup(b)
			w := s.writer(b)
			for turn := 1; w.NextSegment() == 1 || (w.NextSegment()-1)*10 < int64(n); turn++ {
				turnEvents(b, w, turn)
				_, err := w.Checkpoint(ctx, stateFor(turn))
				require.NoError(b, err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tr := s.read(b, Strict)
				msgs, err := Reconstruct(tr.Events)
				require.NoError(b, err)
				require.NotEmpty(b, msgs, "%v", err)
				b.ReportMetric(float64(len(tr.Events)), "events")
			}
		})
	}
}

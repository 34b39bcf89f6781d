package orchestrator

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

type verifySetup struct {
	ctx    context.Context
	skew   atomic.Int64 // added to the orchestrator's clock
	o      *Orchestrator
	r      *testenv.Redis
	store  blobstore.Store
	signer *transcript.Signer
}

func newVerifySetup(t *testing.T) *verifySetup {
	t.Helper()
	r := testenv.NewRedis(t)
	signer, err := transcript.GenerateKey()
	require.NoError(t, err)
	s := &verifySetup{ctx: context.Background(), r: r, store: blobstore.NewMemory(), signer: signer}
	now := func() time.Time { return time.Now().Add(time.Duration(s.skew.Load())) }
	s.o, err = New(Config{Namespace: r.Namespace, Now: now}, r.Client, s.store, nil, signer, transcript.NewKeyring(signer.PublicKey()))
	require.NoError(t, err)
	return s
}

// runThread registers a thread and runs it the way a worker does: thread.json
// and capabilities.md beside the first turn, and per turn the registry
// commit (raising the mark to what is durable before it), then the
// segment. It returns the record as claimed, the version held, and the
// writer.
func (s *verifySetup) runThread(t *testing.T, id string, turns int) (*registry.Record, int64, *transcript.Writer) {
	t.Helper()
	_, err := s.o.reg.Register(s.ctx, registry.NewThread{ThreadID: id, Directive: "t/verify", Limits: thread.DefaultLimits(),
		Capabilities: []string{"rye.execute.tool.rye.file-system.*", "rye.execute.tool.rye.agent.threads.thread_directive"}})
	require.NoError(t, err)
	require.NoError(t, s.o.ledger.Register(s.ctx, id, 1))
	c, err := s.o.acts.Claim(s.ctx, id, "start", 0, "tok", id, time.Minute)
	require.NoError(t, err)
	rec := c.Record
	require.NoError(t, s.o.WriteThreadJSON(s.ctx, rec))
	body, err := transcript.RenderCapabilities(id, []thread.ToolDef{{Name: "rye/file-system/fs_read"}}, rec.Capabilities)
	require.NoError(t, err)
	require.NoError(t, s.store.Put(s.ctx, blobkey.Capabilities(id), transcript.SignMarkdown(body, s.signer, s.o.Now())))
	w, err := transcript.OpenWriter(s.ctx, s.store, id, s.signer, s.o.keyring, RegistryMark(rec))
	require.NoError(t, err)
	v := rec.Version
	for turn := 1; turn <= turns; turn++ {
		v, err = s.o.reg.Commit(s.ctx, id, v, registry.Changes{Transcript: RecordMark(w.Mark())})
		require.NoError(t, err)
		_, err = w.Append(transcript.TypeCognitionIn, transcript.CognitionIn{Content: "turn"})
		require.NoError(t, err)
		_, err = w.Checkpoint(s.ctx, transcript.State{Iteration: turn})
		require.NoError(t, err)
	}
	return rec, v, w
}

// holdLease sets id's lease to token for ttl, as a worker's claim holds
// it, and returns the lease's key.
func (s *verifySetup) holdLease(t *testing.T, id, token string, ttl time.Duration) string {
	t.Helper()
	lease := s.o.keys.Lease(id)
	require.NoError(t, s.r.Client.Set(s.ctx, lease, token, ttl).Err())
	return lease
}

// tamper applies change, returns what verification says, and puts the
// blobs and the registry hash back.
func (s *verifySetup) tamper(t *testing.T, id string, mode transcript.Mode, change func()) (*Verified, error) {
	t.Helper()
	infos, err := s.store.List(s.ctx, blobkey.Thread(id))
	require.NoError(t, err)
	blobs := map[string][]byte{}
	for _, in := range infos {
		blobs[in.Key], err = s.store.Get(s.ctx, in.Key)
		require.NoError(t, err)
	}
	hash, err := s.r.Client.HGetAll(s.ctx, s.o.keys.Thread(id)).Result()
	require.NoError(t, err)
	defer func() {
		now, err := s.store.List(s.ctx, blobkey.Thread(id))
		require.NoError(t, err)
		for _, in := range now {
			require.NoError(t, s.store.Delete(s.ctx, in.Key))
		}
		for k, b := range blobs {
			require.NoError(t, s.store.Put(s.ctx, k, b))
		}
		require.NoError(t, s.r.Client.Del(s.ctx, s.o.keys.Thread(id)).Err())
		require.NoError(t, s.r.Client.HSet(s.ctx, s.o.keys.Thread(id), hash).Err())
	}()
	change()
	return s.o.VerifyThread(s.ctx, id, mode)
}

func requireTampered(t *testing.T, err error, key, reason string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, transcript.ErrTampered)
	require.Contains(t, err.Error(), key)
	require.Contains(t, err.Error(), reason)
}

func TestVerifyThread(t *testing.T) {
	t.Parallel()
	s := newVerifySetup(t)
	ctx := s.ctx
	const id = "t/verify-1"
	seg := func(n int64) string { return blobkey.Segment(id, n) }
	rec, v, w := s.runThread(t, id, 3)

	// Running: the registry's mark lags by the segment written after the
	// last commit, so that segment is not covered yet; every earlier one is.
	cur, err := s.o.reg.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, registry.TranscriptMark{Segments: 2, ChainHash: mustRead(t, s, id).Segments[1].ChainHash}, cur.Transcript)
	ver, err := s.o.VerifyThread(ctx, id, transcript.Strict)
	require.NoError(t, err)
	require.Len(t, ver.Transcript.Segments, 3)
	require.NotNil(t, ver.Metadata.ThreadJSON)
	require.NotNil(t, ver.Metadata.Capabilities)
	_, err = s.tamper(t, id, transcript.Strict, func() { require.NoError(t, s.store.Delete(ctx, seg(3))) })
	require.NoError(t, err, "a crash between the commit and the segment leaves this state: it verifies")
	_, err = s.tamper(t, id, transcript.Strict, func() { require.NoError(t, s.store.Delete(ctx, seg(2))) })
	requireTampered(t, err, seg(2), "missing segment")
	_, err = s.tamper(t, id, transcript.Strict, func() { require.NoError(t, s.store.Delete(ctx, blobkey.ThreadJSON(id))) })
	require.NoError(t, err, "thread.json is a view: a running thread may lack it")

	// Finished: Finalize records the exact mark, in the registry and in
	// thread.json.
	final := w.Mark()
	require.NoError(t, s.o.Runtime().Finalize(ctx, rec, v, Outcome{Status: thread.StatusCompleted, Result: "done", Transcript: &final}))
	cur, err = s.o.reg.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, *RecordMark(final), cur.Transcript)
	ver, err = s.o.VerifyThread(ctx, id, transcript.Strict)
	require.NoError(t, err)
	require.Equal(t, cur.Transcript, ver.Metadata.ThreadJSON.Transcript)
	require.Equal(t, thread.StatusCompleted, ver.Metadata.ThreadJSON.Status)

	t.Run("last segment deleted", func(t *testing.T) {
		_, err := s.tamper(t, id, transcript.Strict, func() { require.NoError(t, s.store.Delete(ctx, seg(3))) })
		requireTampered(t, err, seg(3), "missing segment: 2 verified, 3 committed")
		ver, err := s.tamper(t, id, transcript.Lenient, func() { require.NoError(t, s.store.Delete(ctx, seg(3))) })
		require.NoError(t, err)
		require.Len(t, ver.Transcript.Segments, 2)
		require.Contains(t, strings.Join(ver.Warnings, "\n"), seg(3))
	})
	t.Run("registry mark reset and last segment deleted", func(t *testing.T) {
		// thread.json's signed mark still holds the transcript.
		_, err := s.tamper(t, id, transcript.Strict, func() {
			require.NoError(t, s.r.Client.HSet(ctx, s.o.keys.Thread(id), "transcript_segments", "0", "transcript_chain_hash", "").Err())
			require.NoError(t, s.store.Delete(ctx, seg(3)))
		})
		requireTampered(t, err, blobkey.ThreadJSON(id), "transcript mark 3 segments is ahead of the registry's 0")
		ver, err := s.tamper(t, id, transcript.Lenient, func() {
			require.NoError(t, s.r.Client.HSet(ctx, s.o.keys.Thread(id), "transcript_segments", "0", "transcript_chain_hash", "").Err())
			require.NoError(t, s.store.Delete(ctx, seg(3)))
		})
		require.NoError(t, err)
		require.Contains(t, strings.Join(ver.Warnings, "\n"), blobkey.ThreadJSON(id))
	})
	t.Run("thread.json missing on a finished thread", func(t *testing.T) {
		ver, err := s.tamper(t, id, transcript.Strict, func() { require.NoError(t, s.store.Delete(ctx, blobkey.ThreadJSON(id))) })
		require.NoError(t, err, "Finalize writes thread.json just after its commit: within the grace it may not be there yet")
		require.Nil(t, ver.Metadata.ThreadJSON)
		s.skew.Store(int64(finalizeGrace + time.Second))
		defer s.skew.Store(0)
		_, err = s.tamper(t, id, transcript.Strict, func() { require.NoError(t, s.store.Delete(ctx, blobkey.ThreadJSON(id))) })
		requireTampered(t, err, blobkey.ThreadJSON(id), "missing, and the thread is completed")
	})
	t.Run("thread.json edited", func(t *testing.T) {
		_, err := s.tamper(t, id, transcript.Strict, func() {
			data, err := s.store.Get(ctx, blobkey.ThreadJSON(id))
			require.NoError(t, err)
			edited := strings.Replace(string(data), `"turns":25`, `"turns":250`, 1)
			require.NotEqual(t, string(data), edited)
			require.NoError(t, s.store.Put(ctx, blobkey.ThreadJSON(id), []byte(edited)))
		})
		requireTampered(t, err, blobkey.ThreadJSON(id), "signature")
		require.ErrorIs(t, err, transcript.ErrBadSignature)
		ver, err := s.tamper(t, id, transcript.Lenient, func() {
			require.NoError(t, s.store.Put(ctx, blobkey.ThreadJSON(id), []byte(`{"thread_id":"x"}`)))
		})
		require.NoError(t, err)
		require.Nil(t, ver.Metadata.ThreadJSON)
		require.Contains(t, strings.Join(ver.Warnings, "\n"), blobkey.ThreadJSON(id))
	})
	t.Run("thread.json signed by an untrusted key", func(t *testing.T) {
		other, err := transcript.GenerateKey()
		require.NoError(t, err)
		_, err = s.tamper(t, id, transcript.Strict, func() {
			data, err := transcript.SignJSON(cur, other)
			require.NoError(t, err)
			require.NoError(t, s.store.Put(ctx, blobkey.ThreadJSON(id), data))
		})
		requireTampered(t, err, blobkey.ThreadJSON(id), "signature")
		require.ErrorIs(t, err, transcript.ErrUnknownKey)
	})
	t.Run("registry limits and capabilities widened", func(t *testing.T) {
		_, err := s.tamper(t, id, transcript.Strict, func() {
			require.NoError(t, s.r.Client.HSet(ctx, s.o.keys.Thread(id), "limits", `{"turns":1000,"tokens":4096,"spend":1,"depth":10,"spawns":10,"duration":600}`).Err())
		})
		requireTampered(t, err, blobkey.ThreadJSON(id), "limits")
		_, err = s.tamper(t, id, transcript.Strict, func() {
			require.NoError(t, s.r.Client.HSet(ctx, s.o.keys.Thread(id), "capabilities", `["rye.execute.tool.*"]`).Err())
		})
		requireTampered(t, err, blobkey.ThreadJSON(id), "capabilities")
	})
	t.Run("signed thread.json of another state", func(t *testing.T) {
		for _, tc := range []struct {
			edit   func(r *registry.Record)
			reason string
		}{
			{func(r *registry.Record) { r.ThreadID = "t/other" }, `names thread "t/other"`},
			{func(r *registry.Record) { r.Version++ }, "ahead of the registry"},
			{func(r *registry.Record) { r.Status = thread.StatusError }, "status error at version"},
			{func(r *registry.Record) { r.Version--; r.Status = thread.StatusCancelled }, "cannot have become"},
		} {
			_, err := s.tamper(t, id, transcript.Strict, func() {
				r := *cur
				tc.edit(&r)
				data, err := transcript.SignJSON(&r, s.signer)
				require.NoError(t, err)
				require.NoError(t, s.store.Put(ctx, blobkey.ThreadJSON(id), data))
			})
			requireTampered(t, err, blobkey.ThreadJSON(id), tc.reason)
		}
	})
	t.Run("capabilities.md", func(t *testing.T) {
		_, err := s.tamper(t, id, transcript.Strict, func() {
			data, err := s.store.Get(ctx, blobkey.Capabilities(id))
			require.NoError(t, err)
			require.NoError(t, s.store.Put(ctx, blobkey.Capabilities(id), []byte(strings.Replace(string(data), "fs_read", "fs_rm", 1))))
		})
		requireTampered(t, err, blobkey.Capabilities(id), "signature")
		_, err = s.tamper(t, id, transcript.Strict, func() {
			body, err := transcript.RenderCapabilities(id, nil, []string{"rye.execute.tool.*"})
			require.NoError(t, err)
			require.NoError(t, s.store.Put(ctx, blobkey.Capabilities(id), transcript.SignMarkdown(body, s.signer, s.o.Now())))
		})
		requireTampered(t, err, blobkey.Capabilities(id), "capabilities differ")
		_, err = s.tamper(t, id, transcript.Strict, func() {
			body, err := transcript.RenderCapabilities("t/other", nil, cur.Capabilities)
			require.NoError(t, err)
			require.NoError(t, s.store.Put(ctx, blobkey.Capabilities(id), transcript.SignMarkdown(body, s.signer, s.o.Now())))
		})
		requireTampered(t, err, blobkey.Capabilities(id), "another thread")
		ver, err := s.tamper(t, id, transcript.Strict, func() { require.NoError(t, s.store.Delete(ctx, blobkey.Capabilities(id))) })
		require.NoError(t, err, "capabilities.md is a view written beside the first turn")
		require.Nil(t, ver.Metadata.Capabilities)
	})
	t.Run("retention", func(t *testing.T) {
		_, err := s.tamper(t, id, transcript.Strict, func() {
			require.NoError(t, s.r.Client.HSet(ctx, s.o.keys.Thread(id), registry.ArtifactsDeletedField, "2026-01-01T00:00:00Z").Err())
		})
		require.ErrorIs(t, err, ErrArtifactsDeleted)
	})

	// A resume logs thread_resumed as a new segment and raises the mark.
	require.NoError(t, s.o.logEvent(ctx, id, transcript.TypeThreadResumed, map[string]any{"new_thread_id": "t/next"}))
	cur, err = s.o.reg.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, int64(4), cur.Transcript.Segments)
	ver, err = s.o.VerifyThread(ctx, id, transcript.Strict)
	require.NoError(t, err)
	require.Equal(t, cur.Transcript, ver.Metadata.ThreadJSON.Transcript, "thread.json rewritten with the mark")
	_, err = s.tamper(t, id, transcript.Strict, func() { require.NoError(t, s.store.Delete(ctx, seg(4))) })
	requireTampered(t, err, seg(4), "missing segment: 3 verified, 4 committed")
}

// TestFinalizeReadsTheMark: a thread finalized without a worker (cancelled
// while waiting) gets the mark of its transcript as it is, so its last
// segment, written after the last commit, is covered too.
func TestFinalizeReadsTheMark(t *testing.T) {
	t.Parallel()
	s := newVerifySetup(t)
	const id = "t/verify-2"
	rec, v, w := s.runThread(t, id, 2)
	require.NoError(t, s.o.Runtime().Finalize(s.ctx, rec, v, Outcome{Status: thread.StatusCancelled, Error: &registry.ErrorInfo{Code: "cancelled"}}))
	cur, err := s.o.reg.Get(s.ctx, id)
	require.NoError(t, err)
	require.Equal(t, *RecordMark(w.Mark()), cur.Transcript)
	_, err = s.tamper(t, id, transcript.Strict, func() { require.NoError(t, s.store.Delete(s.ctx, blobkey.Segment(id, 2))) })
	requireTampered(t, err, blobkey.Segment(id, 2), "missing segment")
}

func mustRead(t *testing.T, s *verifySetup, id string) *transcript.Transcript {
	t.Helper()
	tr, err := transcript.Read(s.ctx, s.store, id, s.o.keyring, transcript.Strict)
	require.NoError(t, err)
	return tr
}

func TestCanBecome(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		from, to thread.Status
		want     bool
	}{
		{thread.StatusRunning, thread.StatusRunning, true},
		{thread.StatusRunning, thread.StatusCompleted, true},
		{thread.StatusCreated, thread.StatusWaiting, true},
		{thread.StatusWaiting, thread.StatusContinued, true},
		{thread.StatusCompleted, thread.StatusContinued, true},
		{thread.StatusError, thread.StatusContinued, true},
		{thread.StatusCompleted, thread.StatusRunning, false},
		{thread.StatusCancelled, thread.StatusCompleted, false},
		{thread.StatusContinued, thread.StatusCompleted, false},
		{thread.StatusRunning, thread.StatusCreated, false},
	} {
		if got := canBecome(tc.from, tc.to); got != tc.want {
			t.Errorf("canBecome(%s, %s) = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
	if errors.Is(&IntegrityError{Key: "k"}, transcript.ErrBadSignature) {
		t.Error("an IntegrityError without a cause matched ErrBadSignature")
	}
}

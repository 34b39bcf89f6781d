package orchestrator

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// idemFixture is an orchestrator on one Redis topology (sharded on a
// Cluster, as spool runs there) with the test/leads bundle, an injected
// clock, and a client whose idem_claim replies a test can cut.
type idemFixture struct {
	o      *Orchestrator
	digest string
	clock  *testenv.Clock
	cut    *replyCutter
}

func idemSetup(t *testing.T, top testenv.Topology) *idemFixture {
	t.Helper()
	r := testenv.NewRedisOn(t, top)
	store := blobstore.NewMemory()
	digest := leadsBundle(t, store)
	signer, err := transcript.GenerateKey()
	require.NoError(t, err)
	cut := &replyCutter{}
	r.Universal.(interface{ AddHook(redis.Hook) }).AddHook(cut)
	if cc, ok := r.Universal.(*redis.ClusterClient); ok {
		// A Cluster's auto-pipeliner sends on its nodes' clients.
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(cut) })
		require.NoError(t, cc.ForEachShard(t.Context(), func(_ context.Context, n *redis.Client) error {
			n.AddHook(cut)
			return nil
		}))
	}
	client := asynq.NewClientFromRedisClient(r.Universal)
	t.Cleanup(func() { _ = client.Close() })
	shards := 1
	if top == testenv.Cluster {
		shards = 32
	}
	clock := testenv.NewTickingClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), time.Millisecond)
	o, err := New(Config{Namespace: r.Namespace, Shards: shards, Now: clock.Now, Logger: slog.New(slog.DiscardHandler)}, r.Universal, store,
		&queue.Enqueuer{Client: client}, signer, transcript.NewKeyring(signer.PublicKey()))
	require.NoError(t, err)
	return &idemFixture{o: o, digest: digest, clock: clock, cut: cut}
}

func (f *idemFixture) req(key string, inputs map[string]any) StartRequest {
	return StartRequest{Directive: "test/leads", Inputs: inputs, Bundle: f.digest, IdempotencyKey: key}
}

// runs are the ids of every run the registry holds.
func (f *idemFixture) runs(t *testing.T) []string {
	t.Helper()
	zs, err := f.o.reg.ThreadsByTime(t.Context(), registry.Window{})
	require.NoError(t, err)
	return registry.IDs(zs)
}

// replyCutter cuts the reply of the next idem_claim once armed: the
// script ran and wrote, and its caller gets a connection error, as when
// the connection drops after Redis executed the command.
type replyCutter struct{ armed atomic.Bool }

func (c *replyCutter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *replyCutter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if c.hit(cmd) {
			cmd.SetErr(io.ErrUnexpectedEOF)
			return io.ErrUnexpectedEOF
		}
		return err
	}
}

func (c *replyCutter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if c.hit(cmd) {
				cmd.SetErr(io.ErrUnexpectedEOF)
				err = io.ErrUnexpectedEOF
			}
		}
		return err
	}
}

// hit reports whether cmd is an idem_claim that ran and whose reply is
// to be cut (once per arming).
func (c *replyCutter) hit(cmd redis.Cmder) bool {
	if cmd.Err() != nil || !strings.Contains(strings.ToLower(cmd.String()), "idem_claim") {
		return false
	}
	return c.armed.CompareAndSwap(true, false)
}

// TestIdempotentStart: a key starts one run in its tenant: the first
// start registers it ("existing": false), the same request again gets it
// (true); the request with defaults applied is the same request; another
// request with the key is idempotency_key_reused naming the key's run;
// another tenant's key, and the key after its retention, start new runs;
// a bad key is refused before anything is recorded. On a standalone Redis
// and on a sharded Cluster, where the key and the run are in different
// slots.
func TestIdempotentStart(t *testing.T) {
	t.Parallel()
	for _, top := range []testenv.Topology{testenv.Standalone, testenv.Cluster} {
		t.Run(string(top), func(t *testing.T) {
			t.Parallel()
			f := idemSetup(t, top)
			ctx := t.Context()
			first, err := f.o.Start(ctx, f.req("order-7", map[string]any{"city": "Lyon"}))
			require.NoError(t, err)
			require.NotNil(t, first.Existing)
			require.False(t, *first.Existing)
			require.Equal(t, "order-7", first.IdempotencyKey)
			got, err := f.o.reg.Get(ctx, first.ThreadID)
			require.NoError(t, err)
			require.Equal(t, "order-7", got.IdempotencyKey)
			require.Nil(t, got.Existing, "existing is the start's answer, not stored")

			again, err := f.o.Start(ctx, f.req("order-7", map[string]any{"city": "Lyon", "niche": "dentists"}))
			require.NoError(t, err, "the default made explicit is the same request")
			require.Equal(t, first.ThreadID, again.ThreadID)
			require.True(t, *again.Existing)

			_, err = f.o.Start(ctx, f.req("order-7", map[string]any{"city": "Paris"}))
			var ae *thread.AdmissionError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, thread.CodeIdempotencyKeyReused, ae.Code)
			require.Equal(t, first.ThreadID, ae.Run)
			require.Contains(t, err.Error(), first.ThreadID)
			prio := f.req("order-7", map[string]any{"city": "Lyon"})
			prio.Priority = 1
			_, err = f.o.Start(ctx, prio)
			require.ErrorIs(t, err, &thread.AdmissionError{Code: thread.CodeIdempotencyKeyReused}, "the priority is part of the request")

			other := f.req("order-7", map[string]any{"city": "Lyon"})
			other.Tenant = "acme"
			theirs, err := f.o.Start(ctx, other)
			require.NoError(t, err)
			require.NotEqual(t, first.ThreadID, theirs.ThreadID, "keys are per tenant")
			require.False(t, *theirs.Existing)
			require.Equal(t, "acme", theirs.Tenant)

			_, err = f.o.Start(ctx, f.req("bad key", map[string]any{"city": "Lyon"}))
			require.ErrorIs(t, err, &thread.AdmissionError{Code: thread.CodeIdempotencyKeyInvalid})
			require.Len(t, f.runs(t), 2, "a refused key registers nothing")

			f.clock.Add(DefaultIdempotencyRetention)
			later, err := f.o.Start(ctx, f.req("order-7", map[string]any{"city": "Paris"}))
			require.NoError(t, err, "after the retention the key is free")
			require.NotEqual(t, first.ThreadID, later.ThreadID)
			require.False(t, *later.Existing)
			require.Len(t, f.runs(t), 3)

			replays, err := f.o.IdempotentReplays(ctx)
			require.NoError(t, err)
			require.Equal(t, int64(1), replays[thread.DefaultTenant][SurfaceOther])
		})
	}
}

// TestIdempotentStartConcurrent: 50 starts of one key at once register
// one run: all 50 answer its id, exactly one says it made it.
func TestIdempotentStartConcurrent(t *testing.T) {
	t.Parallel()
	for _, top := range []testenv.Topology{testenv.Standalone, testenv.Cluster} {
		t.Run(string(top), func(t *testing.T) {
			t.Parallel()
			f := idemSetup(t, top)
			const n = 50
			ids := make([]string, n)
			made := make([]bool, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					rec, err := f.o.Start(t.Context(), f.req("burst", map[string]any{"city": "Lyon"}))
					if errs[i] = err; err == nil {
						ids[i], made[i] = rec.ThreadID, !*rec.Existing
					}
				}()
			}
			close(start)
			wg.Wait()
			require.NoError(t, errors.Join(errs...))
			for _, id := range ids {
				require.Equal(t, ids[0], id)
			}
			creators := 0
			for _, m := range made {
				if m {
					creators++
				}
			}
			require.Equal(t, 1, creators, "exactly one start registered the run")
			require.Equal(t, []string{ids[0]}, f.runs(t))
			e, err := f.o.ledger.Get(t.Context(), ids[0])
			require.NoError(t, err)
			require.Equal(t, "active", e.Status, "the run's budget is whole")
		})
	}
}

// TestIdempotentStartReplyCut: idem_claim's reply is lost after it
// recorded the key (the connection dropped). Either the start fails with
// nothing registered (a standalone client gives up), or the client sends
// the claim again (a Cluster client retries a command whose connection
// broke), which finds the key naming the planned run and starts it. Then
// the start again answers that run: one run, made once.
func TestIdempotentStartReplyCut(t *testing.T) {
	t.Parallel()
	for _, top := range []testenv.Topology{testenv.Standalone, testenv.Cluster} {
		t.Run(string(top), func(t *testing.T) {
			t.Parallel()
			f := idemSetup(t, top)
			ctx := t.Context()
			made := 0
			f.cut.armed.Store(true)
			cut, err := f.o.Start(ctx, f.req("cut", map[string]any{"city": "Lyon"}))
			require.False(t, f.cut.armed.Load(), "the claim ran and its reply was cut")
			if err != nil {
				require.ErrorIs(t, err, io.ErrUnexpectedEOF)
				require.Empty(t, f.runs(t), "nothing registered")
			} else if !*cut.Existing {
				made++
			}
			rec, err := f.o.Start(ctx, f.req("cut", map[string]any{"city": "Lyon"}))
			require.NoError(t, err)
			if !*rec.Existing {
				made++
			}
			if cut != nil {
				require.Equal(t, cut.ThreadID, rec.ThreadID)
			}
			again, err := f.o.Start(ctx, f.req("cut", map[string]any{"city": "Lyon"}))
			require.NoError(t, err)
			require.Equal(t, rec.ThreadID, again.ThreadID)
			require.True(t, *again.Existing)
			require.Equal(t, 1, made, "one start made the run")
			require.Equal(t, []string{rec.ThreadID}, f.runs(t))
		})
	}
}

// TestIdempotentStartAfterClaimOnly: a start that died between its claim
// and its registration left the key naming a run nobody registered: the
// next start of the key starts that very run.
func TestIdempotentStartAfterClaimOnly(t *testing.T) {
	t.Parallel()
	f := idemSetup(t, testenv.Standalone)
	ctx := t.Context()
	req := f.req("orphan", map[string]any{"city": "Lyon"})
	plan := req
	sc, err := f.o.startContext(ctx, &plan)
	require.NoError(t, err)
	nt, err := f.o.plan(plan, sc)
	require.NoError(t, err)
	fp, err := requestFingerprint(plan, nt, thread.DefaultPriority)
	require.NoError(t, err)
	planned := f.o.Runtime().NewID(IDRequest{Directive: "test/leads"})
	id, first, err := f.o.claimKey(ctx, thread.DefaultTenant, "orphan", fp, planned)
	require.NoError(t, err)
	require.True(t, first)
	require.Equal(t, planned, id)

	rec, err := f.o.Start(ctx, req)
	require.NoError(t, err)
	require.Equal(t, planned, rec.ThreadID, "the claimed id is started")
	require.False(t, *rec.Existing)
}

// TestRequestFingerprint: what makes two starts one request.
func TestRequestFingerprint(t *testing.T) {
	t.Parallel()
	fp := func(req StartRequest, inputs map[string]any, prio int) string {
		t.Helper()
		s, err := requestFingerprint(req, registry.NewThread{Directive: req.Directive, Inputs: inputs}, prio)
		require.NoError(t, err)
		return s
	}
	base := StartRequest{Directive: "d/x", Queue: "default"}
	one := fp(base, map[string]any{"n": 1, "s": "a"}, 3)
	require.Equal(t, one, fp(base, map[string]any{"s": "a", "n": 1.0}, 3), "key order and number spelling")
	withBundle := base
	withBundle.Bundle, withBundle.TraceParent = "sha256:other", "00-x"
	require.Equal(t, one, fp(withBundle, map[string]any{"n": 1, "s": "a"}, 3), "the bundle is not the request")
	spend := 0.5
	for name, other := range map[string]StartRequest{
		"model": {Directive: "d/x", Queue: "default", Model: "m"}, "parent": {Directive: "d/x", Queue: "default", ParentID: "p"},
		"queue": {Directive: "d/x", Queue: "low"}, "limits": {Directive: "d/x", Queue: "default", LimitOverrides: thread.Limits{Spend: &spend}},
		"graph": {Directive: "d/x", Queue: "default", Graph: true},
	} {
		require.NotEqual(t, one, fp(other, map[string]any{"n": 1, "s": "a"}, 3), name)
	}
	require.NotEqual(t, one, fp(base, map[string]any{"n": 2, "s": "a"}, 3), "inputs")
	require.NotEqual(t, one, fp(base, map[string]any{"n": 1, "s": "a"}, 2), "priority")
}

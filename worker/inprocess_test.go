package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/ratelimit"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// The in-process harness runs the worker's activation handler directly, one
// task at a time, against real Redis (testenv) and the memory blob store,
// with a fake provider the test programs turn by turn: every step of the
// turn loop and every outcome (finish, suspend, hand back, handoff) is
// reachable without processes or timing.

// fakeModel is the fake provider's model id.
const fakeModel = "script:fake.yaml"

// reply is one scripted model turn: a response, an error, or a function
// of the request (which may block until ctx ends).
type reply struct {
	resp *provider.Response
	err  error
	fn   func(ctx context.Context, req *provider.Request) (*provider.Response, error)
}

func say(text string) reply {
	return reply{resp: &provider.Response{Text: text, Usage: provider.Usage{InputTokens: 100, OutputTokens: 10}}}
}

func call(tool string, input string) reply {
	return reply{resp: &provider.Response{ToolCalls: []thread.ToolCall{{ID: fmt.Sprintf("c-%s", tool), Name: tool, Input: json.RawMessage(input)}},
		Usage: provider.Usage{InputTokens: 100, OutputTokens: 10}}}
}

// blockUntilStopped answers only when the call's context ends.
func blockUntilStopped(started chan<- struct{}) reply {
	return reply{fn: func(ctx context.Context, _ *provider.Request) (*provider.Response, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	}}
}

// fakeProvider plays, for each thread, its directive's replies in order.
type fakeProvider struct {
	mu      sync.Mutex
	replies map[string][]reply // by directive
	next    map[string]int     // by thread id
	calls   int
	window  int
}

func (f *fakeProvider) Complete(ctx context.Context, req *provider.Request, _ func(string)) (*provider.Response, error) {
	f.mu.Lock()
	f.calls++
	rs := f.replies[req.Thread.Directive]
	i := f.next[req.Thread.ID]
	f.next[req.Thread.ID]++
	f.mu.Unlock()
	if i >= len(rs) {
		return nil, &provider.Error{Class: provider.ClassPermanent, Message: fmt.Sprintf("no reply %d for %s", i+1, req.Thread.Directive)}
	}
	r := rs[i]
	switch {
	case r.fn != nil:
		return r.fn(ctx, req)
	case r.err != nil:
		return nil, r.err
	}
	out := *r.resp
	return &out, nil
}

func (f *fakeProvider) ContextWindow(string) int {
	if f.window > 0 {
		return f.window
	}
	return 200000
}

// Cost prices 1 USD per million input tokens, 5 per million output.
func (f *fakeProvider) Cost(_ string, u provider.Usage) (float64, error) {
	return float64(u.InputTokens)/1e6 + float64(u.OutputTokens)*5/1e6, nil
}

func (f *fakeProvider) script(dir string, rs ...reply) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replies[dir] = rs
}

// harness is one test's worker, orchestrator, project and provider.
type harness struct {
	t      *testing.T
	ctx    context.Context
	o      *orchestrator.Orchestrator
	w      *Worker
	prov   *fakeProvider
	bundle string
	insp   *asynq.Inspector
}

// harnessDirective renders a directive with limits and permissions.
func harnessDirective(name, limits, perms string) string {
	return fmt.Sprintf("# %s\n\n```xml\n<directive name=%q version=\"1.0.0\">\n  <metadata>\n    <description>test</description>\n    <limits %s />\n    <permissions>%s</permissions>\n  </metadata>\n</directive>\n```\n",
		name, name, limits, perms)
}

const harnessPerms = `<execute><tool>rye/file-system/*</tool></execute><execute><tool>rye/agent/threads/thread_directive</tool></execute><execute><tool>t/sleep</tool></execute>`

// setup builds a harness whose project holds files (path → content) plus
// the directives h/a (no limits of its own), h/kid and h/tight (turns 2).
func setup(t *testing.T, files map[string]string, wcfg Config) *harness {
	cfg := harnessConfig{Config: wcfg}
	return setupWith(t, files, cfg)
}

// harnessConfig is a worker Config and the harness's clock (nil: the real
// one).
type harnessConfig struct {
	Config
	now func() time.Time
	// tracing is the orchestrator's tracer provider (nil: none).
	tracing trace.TracerProvider
	// noRenew: no admission renewals (a worker that cannot reach Redis
	// to renew its grants); by default they run, as in a worker.
	noRenew bool
}

func setupWith(t *testing.T, files map[string]string, cfg harnessConfig) *harness {
	t.Helper()
	r := testenv.NewRedis(t)
	ctx := context.Background()
	dir := t.TempDir()
	all := map[string]string{
		".ai/directives/h/a.md":     harnessDirective("a", `turns="6"`, harnessPerms),
		".ai/directives/h/kid.md":   harnessDirective("kid", `turns="4"`, harnessPerms),
		".ai/directives/h/tight.md": harnessDirective("tight", `turns="2"`, harnessPerms),
		".ai/tools/t/sleep.sh":      "#!/bin/sh\nsleep 30\necho '{\"output\": \"slept\"}'\n",
		"fake.yaml":                 "directives: {}\n",
	}
	for k, v := range files {
		all[k] = v
	}
	testenv.WriteFiles(t, filepath.Join(dir, "project"), all)
	store := blobstore.NewMemory()
	signer, _, err := transcript.InitKeys(filepath.Join(dir, "keys"), false)
	require.NoError(t, err)
	keyring, err := transcript.LoadKeyring(filepath.Join(dir, "keys"), signer)
	require.NoError(t, err)
	client := asynq.NewClientFromRedisClient(r.Client)
	t.Cleanup(func() { _ = client.Close() })
	o, err := orchestrator.New(orchestrator.Config{Namespace: r.Namespace, LeaseTTL: 2 * time.Second, Now: cfg.now, Tracing: cfg.tracing}, r.Client, store,
		&queue.Enqueuer{Client: client}, signer, keyring)
	require.NoError(t, err)
	bundle, err := directive.BuildBundle(ctx, store, filepath.Join(dir, "project"), "", map[string][]byte{"fake.yaml": []byte(all["fake.yaml"])})
	require.NoError(t, err)
	prov := &fakeProvider{replies: map[string][]reply{}, next: map[string]int{}}
	cfg.NewProvider = func(string, provider.Config) (provider.Provider, error) { return prov, nil }
	if cfg.StoragePatience == 0 {
		cfg.StoragePatience = -1
	}
	w, err := New(cfg.Config, o)
	require.NoError(t, err)
	t.Cleanup(func() { w.asyncCancel(); w.async.Wait() })
	if !cfg.noRenew {
		rctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); w.renewAdmissions(rctx, o.Runtime().Services().LeaseTTL) }()
		t.Cleanup(func() { stop(); <-done })
	}
	insp := asynq.NewInspectorFromRedisClient(r.Client)
	t.Cleanup(func() { _ = insp.Close() })
	return &harness{t: t, ctx: ctx, o: o, w: w, prov: prov, bundle: bundle, insp: insp}
}

// start registers a thread and returns its id. The start task that
// Start queued is taken off the queue: the test runs activations itself
// (activate, drain).
func (h *harness) start(dir string, limits thread.Limits) string {
	h.t.Helper()
	rec, err := h.o.Start(h.ctx, orchestrator.StartRequest{Directive: dir, Bundle: h.bundle, Model: fakeModel, LimitOverrides: limits})
	require.NoError(h.t, err)
	require.NoError(h.t, h.insp.DeleteTask(h.o.Runtime().Services().Keys.Queue(rec.Queue), rec.ThreadID))
	return rec.ThreadID
}

// startParentOfKid scripts h/a to start h/kid synchronously and then
// answer "parent done", and h/kid to answer "kid done"; it starts h/a
// and returns its id.
func (h *harness) startParentOfKid() string {
	h.t.Helper()
	h.prov.script("h/a", call("rye/agent/threads/thread_directive", `{"directive_name":"h/kid"}`), say("parent done"))
	h.prov.script("h/kid", say("kid done"))
	return h.start("h/a", thread.Limits{})
}

// activate runs one activation of id directly.
func (h *harness) activate(id, reason string, seq int64) error {
	h.t.Helper()
	task, err := queue.NewActivation(queue.Activation{ThreadID: id, Reason: reason}, seq)
	require.NoError(h.t, err)
	return h.w.handle(h.ctx, task)
}

// drain runs the queued activations (pending, and scheduled ones whose
// time has come when due is set) one at a time, as a serial asynq server
// would, until none is left; it returns how many ran.
func (h *harness) drain(due bool) int {
	h.t.Helper()
	ran := 0
	for round := 0; round < 100; round++ {
		qs, err := h.insp.Queues()
		require.NoError(h.t, err)
		var todo []*asynq.TaskInfo
		for _, q := range qs {
			if !strings.HasPrefix(q, h.o.Runtime().Services().Keys.Namespace()+".") {
				continue // another test's
			}
			pend, err := h.insp.ListPendingTasks(q)
			require.NoError(h.t, err)
			todo = append(todo, pend...)
			if due {
				sched, err := h.insp.ListScheduledTasks(q)
				require.NoError(h.t, err)
				todo = append(todo, sched...)
			}
		}
		if len(todo) == 0 {
			return ran
		}
		for _, ti := range todo {
			if err := h.insp.DeleteTask(ti.Queue, ti.ID); err != nil {
				continue
			}
			if ti.Type == admission.TypePump {
				_ = h.o.Admission().HandlePump(h.ctx, asynq.NewTask(ti.Type, ti.Payload))
				continue
			}
			_ = h.w.handle(h.ctx, asynq.NewTask(ti.Type, ti.Payload))
			ran++
		}
	}
	h.t.Fatal("drain: activations keep coming")
	return ran
}

func (h *harness) record(id string) *registry.Record {
	h.t.Helper()
	rec, err := h.o.Record(h.ctx, id)
	require.NoError(h.t, err)
	return rec
}

// eventsOf decodes the thread's transcript events of type typ, in order.
func eventsOf[T any](h *harness, id, typ string) []T {
	h.t.Helper()
	tr, err := transcript.Read(h.ctx, h.o.Runtime().Services().Store, id, h.o.Runtime().Services().Keyring, transcript.Strict)
	require.NoError(h.t, err)
	var out []T
	for _, ev := range tr.Events {
		if ev.Type == typ {
			var v T
			require.NoError(h.t, ev.Decode(&v))
			out = append(out, v)
		}
	}
	return out
}

// events are the thread's transcript event types, in order.
func (h *harness) events(id string) []string {
	h.t.Helper()
	tr, err := transcript.Read(h.ctx, h.o.Runtime().Services().Store, id, h.o.Runtime().Services().Keyring, transcript.Strict)
	require.NoError(h.t, err)
	var out []string
	for _, ev := range tr.Events {
		out = append(out, ev.Type)
	}
	return out
}

func limits(set func(*thread.Limits)) thread.Limits {
	var l thread.Limits
	set(&l)
	return l
}

func ptr[T any](v T) *T { return &v }

// TestLoopLimits: each limit ends the thread with its code, at the step
// where it binds.
func TestLoopLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		dir     string
		limits  thread.Limits
		replies []reply
		code    string
		turns   int
	}{
		{"turns", "h/tight", thread.Limits{}, []reply{call("rye/file-system/fs_read", `{"path":"x"}`), call("rye/file-system/fs_read", `{"path":"x"}`), say("never")},
			thread.CodeTurnsExceeded, 2},
		{"tokens", "h/a", limits(func(l *thread.Limits) { l.Tokens = ptr(150) }),
			[]reply{call("rye/file-system/fs_read", `{"path":"x"}`), call("rye/file-system/fs_read", `{"path":"x"}`), say("never")},
			thread.CodeTokensExceeded, 2},
		{"spend", "h/a", limits(func(l *thread.Limits) { l.Spend = ptr(0.00015) }),
			[]reply{call("rye/file-system/fs_read", `{"path":"x"}`), call("rye/file-system/fs_read", `{"path":"x"}`), say("never")},
			thread.CodeSpendExceeded, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, nil, Config{})
			h.prov.script(tc.dir, tc.replies...)
			id := h.start(tc.dir, tc.limits)
			require.NoError(t, h.activate(id, "start", 0))
			rec := h.record(id)
			require.Equal(t, thread.StatusError, rec.Status)
			require.Equal(t, tc.code, rec.Error.Code, rec.Error.Message)
			require.Equal(t, tc.turns, rec.Cost.Turns)
			require.Contains(t, h.events(id), transcript.TypeLimitExceeded)
		})
	}
}

// durationHint ends the message of a thread stopped by its duration limit.
var durationHint = " (" + thread.RaiseHint(thread.CodeDurationExceeded) + ")"

// TestLoopTokensPastTheLimit: a response that takes the thread past its
// tokens limit ends it tokens_exceeded where it is counted: its tool calls
// do not run (a directive_return does not complete it) and a last answer
// past the limit does not complete it either.
func TestLoopTokensPastTheLimit(t *testing.T) {
	t.Parallel()
	for name, last := range map[string]reply{
		"a tool call":      call("rye/file-system/fs_write", `{"path":"late.txt","content":"x"}`),
		"directive_return": call("rye/agent/threads/directive_return", `{"result":"done"}`),
		"a last answer":    say("done"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, nil, Config{})
			// 110 tokens a call: the first stays under 150, the second
			// ends at 220 of 150.
			h.prov.script("h/a", call("rye/file-system/fs_read", `{"path":"x"}`), last, say("never"))
			id := h.start("h/a", limits(func(l *thread.Limits) { l.Tokens = ptr(150) }))
			require.NoError(t, h.activate(id, "start", 0))
			rec := h.record(id)
			require.Equal(t, thread.StatusError, rec.Status, "ended %s %v", rec.Status, rec.Error)
			require.Equal(t, thread.CodeTokensExceeded, rec.Error.Code)
			require.Contains(t, rec.Error.Message, "220 of 150")
			require.Contains(t, rec.Error.Message, "--limit tokens=N")
			require.Equal(t, 2, rec.Cost.Turns)
			require.Equal(t, 220, rec.Cost.InputTokens+rec.Cost.OutputTokens, "the response past the limit is counted")
			_, err := h.o.Runtime().Services().Store.Get(h.ctx, blobkey.WorkspaceFile(id, "late.txt"))
			require.ErrorIs(t, err, blobstore.ErrNotFound, "the call past the limit did not run")
			require.Equal(t, 2, h.prov.calls)
		})
	}
}

// TestLoopStopsWherever: a cancel request or the duration limit that
// lands during any step ends the thread there, decided in one place
// (stopAfter), with the step named.
func TestLoopStopsWherever(t *testing.T) {
	t.Parallel()
	type stopper func(h *harness, id string)
	cancelIt := func(h *harness, id string) {
		require.NoError(h.t, h.o.Runtime().Services().Registry.RequestCancel(h.ctx, id, true))
		h.w.deliver(id, "cancel")
	}
	for _, tc := range []struct {
		name    string
		limits  thread.Limits
		replies func(started chan<- struct{}) []reply
		stop    stopper // nil: the duration limit stops it
		status  thread.Status
		code    string
		message string
	}{
		{"cancel during the model call", thread.Limits{}, func(s chan<- struct{}) []reply { return []reply{blockUntilStopped(s)} },
			cancelIt, thread.StatusCancelled, "cancelled", "cancelled during the model call"},
		{"duration during the model call", limits(func(l *thread.Limits) { l.Duration = ptr(1.0) }),
			func(s chan<- struct{}) []reply { return []reply{blockUntilStopped(s)} },
			nil, thread.StatusError, thread.CodeDurationExceeded, "the thread reached its duration limit of 1s during the model call" + durationHint},
		{"cancel during a tool", thread.Limits{}, func(s chan<- struct{}) []reply {
			close(s)
			return []reply{call("t/sleep", `{}`), say("never")}
		}, cancelIt, thread.StatusCancelled, "cancelled", "cancelled during tool t/sleep"},
		{"duration during a tool", limits(func(l *thread.Limits) { l.Duration = ptr(1.0) }), func(s chan<- struct{}) []reply {
			close(s)
			return []reply{call("t/sleep", `{}`), say("never")}
		}, nil, thread.StatusError, thread.CodeDurationExceeded, "the thread reached its duration limit of 1s during tool t/sleep" + durationHint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, nil, Config{})
			started := make(chan struct{})
			h.prov.script("h/a", tc.replies(started)...)
			id := h.start("h/a", tc.limits)
			done := make(chan error, 1)
			began := time.Now()
			go func() { done <- h.activate(id, "start", 0) }()
			<-started
			if tc.stop != nil {
				time.Sleep(200 * time.Millisecond) // into the call or the tool
				tc.stop(h, id)
			}
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(20 * time.Second):
				t.Fatal("the stop did not end the activation")
			}
			require.Less(t, time.Since(began), 10*time.Second)
			rec := h.record(id)
			require.Equal(t, tc.status, rec.Status)
			require.Equal(t, tc.code, rec.Error.Code)
			require.Equal(t, tc.message, rec.Error.Message)
			_, err := h.o.Housekeeper().LeaseHeld(h.ctx, id)
			require.NoError(t, err)
		})
	}
}

// TestLoopCancelBeforeTurn: a cancel requested before the activation
// claims the thread is read from the claimed record: no model call.
func TestLoopCancelBeforeTurn(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	h.prov.script("h/a", say("never"))
	id := h.start("h/a", thread.Limits{})
	require.NoError(t, h.o.Runtime().Services().Registry.RequestCancel(h.ctx, id, true))
	require.NoError(t, h.activate(id, "start", 0))
	rec := h.record(id)
	require.Equal(t, thread.StatusCancelled, rec.Status)
	require.Equal(t, "cancelled by request", rec.Error.Message)
	require.Zero(t, h.prov.calls)
}

// TestLoopRetryHandBack: a failed call whose retry-after is past the
// hand-back threshold checkpoints the thread and hands it back with a
// recover activation scheduled for the retry time; that activation
// retries the call and the thread completes.
func TestLoopRetryHandBack(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{RetryHandBack: 100 * time.Millisecond})
	unavailable := &provider.Error{Class: provider.ClassTransient, StatusCode: 503, RetryAfter: 500 * time.Millisecond, Message: "unavailable"}
	h.prov.script("h/a", reply{err: unavailable}, say("done after the wait"))
	id := h.start("h/a", thread.Limits{})
	require.NoError(t, h.activate(id, "start", 0))
	rec := h.record(id)
	require.Equal(t, thread.StatusRunning, rec.Status, "handed back, not failed")
	require.NotEmpty(t, rec.Extra[registry.RetryAtField])
	held, err := h.o.Housekeeper().LeaseHeld(h.ctx, id)
	require.NoError(t, err)
	require.False(t, held, "no slot held while it waits")
	require.Zero(t, h.drain(false), "nothing runs before the retry time")
	require.Equal(t, 1, h.drain(true), "the recover activation at the retry time")
	rec = h.record(id)
	require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
	require.Equal(t, "done after the wait", rec.Result)
	require.Equal(t, 2, h.prov.calls)
}

// TestLoopSlowDown: a provider that answers "slow down" (rate_limited)
// has the thread handed back each time, waiting for rate_limit with no
// slot held, for as many answers as it gives: they use up none of the
// transient errors' retries, which still number the policy's 3 around
// them. The thread completes, its tokens those of the call that went
// through.
func TestLoopSlowDown(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	limited := reply{err: &provider.Error{Class: provider.ClassRateLimited, StatusCode: 429, RetryAfter: 10 * time.Millisecond, Message: "slow down"}}
	transient := reply{err: &provider.Error{Class: provider.ClassTransient, StatusCode: 500, RetryAfter: 10 * time.Millisecond, Message: "oops"}}
	script := []reply{transient, limited, limited, transient, limited, limited, limited, limited, transient, limited, say("done after the storm")}
	h.prov.script("h/a", script...)
	id := h.start("h/a", thread.Limits{})
	require.NoError(t, h.activate(id, "start", 0))
	rec := h.record(id)
	require.Equal(t, thread.StatusWaiting, rec.Status, "%+v", rec.Error)
	require.Equal(t, registry.WaitingForRateLimit, rec.WaitingFor)
	held, err := h.o.Housekeeper().LeaseHeld(h.ctx, id)
	require.NoError(t, err)
	require.False(t, held, "no slot held while the provider says slow down")
	require.Equal(t, 7, h.drain(true), "an activation at each slow down's retry time")
	rec = h.record(id)
	require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
	require.Equal(t, "done after the storm", rec.Result)
	require.Equal(t, len(script), h.prov.calls)
	require.Equal(t, 100, rec.Cost.InputTokens, "the tokens of the call that went through")
	require.Equal(t, 10, rec.Cost.OutputTokens)
	errs := eventsOf[transcript.Error](h, id, transcript.TypeThreadError)
	require.Len(t, errs, len(script)-1)
	for _, e := range errs {
		require.True(t, e.Retryable, "%+v", e)
	}
}

// TestLoopSlowDownUntilTheDurationLimit: a provider that keeps saying
// slow down, with a retry-after past the thread's duration limit, has the
// thread wait until that limit, not past it, and then end with it.
func TestLoopSlowDownUntilTheDurationLimit(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	limited := reply{err: &provider.Error{Class: provider.ClassRateLimited, StatusCode: 429, RetryAfter: time.Hour, Message: "slow down"}}
	h.prov.script("h/a", limited, limited)
	id := h.start("h/a", limits(func(l *thread.Limits) { l.Duration = ptr(1.0) }))
	require.NoError(t, h.activate(id, "start", 0))
	rec := h.record(id)
	require.Equal(t, thread.StatusWaiting, rec.Status, "%+v", rec.Error)
	require.Equal(t, registry.WaitingForRateLimit, rec.WaitingFor)
	wake, err := time.Parse(time.RFC3339Nano, rec.Extra["wake_at"])
	require.NoError(t, err)
	require.WithinDuration(t, rec.StartedAt.Add(time.Second), wake, time.Millisecond, "woken at the duration limit, not in an hour")
	time.Sleep(time.Until(wake))
	require.Equal(t, 1, h.drain(true))
	rec = h.record(id)
	require.Equal(t, thread.StatusError, rec.Status)
	require.Equal(t, thread.CodeDurationExceeded, rec.Error.Code)
	require.Equal(t, 1, h.prov.calls)
}

// TestLoopSuspendAndWake: a synchronous spawn suspends the parent (no
// slot, status waiting); the child's end enqueues the parent's wake, which
// answers the spawn call with the child's result.
func TestLoopSuspendAndWake(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	id := h.startParentOfKid()
	require.NoError(t, h.activate(id, "start", 0))
	rec := h.record(id)
	require.Equal(t, thread.StatusWaiting, rec.Status)
	held, err := h.o.Housekeeper().LeaseHeld(h.ctx, id)
	require.NoError(t, err)
	require.False(t, held)
	require.Equal(t, 2, h.drain(false), "the child's start, then the parent's wake")
	rec = h.record(id)
	require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
	require.Equal(t, "parent done", rec.Result)
	require.Contains(t, h.events(id), transcript.TypeThreadWaiting)
	kids, err := h.o.Children(h.ctx, id)
	require.NoError(t, err)
	require.Len(t, kids, 1)
	require.Equal(t, "kid done", kids[0].Result)
	e, err := h.o.LedgerEntry(h.ctx, id)
	require.NoError(t, err)
	require.InDelta(t, rec.Cost.Spend+kids[0].Cost.Spend, e.Actual, 1e-12, "the parent's ledger holds the tree's spend")
}

// TestLoopHandoff: a full context hands off to a continuation, which goes
// on in the chain's ledger entry with what the chain has left.
func TestLoopHandoff(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	h.prov.window = 1000
	big := &provider.Response{ToolCalls: []thread.ToolCall{{ID: "c1", Name: "rye/file-system/fs_read", Input: json.RawMessage(`{"path":"x"}`)}},
		Usage: provider.Usage{InputTokens: 950, OutputTokens: 10}}
	h.prov.script("h/a", reply{fn: func(_ context.Context, req *provider.Request) (*provider.Response, error) {
		if req.Thread.ChainIndex == 0 {
			return big, nil // fills the context: a handoff
		}
		return say("continued and done").resp, nil
	}})
	id := h.start("h/a", thread.Limits{})
	require.NoError(t, h.activate(id, "start", 0))
	rec := h.record(id)
	require.Equal(t, thread.StatusContinued, rec.Status)
	require.NotEmpty(t, rec.ContinuationThreadID)
	require.Equal(t, 1, h.drain(false))
	next := h.record(rec.ContinuationThreadID)
	require.Equal(t, thread.StatusCompleted, next.Status, "%+v", next.Error)
	require.InDelta(t, rec.Limits.Spend-rec.Cost.Spend, next.Limits.Spend, 1e-12)
	require.Equal(t, id, next.LedgerID())
}

// TestLoopProviderErrors: a permanent provider error fails the thread at
// once; a transient one is retried in the slot.
func TestLoopProviderErrors(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	h.prov.script("h/a", reply{err: &provider.Error{Class: provider.ClassPermanent, StatusCode: 400, Message: "bad request"}})
	h.prov.script("h/kid", reply{err: &provider.Error{Class: provider.ClassTransient, StatusCode: 529, Message: "overloaded"}}, say("fine"))
	a := h.start("h/a", thread.Limits{})
	require.NoError(t, h.activate(a, "start", 0))
	rec := h.record(a)
	require.Equal(t, thread.StatusError, rec.Status)
	require.Equal(t, "provider_permanent", rec.Error.Code)
	k := h.start("h/kid", thread.Limits{})
	require.NoError(t, h.activate(k, "start", 0))
	require.Equal(t, thread.StatusCompleted, h.record(k).Status)
}

// TestLoopStorageFailureIsNotTheModels: a store that fails under a tool
// fails the activation (retried from the last checkpoint), never hands
// the model a tool error.
func TestLoopStorageFailureIsNotTheModels(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	h.prov.script("h/a", call("rye/file-system/fs_write", `{"path":"a.txt","content":"x"}`), say("written"))
	id := h.start("h/a", thread.Limits{})
	broken := &failingStore{Store: h.o.Runtime().Services().Store}
	h.w.o = h.w.o.WithStore(broken)
	broken.failWorkspace.Store(true)
	err := h.activate(id, "start", 0)
	require.Error(t, err)
	require.ErrorIs(t, err, errStoreDown)
	broken.failWorkspace.Store(false)
	// The recovering activation re-runs the turn from the last checkpoint.
	require.Eventually(t, func() bool {
		held, err := h.o.Housekeeper().LeaseHeld(h.ctx, id)
		return err == nil && !held
	}, 10*time.Second, 50*time.Millisecond, "the failed activation's lease lapses")
	rec := h.record(id)
	h.prov.mu.Lock()
	h.prov.next[id] = 0
	h.prov.mu.Unlock()
	require.NoError(t, h.activate(id, "recover", rec.Version))
	rec = h.record(id)
	require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
	for _, ev := range h.events(id) {
		require.NotEqual(t, "error", ev)
	}
}

var errStoreDown = errors.New("store down")

// failingStore fails every workspace write while failWorkspace is set.
type failingStore struct {
	blobstore.Store
	failWorkspace atomic.Bool
}

func (f *failingStore) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	if f.failWorkspace.Load() && strings.HasPrefix(key, "workspaces/") {
		return errStoreDown
	}
	return f.Store.PutIfAbsent(ctx, key, data)
}

func (f *failingStore) Put(ctx context.Context, key string, data []byte) error {
	if f.failWorkspace.Load() && strings.HasPrefix(key, "workspaces/") {
		return errStoreDown
	}
	return f.Store.Put(ctx, key, data)
}

const approvalsYAML = `approvals:
  - tool: rye/file-system/fs_write
  - tool: rye/file-system/fs_list
    timeout: 1s
    on_timeout: approve
`

// fsWrites lists the workspace files of a thread's tree.
func (h *harness) file(id, path string) (string, bool) {
	h.t.Helper()
	rec := h.record(id)
	b, err := h.o.Runtime().Services().Store.Get(h.ctx, blobkey.WorkspaceFile(rec.TreeID(), path))
	if errors.Is(err, blobstore.ErrNotFound) {
		return "", false
	}
	require.NoError(h.t, err)
	return string(b), true
}

// TestApprovals: a gated call suspends the thread (waiting for approval,
// no lease) while the turn's other calls run; approve runs it once, deny
// answers the model with the reason and never runs it, two gated calls
// are decided separately, and a rule's timeout applies its on_timeout.
func TestApprovals(t *testing.T) {
	t.Parallel()
	two := reply{resp: &provider.Response{ToolCalls: []thread.ToolCall{
		{ID: "w1", Name: "rye/file-system/fs_write", Input: json.RawMessage(`{"path":"a.txt","content":"A"}`)},
		{ID: "r1", Name: "rye/file-system/fs_read", Input: json.RawMessage(`{"path":"nothing"}`)},
		{ID: "w2", Name: "rye/file-system/fs_write", Input: json.RawMessage(`{"path":"b.txt","content":"B"}`)},
	}, Usage: provider.Usage{InputTokens: 100, OutputTokens: 10}}}
	var seen []thread.Message
	last := reply{fn: func(_ context.Context, req *provider.Request) (*provider.Response, error) {
		seen = append([]thread.Message(nil), req.Messages...)
		return say("done").resp, nil
	}}
	h := setup(t, map[string]string{".ai/config/agent/approvals.yaml": approvalsYAML}, Config{})
	h.prov.script("h/a", two, last)
	id := h.start("h/a", thread.Limits{})
	require.NoError(t, h.activate(id, "start", 0))

	rec := h.record(id)
	require.Equal(t, thread.StatusWaiting, rec.Status)
	require.Equal(t, registry.WaitingForApproval, rec.WaitingFor)
	require.Len(t, rec.PendingApprovals, 2)
	held, err := h.o.Housekeeper().LeaseHeld(h.ctx, id)
	require.NoError(t, err)
	require.False(t, held, "no lease, no slot")
	_, ok := h.file(id, "a.txt")
	require.False(t, ok, "the gated call did not run")
	pending, err := h.o.Approvals(h.ctx, "")
	require.NoError(t, err)
	require.Len(t, pending, 2)

	res, err := h.o.Decide(h.ctx, id, []string{"w1"}, registry.DecisionApprove, "ada", "fine")
	require.NoError(t, err)
	require.False(t, res.Woken, "w2 still waits")
	require.Zero(t, h.drain(false))
	_, err = h.o.Decide(h.ctx, id, []string{"w1"}, registry.DecisionDeny, "bob", "too late")
	require.ErrorIs(t, err, registry.ErrNotPending, "a call is decided once")
	res, err = h.o.Decide(h.ctx, id, []string{"w2"}, registry.DecisionDeny, "bob", "not b")
	require.NoError(t, err)
	require.True(t, res.Woken)
	require.Equal(t, 1, h.drain(false))

	rec = h.record(id)
	require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
	a, ok := h.file(id, "a.txt")
	require.True(t, ok)
	require.Equal(t, "A", a)
	_, ok = h.file(id, "b.txt")
	require.False(t, ok, "the denied call never ran")
	var denied string
	for _, m := range seen {
		if m.ToolCallID == "w2" {
			denied = m.Content
		}
	}
	require.Equal(t, "denied by bob: not b", denied, "the model got the reason")
	var answered []string
	for _, m := range seen {
		if m.Role == thread.RoleTool {
			answered = append(answered, m.ToolCallID)
		}
	}
	require.Equal(t, []string{"w1", "r1", "w2"}, answered,
		"the model reads the results in the order of its calls, the gated ones' too (r1's came first)")
	evs := h.events(id)
	require.Contains(t, evs, transcript.TypeApprovalRequested)
	require.Contains(t, evs, transcript.TypeApprovalDecided)
	pending, err = h.o.Approvals(h.ctx, "")
	require.NoError(t, err)
	require.Empty(t, pending)
	_, err = h.o.Decide(h.ctx, id, nil, registry.DecisionApprove, "ada", "")
	require.ErrorIs(t, err, registry.ErrNotPending)
}

// TestApprovalTimeout: a gated call nobody decides gets its rule's
// on_timeout when the scheduled timeout activation comes.
func TestApprovalTimeout(t *testing.T) {
	t.Parallel()
	h := setup(t, map[string]string{".ai/config/agent/approvals.yaml": approvalsYAML}, Config{})
	h.prov.script("h/a", call("rye/file-system/fs_list", `{"path":"."}`), say("listed"))
	id := h.start("h/a", thread.Limits{})
	require.NoError(t, h.activate(id, "start", 0))
	require.Equal(t, thread.StatusWaiting, h.record(id).Status)
	require.Zero(t, h.drain(false), "nothing before the timeout")
	time.Sleep(1100 * time.Millisecond)
	require.Equal(t, 1, h.drain(true), "the timeout activation")
	rec := h.record(id)
	require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
	d := eventsOf[transcript.ApprovalDecided](h, id, transcript.TypeApprovalDecided)
	require.NotEmpty(t, d)
	asked := eventsOf[transcript.ApprovalRequested](h, id, transcript.TypeApprovalRequested)
	require.NotEmpty(t, asked)
	require.NotEmpty(t, asked[0].RequestID, "each request has an id")
	require.Equal(t, transcript.ApprovalDecided{CallID: "c-rye/file-system/fs_list", RequestID: asked[0].RequestID, Tool: "rye/file-system/fs_list",
		Decision: "approve", By: "timeout", Reason: "no decision within the approval's timeout"}, d[len(d)-1])
}

// TestApprovalCancel: a thread waiting for approval is cancelled at once
// (no activation holds it).
func TestApprovalCancel(t *testing.T) {
	t.Parallel()
	h := setup(t, map[string]string{".ai/config/agent/approvals.yaml": approvalsYAML}, Config{})
	h.prov.script("h/a", call("rye/file-system/fs_write", `{"path":"x","content":"x"}`), say("never"))
	id := h.start("h/a", thread.Limits{})
	require.NoError(t, h.activate(id, "start", 0))
	rec, err := h.o.Cancel(h.ctx, id, true)
	require.NoError(t, err)
	require.Equal(t, thread.StatusCancelled, rec.Status)
	pending, err := h.o.Approvals(h.ctx, "")
	require.NoError(t, err)
	require.Empty(t, pending)
}

// TestSpendInWholeNanoUSD: a thread's spend is the sum of its turns' in
// whole nano-USD, as its ledger entry has it, not a float sum that reads
// 0.00030000000000000003 in its record.
func TestSpendInWholeNanoUSD(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	h.prov.script("h/a", call("rye/file-system/fs_read", `{"path":"x"}`), say("done"))
	id := h.start("h/a", thread.Limits{})
	require.NoError(t, h.activate(id, "start", 0))
	rec := h.record(id)
	require.Equal(t, 2, rec.Cost.Turns)
	require.Equal(t, 0.0003, rec.Cost.Spend)
	b, err := json.Marshal(rec.Cost)
	require.NoError(t, err)
	require.Contains(t, string(b), `"spend":0.0003,`)
	e, err := h.o.LedgerEntry(h.ctx, id)
	require.NoError(t, err)
	require.Equal(t, rec.Cost.Spend, e.Own)
}

// TestSendAndInterrupt: a message sent to a running thread reaches the
// model before its next call; an interrupt stops the model call in
// flight at once (nothing of it recorded or charged) and delivers its
// message; a finished thread takes no message.
func TestSendAndInterrupt(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	started := make(chan struct{})
	var saw [][]thread.Message
	record := func(resp *provider.Response) reply {
		return reply{fn: func(_ context.Context, req *provider.Request) (*provider.Response, error) {
			saw = append(saw, append([]thread.Message(nil), req.Messages...))
			out := *resp
			return &out, nil
		}}
	}
	h.prov.script("h/a",
		blockUntilStopped(started),
		record(call("rye/file-system/fs_read", `{"path":"x"}`).resp),
		record(say("done").resp))
	id := h.start("h/a", thread.Limits{})
	done := make(chan error, 1)
	go func() { done <- h.activate(id, "start", 0) }()
	<-started
	began := time.Now()
	res, err := h.o.Send(h.ctx, id, "stop and read x", "ada", true)
	require.NoError(t, err)
	require.Equal(t, int64(1), res.Seq)
	h.w.deliver(id, "interrupt") // what the control channel carries to the worker
	_, err = h.o.Send(h.ctx, id, "and then finish", "ada", false)
	require.NoError(t, err)
	require.NoError(t, <-done)
	require.Less(t, time.Since(began), 5*time.Second)

	rec := h.record(id)
	require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
	require.Equal(t, 2, rec.Cost.Turns, "the interrupted call is not a turn and is not charged")
	require.Len(t, saw, 2)
	users := func(msgs []thread.Message) (out []string) {
		for _, m := range msgs {
			if m.Role == thread.RoleUser {
				out = append(out, m.Content)
			}
		}
		return out
	}
	require.Contains(t, users(saw[0]), "stop and read x", "the interrupt's message, at the next call")
	// The second message reaches the call after the interrupt, or the one
	// after that when the worker made the first before it was sent.
	require.Contains(t, users(saw[1]), "and then finish")
	e, err := h.o.LedgerEntry(h.ctx, id)
	require.NoError(t, err)
	require.InDelta(t, rec.Cost.Spend, e.Own, 1e-12)
	msgs := eventsOf[transcript.UserMessage](h, id, transcript.TypeUserMessage)
	require.Equal(t, []transcript.UserMessage{{Content: "stop and read x", By: "ada", Interrupted: true}, {Content: "and then finish", By: "ada"}}, msgs,
		"each message once, in order")
	_, err = h.o.Send(h.ctx, id, "late", "ada", false)
	require.ErrorIs(t, err, registry.ErrFinished)
}

// testClock is a settable clock for the orchestrator and the limiter.
// TestRateLimitHandsBack: a model call its rate limit refuses for longer
// than the hand-back threshold checkpoints the thread and suspends it
// (waiting for rate_limit, no slot), with an activation scheduled when
// the limiter says; that activation is admitted and the thread completes.
func TestRateLimitHandsBack(t *testing.T) {
	t.Parallel()
	clk := testenv.NewClock(time.Now())
	h := setupWith(t, map[string]string{
		".ai/config/agent/rate_limits.yaml": "rate_limits: [{match: 'script:*', requests_per_minute: 1, burst: 1}]\n",
	}, harnessConfig{now: clk.Now})
	h.prov.script("h/a", call("rye/file-system/fs_read", `{"path":"x"}`), say("done"))
	id := h.start("h/a", thread.Limits{})
	require.NoError(t, h.activate(id, "start", 0))
	rec := h.record(id)
	require.Equal(t, thread.StatusWaiting, rec.Status, "%+v", rec.Error)
	require.Equal(t, registry.WaitingForRateLimit, rec.WaitingFor)
	require.Equal(t, 1, h.prov.calls, "the second call waits for the minute")
	held, err := h.o.Housekeeper().LeaseHeld(h.ctx, id)
	require.NoError(t, err)
	require.False(t, held)
	// The fleet-wide counters (the monitor's rate limits page) say so.
	rl, err := config.ParseRateLimits("r.yaml", []byte("rate_limits: [{match: 'script:*', requests_per_minute: 1, burst: 1}]"))
	require.NoError(t, err)
	st, err := ratelimit.New(h.o.Runtime().Services().Redis, h.o.Runtime().Services().Keys, clk.Now).Status(h.ctx, rl)
	require.NoError(t, err)
	require.Equal(t, ratelimit.Counters{Admitted: 1, Settled: 1, Throttled: 1, ThrottledBy: map[string]int64{"req": 1}, Waiting: 1,
		InputReserved: st[0].Counters.InputReserved, InputUsed: st[0].Counters.InputUsed, OutputReserved: st[0].Counters.OutputReserved,
		OutputUsed: st[0].Counters.OutputUsed}, st[0].Counters)
	clk.Add(time.Minute)
	require.Equal(t, 1, h.drain(true))
	rec = h.record(id)
	require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
	require.Equal(t, 2, h.prov.calls)
}

// TestRateLimitConcurrency: with concurrent 1, a second thread's call is
// not admitted while the first's runs; it is handed back (no slot held)
// and runs once the first is done.
func TestRateLimitConcurrency(t *testing.T) {
	t.Parallel()
	h := setup(t, map[string]string{".ai/config/agent/rate_limits.yaml": "rate_limits: [{match: 'script:*', concurrent: 1}]\n"}, Config{})
	started := make(chan struct{})
	release := make(chan struct{})
	h.prov.script("h/a", reply{fn: func(ctx context.Context, _ *provider.Request) (*provider.Response, error) {
		close(started)
		<-release
		return say("a done").resp, nil
	}})
	h.prov.script("h/kid", say("kid done"))
	a, b := h.start("h/a", thread.Limits{}), h.start("h/kid", thread.Limits{})
	done := make(chan error, 1)
	go func() { done <- h.activate(a, "start", 0) }()
	<-started
	require.NoError(t, h.activate(b, "start", 0))
	require.Equal(t, registry.WaitingForRateLimit, h.record(b).WaitingFor, "refused while a's call runs: handed back")
	close(release)
	require.NoError(t, <-done)
	require.Eventually(t, func() bool { h.drain(true); return h.record(b).Status == thread.StatusCompleted }, 10*time.Second, 200*time.Millisecond)
}

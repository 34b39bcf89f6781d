package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/tools"
	"github.com/spool-run/spool/transcript"
)

// state is the worker's operational state, stored in every checkpoint so
// that any worker can continue the thread.
type state struct {
	Turn          int            `json:"turn"`
	Cost          thread.Cost    `json:"cost"`
	ToolCalls     int            `json:"tool_calls"`
	ToolCallsByID map[string]int `json:"tool_calls_by_id"`
	// TurnCallsByID counts the tool calls of the current turn by tool.
	TurnCallsByID map[string]int `json:"turn_calls_by_id,omitempty"`
	// TurnSpend is the spend of the last completed turn, charged to the
	// ledger under key (thread, Turn) after the checkpoint is durable.
	TurnSpend float64 `json:"turn_spend"`
	// LastPromptTokens is the provider-reported prompt size of the last
	// response; the context check adds an estimate of what came after.
	LastPromptTokens int `json:"last_prompt_tokens"`
	// SinceResponse counts messages appended after the last response.
	SinceResponse int `json:"since_response"`
	// Nudged is set once the model was asked to call directive_return.
	Nudged bool `json:"nudged,omitempty"`
	// ModelAttempts counts the failed attempts of the current turn's model
	// call, across activations (a long retry wait hands the thread back:
	// handBackForRetry), for the error hooks' attempt limit; the answers
	// "slow down" (rate_limited) are not among them.
	ModelAttempts int `json:"model_attempts,omitempty"`
	// RateLimited counts the current turn's model calls that the provider
	// answered "slow down" (rate_limited), each waited out handed back
	// (handBackForSlowDown): the error hooks' attempt of a rate limit, and
	// their backoff when the provider gave no retry-after.
	RateLimited int `json:"rate_limited,omitempty"`
	// RetryAt is when a thread handed back for a retry (handBackForRetry,
	// handBackForSlowDown, or its rate limit) calls its model again.
	RetryAt time.Time `json:"retry_at,omitzero"`
	// Pending are tool calls whose results are child threads' results.
	Pending []pending `json:"pending,omitempty"`
	// InboxSeq is the sequence number of the last message people sent
	// (registry.InboxMessage) that the conversation holds.
	InboxSeq int64 `json:"inbox_seq,omitempty"`
	// Approvals are tool calls that wait for a person's decision
	// (approvals.yaml); they run, or are answered denied, once decided.
	Approvals []registry.PendingApproval `json:"approvals,omitempty"`
	// Final is set once the thread's outcome is decided; a worker that
	// finds it on restore only re-runs finalization.
	Final *final `json:"final,omitempty"`
	// Handoff is set once a handoff is decided: the continuation's id.
	Handoff string `json:"handoff,omitempty"`
	// AfterComplete is set once the thread's after_complete hooks ran. A
	// handoff runs them before it starts the continuation (so that what
	// they produce, a summary, is there for the continuation's
	// thread_continued hooks) and checkpoints this with the handoff, so a
	// retried handoff does not run them again; finalize then skips them.
	AfterComplete bool `json:"after_complete,omitempty"`
}

// pending is a tool call waiting on threads: a synchronous spawn, or a
// wait_threads call.
type pending struct {
	CallID   string    `json:"call_id"`
	Tool     string    `json:"tool"`
	Kind     string    `json:"kind"` // "spawn" or "wait"
	Threads  []string  `json:"threads"`
	Deadline time.Time `json:"deadline,omitempty"`
}

// final is a decided outcome.
type final struct {
	Status  thread.Status       `json:"status"`
	Result  string              `json:"result,omitempty"`
	Outputs map[string]any      `json:"outputs,omitempty"`
	Error   *registry.ErrorInfo `json:"error,omitempty"`
	// ContinuationID is the continuation of a handed-off thread.
	ContinuationID string `json:"continuation_id,omitempty"`
}

// orchestratorOutcome is the outcome Finalize records.
func orchestratorOutcome(f *final, cost thread.Cost) orchestrator.Outcome {
	return orchestrator.Outcome{Status: f.Status, Result: f.Result, Outputs: f.Outputs, Error: f.Error, Cost: cost, ContinuationID: f.ContinuationID}
}

// activation is what every activation holds, whichever path runs it (a
// thread's turn loop: session; a graph run's walk: graphRun): the worker,
// the services, the claim and its version fence, the lease, the
// transcript writer and the control a cancel reaches.
type activation struct {
	w *Worker
	// o runs the orchestrator's operations (Finalize, Start, Wait, ...);
	// the services the steps call themselves are deps.
	o *orchestrator.Runtime
	deps
	claim registry.Claim
	act   queue.Activation
	log   *slog.Logger

	rec     *registry.Record
	version int64
	tw      *transcript.Writer
	// side are the writes of views (thread.json at start, capabilities.md,
	// knowledge renders) that run beside the activation's steps.
	side sideWrites
	// leaseReleased: Finalize released the activation's lease with the
	// thread's end; stopLease stops its heartbeat.
	leaseReleased bool
	stopLease     func()
	// committed is the thread's spend as its last checkpoint committed
	// it (nil: none yet, the claim's): what the activation's grant
	// settles (durableSpend).
	committed *float64
	// ctl is the activation's control (cancel, follow).
	ctl *control
	// grant is the activation's admission grant (nil: admission off).
	grant *grant
}

func (a *activation) id() string { return a.rec.ThreadID }

// session is one activation of one thread. Its methods are the
// activation's steps (load, restore, the turn loop and its steps,
// finalize) and what decides between them. What a step asks of a concern
// that needs only a little of the thread is done by a collaborator the
// session holds or makes, which keeps only what it uses: the spans
// (turnTracer), the budget (spend), the rate limits (rateGate), the tools
// (toolRunner), the hooks' actions (hookActions), the messages
// (conversation), the live feed (liveFeed), the coordination calls
// (coordinator), the children its calls start (childStarter), the wait on
// them (childWait) and a continuation's first messages (continuation).
// What only reads or sets the thread's state is a method of state.
type session struct {
	activation

	proj       *orchestrator.Project
	dir        *directive.Directive
	prov       provider.Provider
	hooks      []hooks.Hook
	dispatcher *hooks.Dispatcher
	// tools run the thread's tool calls under its capabilities.
	tools *toolRunner
	// actions run its hooks' actions, as the thread.
	actions *hookActions
	// msgs are the messages the model reads.
	msgs conversation
	st   state
	// finalDurable: the thread_completed event is in a durable segment.
	finalDurable bool
	// tracer traces the activation's turns, model calls, tools and
	// spawns.
	tracer *turnTracer
	// spend is the thread's budget: its charges and the stop a spent
	// budget decides.
	spend *spend
	// rates hold the thread's model calls to the fleet's rate limits.
	rates *rateGate
	// trimmedInbox is the seq up to which this activation trimmed the
	// thread's inbox.
	trimmedInbox int64
	// interrupted names the tool a stop cut short in the current turn
	// (stopAfter says where the stop found the thread).
	interrupted string
	// startViews: the thread began in this activation and its start's
	// views are still to be written (writeStartViews).
	startViews bool
	// flagRead: checkBeforeTurn has used the claimed record's cancel flag
	// and reads the registry from now on.
	flagRead bool
	// live publishes the transcript on the thread's live channel while
	// someone follows it; nil until the transcript is open.
	live *liveFeed
	// deltas publishes the model's text as it is written while someone
	// follows the thread; nil until the transcript is open.
	deltas *deltaFeed
}

// A session is a path (path.go): runActivation loads, restores and
// proceeds it.

// pastDuration reports whether the claimed thread is past its duration
// limit.
func (s *session) pastDuration() bool {
	end, ok := durationEnd(s.claim.Record)
	return ok && !s.o.Now().Before(end)
}

// decided: the thread has its outcome (load failed it, or it was decided
// before this activation).
func (s *session) decided() bool { return s.st.Final != nil }

// unverifiable ends the thread whose transcript does not verify
// (failIntegrity).
func (s *session) unverifiable(ctx context.Context, err error) error {
	return s.failIntegrity(ctx, err)
}

// handsBack: a thread's hand-backs (a retry wait, a drain) checkpoint
// first, so a stop requested meanwhile ends it at once rather than at the
// retry time.
func (s *session) handsBack(error) bool { return false }

// close waits for the activation's side writes and ends its live feed.
func (s *session) close() {
	s.side.Wait()
	s.stopLive()
}

// end is how the thread's activation ended.
func (s *session) end() pathEnd {
	return pathEnd{released: s.leaseReleased, final: s.st.Final, handedOff: s.st.Handoff != "", version: s.version, spend: s.durableSpend()}
}

// proceed runs a loaded and restored thread: begins it when fresh, then
// finishes what its last checkpoint decided, or runs the turn loop.
func (s *session) proceed(ctx context.Context, fresh bool) error {
	if fresh {
		if err := s.begin(ctx); err != nil {
			return s.failOnPermanent(ctx, err)
		}
	}
	if s.st.Final != nil {
		return s.finalize(ctx)
	}
	if s.st.Handoff != "" {
		return s.completeHandoff(ctx)
	}
	if done, err := s.resolveWaits(ctx, fresh); err != nil || !done {
		return err
	}
	return s.loop(ctx)
}

// resolveWaits resolves what the thread waited for when it was woken:
// the decisions of its approvals, then its children (pending calls),
// after recording a message that came meanwhile. false when it waits
// still (suspended again).
func (s *session) resolveWaits(ctx context.Context, fresh bool) (bool, error) {
	if !fresh && s.st.inboxNewer(s.rec) && (len(s.st.Approvals) > 0 || len(s.st.Pending) > 0) {
		// A message came while the thread waited (it was woken for it):
		// recorded now, seen by the model on its next call.
		if err := s.deliverInbox(ctx); err != nil {
			return false, err
		}
		if err := s.checkpoint(ctx); err != nil {
			return false, err
		}
	}
	if len(s.st.Approvals) > 0 {
		done, err := s.resolveApprovals(ctx)
		if err != nil || !done {
			return false, err
		}
		// The decided calls ran (or were answered denied): durable
		// before anything else happens.
		if err := s.checkpoint(ctx); err != nil {
			return false, err
		}
	}
	if len(s.st.Pending) > 0 {
		return s.resolvePending(ctx)
	}
	return true, nil
}

// load reads the record, project bundle, directive, provider, hooks and
// tools.
func (s *session) load(ctx context.Context) error {
	rec := s.claim.Record
	s.rec, s.version = rec, s.claim.Version
	s.spend = newSpend(s.ledger, rec, s.log, s.w.metrics)
	var err error
	s.log = s.log.With("directive", rec.Directive)
	if s.proj, err = s.o.Project(ctx, rec.Bundle); err != nil {
		if errors.Is(err, directive.ErrBadBundle) || errors.Is(err, blobstore.ErrNotFound) {
			return s.failNow(ctx, "bundle_error", err.Error())
		}
		return err
	}
	if s.dir, err = s.proj.Directive(rec.Directive); err != nil {
		return s.failNow(ctx, "directive_error", err.Error())
	}
	if rec.Activation > maxActivations {
		return s.failNow(ctx, "activation_failed", fmt.Sprintf("the thread was activated %d times without finishing; giving up", rec.Activation))
	}
	pc := s.w.cfg.Provider.ForBundle(s.proj.Pricing, s.proj.ReadFile)
	if s.prov, err = s.w.cfg.NewProvider(rec.Model, pc); err != nil {
		return s.failNow(ctx, "model_error", err.Error())
	}
	s.tracer = newTurnTracer(s.o.Tracer(), rec, s.prov, s.w.cfg.Provider)
	s.rates = newRateGate(s.w, rec, s.claim.Token, s.proj.RateLimits, s.log, s.leaseTTL)
	// Without its key the call could only fail (or, retried as transient,
	// fail slowly): a thread this worker cannot run fails at once, saying
	// where the key is missing.
	if key := provider.MissingKey(rec.Model, pc); key != "" {
		return s.failNow(ctx, "provider_auth", fmt.Sprintf("%s is not set on worker %s (workers hold the provider keys, not the CLI: set it in the worker's environment)", key, s.w.cfg.Host))
	}
	// A model without a price would fail the thread only after its first
	// call, whose spend could then not be charged: refuse it before any
	// call. Pricing zero usage costs nothing and looks the model up.
	if _, err := s.prov.Cost(rec.Model, provider.Usage{}); err != nil {
		return s.failNow(ctx, "pricing_error", err.Error())
	}
	s.hooks = hooks.Merge(s.proj.UserHooks, s.dir.Hooks, hooks.Builtin(s.proj.Resilience.Retry), s.proj.ProjectHooks, nil)
	s.dispatcher = hooks.NewDispatcher(s.hooks)
	// The runner (and the hooks' actions, which run its tools) is there
	// before its tools: a thread whose tools cannot be built fails, and
	// the hooks of its end may still check a tool.
	s.tools = newToolRunner(rec, s.dir, s.store, &s.w.cfg)
	s.actions = &hookActions{capabilities: rec.Capabilities, dropped: rec.DroppedCapabilities, proj: s.proj, reg: s.reg,
		knowledge: s.o.Knowledge, tools: s.tools}
	s.tools.tools, err = s.buildTools(ctx, s.proj)
	if err != nil {
		return s.failOnPermanent(ctx, err)
	}
	s.tools.env = &tools.Env{
		ThreadID: rec.ThreadID,
		ParentID: rec.ParentID,
		TreeID:   rec.WorkspaceID(),
		Store:    s.store,
		Env:      map[string]string{"RYE_PARENT_THREAD_ID": rec.ThreadID},
		Children: toolChildren{s},
		Logger:   s.log,
	}
	return nil
}

// maxActivations bounds how often a thread is activated (claims by start,
// wake, retry and recovery together) before it is failed: an activation that
// keeps dying on the same turn must not loop forever.
const maxActivations = 200

// runHooks runs the hooks of an event and returns the context text their
// load actions produced.
func (s *session) runHooks(ctx context.Context, event string, evctx map[string]any) string {
	if s.dispatcher == nil {
		// The thread failed in load (failNow) before its hooks and tools
		// were loaded: it runs none.
		return ""
	}
	outs, err := s.dispatcher.Run(ctx, event, evctx, s.actions)
	if err != nil {
		s.log.Warn("hooks failed", "event", event, "error", err)
	}
	for _, o := range outs {
		s.emit(transcript.TypeHookFired, transcript.HookFired{
			HookID: o.HookID, Event: event, Layer: o.Layer, Action: o.Primary, ItemType: o.ItemType, ItemID: o.ItemID, Error: errString(o.Err),
		})
	}
	return hooks.InjectedContext(outs)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func toMap(v any) map[string]any {
	b, _ := json.Marshal(v)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

// durableSpend is the thread's spend as its last commit recorded it: a
// turn whose checkpoint did not land (the activation was stopped in its
// tool) is not in it, as it is not in the ledger, and is counted once,
// by the activation that runs it again.
func (s *session) durableSpend() float64 {
	if s.committed != nil {
		return *s.committed
	}
	return s.claim.Record.Cost.Spend
}

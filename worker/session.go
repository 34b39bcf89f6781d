package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/queue"
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
	// handBackForRetry), for the error hooks' attempt limit.
	ModelAttempts int `json:"model_attempts,omitempty"`
	// RetryAt is when a thread handed back for a retry (handBackForRetry)
	// calls its model again.
	RetryAt time.Time `json:"retry_at,omitzero"`
	// Pending are tool calls whose results are child threads' results.
	Pending []pending `json:"pending,omitempty"`
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
	Status  thread.Status    `json:"status"`
	Result  string           `json:"result,omitempty"`
	Outputs map[string]any   `json:"outputs,omitempty"`
	Error   *queue.ErrorInfo `json:"error,omitempty"`
	// ContinuationID is the continuation of a handed-off thread.
	ContinuationID string `json:"continuation_id,omitempty"`
}

// orchestratorOutcome is the outcome Finalize records.
func orchestratorOutcome(f *final, cost thread.Cost) orchestrator.Outcome {
	return orchestrator.Outcome{Status: f.Status, Result: f.Result, Outputs: f.Outputs, Error: f.Error, Cost: cost, ContinuationID: f.ContinuationID}
}

// session is one activation of one thread.
type session struct {
	w     *Worker
	o     *orchestrator.Orchestrator
	claim queue.Claim
	act   queue.Activation
	log   *slog.Logger

	rec        *queue.Record
	version    int64
	proj       *orchestrator.Project
	dir        *directive.Directive
	prov       provider.Provider
	tw         *transcript.Writer
	hooks      []hooks.Hook
	dispatcher *hooks.Dispatcher
	tools      *tools.Registry
	toolEnv    *tools.Env
	msgs       []thread.Message
	st         state
	// events are the transcript's events so far (restored and new), for
	// the knowledge render at each checkpoint.
	events []transcript.Event
	// finalDurable: the thread_completed event is in a durable segment.
	finalDurable bool
	// budgetStop: the ledger clamped a charge, or left the thread no
	// room, naming the level (the thread's chain or an ancestor) whose
	// budget is spent: the thread stops before its next turn.
	budgetStop *thread.LimitError
	// cutInputs are the calls of the current answer whose input was over
	// Config.MaxToolInputBytes (boundResponse), by call id, with the
	// error dispatch answers them with.
	cutInputs map[string]string
	// side are the writes of views (thread.json at start, capabilities.md,
	// knowledge renders) that run beside the turn loop.
	side sideWrites
	// startViews: the thread began in this activation and its start's
	// views are still to be written (writeStartViews).
	startViews bool
	// flagRead: checkBeforeTurn has used the claimed record's cancel flag
	// and reads the registry from now on.
	flagRead bool
	// leaseReleased: Finalize released the activation's lease with the
	// thread's end; stopLease stops its heartbeat.
	leaseReleased bool
	stopLease     func()
	// defs are the tool definitions the thread may call (toolDefs): the
	// same for every model call of the activation and capabilities.md,
	// which is written beside the loop.
	defsOnce sync.Once
	defs     []thread.ToolDef
	// ctl is the activation's control (cancel, follow); liveDone and
	// liveWG end the live feed (startLive).
	ctl      *control
	liveDone chan struct{}
	liveWG   sync.WaitGroup
}

func (s *session) id() string { return s.rec.ThreadID }

// run executes the activation to its end: finished, suspended, handed off,
// or stopped.
func (s *session) run(ctx context.Context) error {
	defer s.side.Wait()
	defer s.stopLive()
	if err := s.load(ctx); err != nil || s.st.Final != nil {
		// nil: load failed the thread (failNow) and finalized it.
		return handBackOnCancel(ctx, err)
	}
	fresh, err := s.restore(ctx)
	if isIntegrity(err) {
		return s.failIntegrity(ctx, err)
	}
	if err != nil {
		return handBackOnCancel(ctx, err)
	}
	err = s.proceed(ctx, fresh)
	if isIntegrity(err) {
		// A transcript this thread builds on (a continuation's previous
		// thread) does not verify.
		return s.failIntegrity(ctx, err)
	}
	if err != nil && stopRequested(ctx) {
		// The request reached the activation where nothing decides on it
		// (a checkpoint, a hook, a wait): the call that saw the cancelled
		// context failed, but the thread is cancelled, not failed.
		return s.stopCancelled(ctx, err)
	}
	return err
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
	if len(s.st.Pending) > 0 {
		done, err := s.resolvePending(ctx)
		if err != nil || !done {
			return err
		}
	}
	return s.loop(ctx)
}

// load reads the record, project bundle, directive, provider, hooks and
// tools.
func (s *session) load(ctx context.Context) error {
	rec := s.claim.Record
	s.rec, s.version = rec, s.claim.Version
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
	pc := *s.w.cfg.Provider
	pc.ReadFile = s.proj.ReadFile
	if s.proj.Pricing != nil {
		pc.PricingOverrides = s.proj.Pricing
	}
	if s.prov, err = provider.New(rec.Model, pc); err != nil {
		return s.failNow(ctx, "model_error", err.Error())
	}
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
	s.tools, err = s.buildTools()
	if err != nil {
		return s.failOnPermanent(ctx, err)
	}
	s.toolEnv = &tools.Env{
		ThreadID: rec.ThreadID,
		ParentID: rec.ParentID,
		TreeID:   rec.TreeID(),
		Store:    s.o.Store,
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

// failNow finalizes a thread that cannot run at all (bad model, broken
// bundle) with an error, at the claimed version.
func (s *session) failNow(ctx context.Context, code, msg string) error {
	s.st.Final = &final{Status: thread.StatusError, Error: &queue.ErrorInfo{Code: code, Message: msg}}
	s.st.Cost = s.rec.Cost
	if s.tw == nil {
		tw, err := transcript.OpenWriter(ctx, s.o.Store, s.rec.ThreadID, s.o.Signer, s.o.Keyring, orchestrator.RegistryMark(s.rec))
		if err != nil {
			return err
		}
		s.tw = tw
	}
	return s.finalize(ctx)
}

// failOnPermanent turns an error in setup that no retry can fix into a
// failed thread; infrastructure errors go back to asynq.
func (s *session) failOnPermanent(ctx context.Context, err error) error {
	var pe *permanentError
	if errors.As(err, &pe) {
		return s.failNow(ctx, pe.code, pe.msg)
	}
	return err
}

type permanentError struct{ code, msg string }

func (e *permanentError) Error() string { return e.code + ": " + e.msg }

// restore loads the transcript: it returns fresh=true when the thread has
// no checkpoint yet.
func (s *session) restore(ctx context.Context) (bool, error) {
	var tw *transcript.Writer
	var err error
	if mark := orchestrator.RegistryMark(s.rec); s.rec.Activation == 1 && mark.Segments == 0 {
		// The thread's first activation: no activation ran before this
		// one, so there is no transcript to read (one that exists anyway
		// makes the first checkpoint fail as a zombie's would).
		tw, err = transcript.CreateWriter(s.id(), s.o.Store, s.o.Signer)
	} else {
		tw, err = transcript.OpenWriter(ctx, s.o.Store, s.id(), s.o.Signer, s.o.Keyring, mark)
	}
	if err != nil {
		return false, fmt.Errorf("open transcript of %s: %w", s.id(), err)
	}
	s.tw = tw
	if s.ctl != nil {
		s.ctl.ready(s.startLive)
	}
	last := tw.LastState()
	if r := tw.Resumed(); r != nil {
		s.events = append([]transcript.Event(nil), r.Events...)
	}
	if last == nil {
		s.st = state{ToolCallsByID: map[string]int{}}
		return true, nil
	}
	if raw, ok := last.Extra["worker"]; ok {
		if err := json.Unmarshal(raw, &s.st); err != nil {
			return false, fmt.Errorf("checkpoint state of %s: %w", s.id(), err)
		}
	}
	if s.st.ToolCallsByID == nil {
		s.st.ToolCallsByID = map[string]int{}
	}
	s.finalDurable = s.st.Final != nil
	if s.msgs, err = transcript.Reconstruct(s.events); err != nil {
		return false, fmt.Errorf("rebuild messages of %s: %w", s.id(), err)
	}
	// The last checkpoint's charge may not have reached the ledger.
	if err := s.charge(ctx); err != nil {
		return false, err
	}
	if err := s.checkRoom(ctx); err != nil {
		return false, err
	}
	return false, nil
}

// begin starts a fresh thread: the first user message (thread_started hook
// context + the directive prompt), or a continuation's seed messages.
func (s *session) begin(ctx context.Context) error {
	inputs, err := json.Marshal(s.rec.Inputs)
	if err != nil {
		return fmt.Errorf("inputs of %s: %w", s.id(), err)
	}
	limits := s.rec.Limits
	s.emit(transcript.TypeThreadStarted, transcript.ThreadStarted{
		Directive: s.rec.Directive, Model: s.rec.Model, ParentID: s.rec.ParentID, PreviousThreadID: s.rec.PreviousThreadID,
		Inputs: inputs, Limits: &limits, Capabilities: s.rec.Capabilities, BundleDigest: s.proj.Digest,
	})
	evctx := map[string]any{
		"thread_id": s.id(), "directive": s.rec.Directive, "directive_body": s.dir.Body,
		"model": s.rec.Model, "limits": toMap(s.rec.Limits), "inputs": s.rec.Inputs, "project_path": ".",
	}
	if s.rec.PreviousThreadID != "" {
		evctx["previous_thread_id"] = s.rec.PreviousThreadID
		seed, err := s.continuationSeed(ctx)
		if err != nil {
			return err
		}
		s.emit(transcript.TypeThreadContinued, transcript.ThreadContinued{
			PreviousThreadID: s.rec.PreviousThreadID, ReconstructedTurns: carriedTurns(seed),
		})
		hookText := s.runHooks(ctx, hooks.EventThreadContinued, evctx)
		if hookText != "" {
			seed = injectNearLastUser(seed, hookText)
		}
		for _, m := range seed {
			s.appendMessage(m)
		}
	} else {
		hookText := s.runHooks(ctx, hooks.EventThreadStarted, evctx)
		prompt := directive.RenderBody(s.dir, s.rec.Inputs)
		if hookText != "" {
			prompt = hookText + "\n\n" + prompt
		}
		s.appendMessage(thread.Message{Role: thread.RoleUser, Content: prompt})
	}
	// The start is made durable by the first turn's checkpoint: a worker
	// that dies before it begins the thread again from the top. The start's
	// views (capabilities.md, thread.json) are written beside the turn
	// after that checkpoint (startViews).
	s.startViews = true
	return nil
}

// writeStartViews writes the views of a thread's start beside its turn
// loop, once its first checkpoint is durable: capabilities.md, and
// thread.json with status running, unless the thread already ended in that
// turn (Finalize writes the final thread.json right after, and a one-turn
// thread need not sign and write it twice).
func (s *session) writeStartViews(ctx context.Context) {
	s.startViews = false
	s.side.Go(ctx, s.log, "capabilities.md", s.writeCapabilities)
	if s.st.Final == nil {
		rec := *s.rec
		s.side.Go(ctx, s.log, "thread.json", func(ctx context.Context) error { return s.o.WriteThreadJSON(ctx, &rec) })
	}
}

// appendMessage adds a message to the conversation and records it.
func (s *session) appendMessage(m thread.Message) {
	s.msgs = append(s.msgs, m)
	s.st.SinceResponse++
	switch m.Role {
	case thread.RoleUser:
		s.emit(transcript.TypeCognitionIn, transcript.CognitionIn{Content: m.Content})
	case thread.RoleAssistant:
		s.emit(transcript.TypeCognitionOut, transcript.CognitionOut{Content: m.Content, ToolCalls: m.ToolCalls})
	case thread.RoleTool:
		s.emit(transcript.TypeToolCallResult, transcript.ToolCallResult{CallID: m.ToolCallID, Tool: m.ToolName, Output: m.Content, IsError: m.IsError})
	}
}

// emit appends an event to the transcript. Events are buffered in the
// writer and made durable at the next checkpoint.
func (s *session) emit(typ string, payload any) {
	seq, err := s.tw.Append(typ, payload)
	if err != nil {
		s.log.Warn("transcript append", "event_type", typ, "error", err)
		return
	}
	raw, _ := json.Marshal(payload)
	s.events = append(s.events, transcript.Event{Timestamp: s.o.Now(), ThreadID: s.id(), Seq: seq, Type: typ, Payload: raw})
}

// checkpoint makes the turn durable: the registry version first (the
// fence: a stale activation stops here and writes nothing), then the
// signed segment (create-only), then the turn's charge. The commit raises
// the registry's transcript mark to what is durable before it: the segments
// this activation read or wrote, not the one it is about to write (see the
// package doc, Crash safety).
func (s *session) checkpoint(ctx context.Context) error { return s.checkpointTurn(ctx, true) }

// checkpointTurn is checkpoint; without charge, it leaves the turn's
// charge to its caller (finalize hands it to Finalize).
func (s *session) checkpointTurn(ctx context.Context, charge bool) error {
	began := time.Now()
	cost := s.st.Cost
	ch := queue.Changes{Cost: &cost, Transcript: orchestrator.RecordMark(s.tw.Mark())}
	if !s.st.RetryAt.IsZero() {
		ch.Fields = map[string]string{queue.RetryAtField: s.st.RetryAt.Format(time.RFC3339Nano)}
	}
	v, err := s.o.Registry.Commit(ctx, s.id(), s.version, ch)
	if err != nil {
		return err
	}
	s.version = v
	raw, err := json.Marshal(s.st)
	if err != nil {
		return err
	}
	if _, err := s.tw.Checkpoint(ctx, s.checkpointState(raw)); err != nil {
		return err
	}
	if charge {
		if err := s.charge(ctx); err != nil {
			return err
		}
	}
	s.w.metrics.checkpointed(time.Since(began))
	if s.startViews {
		s.writeStartViews(ctx)
	}
	if s.st.Final == nil && s.side.knowledge.CompareAndSwap(false, true) {
		// Coalesced: while one render is written, later checkpoints skip
		// theirs; finalize always writes the last one.
		events, meta := s.events[:len(s.events):len(s.events)], s.knowledgeMeta()
		s.side.Go(ctx, s.log, "knowledge render", func(ctx context.Context) error {
			defer s.side.knowledge.Store(false)
			return s.writeKnowledge(ctx, meta, events)
		})
	}
	return nil
}

// checkpointState is the operational snapshot of the spec's checkpoint
// (iteration, counters, per-tool counts of the run and of the turn, the
// stop flag) around the worker's own state, raw.
func (s *session) checkpointState(raw json.RawMessage) transcript.State {
	st := transcript.State{
		Reason:                   transcript.ReasonAssistantTurn,
		Status:                   string(thread.StatusRunning),
		Iteration:                s.st.Turn,
		Version:                  s.version,
		Cost:                     s.st.Cost,
		ToolCallsTotal:           s.st.ToolCalls,
		ToolCallsByTool:          maps.Clone(s.st.ToolCallsByID),
		ToolCallsIterationByTool: maps.Clone(s.st.TurnCallsByID),
		Extra:                    map[string]json.RawMessage{"worker": raw},
	}
	for _, n := range s.st.TurnCallsByID {
		st.ToolCallsIteration += n
	}
	switch {
	case s.st.Final != nil:
		st.Reason, st.Status, st.StopFlag = transcript.ReasonRunFinished, string(s.st.Final.Status), true
	case s.st.Handoff != "":
		st.Reason, st.StopFlag = transcript.ReasonHandoff, true
	case len(s.st.Pending) > 0:
		st.Reason = transcript.ReasonWaitingChildren
	case !s.st.RetryAt.IsZero():
		st.Reason = transcript.ReasonRetryWait
	}
	return st
}

// charge applies the last turn's spend to the ledger, once per (thread,
// turn) however often it is called.
func (s *session) charge(ctx context.Context) error {
	key, amount, ok := s.turnCharge()
	if !ok {
		return nil
	}
	c, err := s.o.Ledger.Charge(ctx, s.rec.LedgerID(), s.rec.BudgetPath(), key, amount)
	return s.charged(c, err)
}

// turnCharge is the last turn's charge: its idempotency key (thread, turn)
// and amount; !ok when there is nothing to charge.
func (s *session) turnCharge() (key string, amount float64, ok bool) {
	if s.st.Turn == 0 || s.st.TurnSpend <= 0 {
		return "", 0, false
	}
	return fmt.Sprintf("%s:turn:%d", s.id(), s.st.Turn), s.st.TurnSpend, true
}

// charged takes a charge's outcome: a clamped charge is recorded (the
// excess as overrun) in the ledger, and the limit check before the next
// turn stops the thread, as it does when the charge left no room on the
// thread's path; any other error is returned.
func (s *session) charged(c ledger.Charged, err error) error {
	var le *thread.LimitError
	switch {
	case errors.As(err, &le):
		s.log.Warn("charge exceeded the budget", "error", err)
		s.budgetStop = le
		s.w.metrics.ledgerRejected("charge")
		return nil
	case err == nil && c.Limiter.ID != "" && c.Left <= 0:
		s.budgetStop = ledger.Exhausted(s.rec.LedgerID(), c.Limiter)
	}
	return err
}

// checkRoom reads the room left on the thread's path: a thread that comes
// back from a wait may find that its children or siblings spent its
// budget meanwhile, and stops before a model call it could not pay for.
func (s *session) checkRoom(ctx context.Context) error {
	if s.budgetStop != nil {
		return nil
	}
	room, err := s.o.Ledger.Room(ctx, s.rec.LedgerID(), s.rec.BudgetPath())
	if errors.Is(err, ledger.ErrNotFound) {
		return nil // no entry (a record older than its ledger): the charge will say
	}
	if err != nil {
		return err
	}
	if room.LeftNano <= 0 {
		s.budgetStop = ledger.Exhausted(s.rec.LedgerID(), room.Limiter)
	}
	return nil
}

func (s *session) knowledgeMeta() transcript.KnowledgeMeta {
	status := string(thread.StatusRunning)
	if s.st.Final != nil {
		status = string(s.st.Final.Status)
	}
	return transcript.KnowledgeMeta{ThreadID: s.id(), Directive: s.rec.Directive, Status: status,
		Model: s.rec.Model, Turns: s.st.Cost.Turns, Spend: s.st.Cost.Spend, CreatedAt: s.rec.CreatedAt, UpdatedAt: s.o.Now()}
}

// writeKnowledge writes the signed knowledge render of the transcript.
func (s *session) writeKnowledge(ctx context.Context, meta transcript.KnowledgeMeta, events []transcript.Event) error {
	data := transcript.SignedKnowledge(meta, events, s.o.Signer, s.o.Now())
	return blobstore.PutView(ctx, s.o.Store, transcript.KnowledgeKey(s.rec.Directive, s.id()), data)
}

func (s *session) writeCapabilities(ctx context.Context) error {
	body, err := transcript.RenderCapabilities(s.id(), s.toolDefs(), s.rec.Capabilities)
	if err != nil {
		return err
	}
	return blobstore.PutView(ctx, s.o.Store, transcript.CapabilitiesKey(s.id()), transcript.SignMarkdown(body, s.o.Signer, s.o.Now()))
}

// runHooks runs the hooks of an event and returns the context text their
// load actions produced.
func (s *session) runHooks(ctx context.Context, event string, evctx map[string]any) string {
	if s.dispatcher == nil {
		// The thread failed in load (failNow) before its hooks and tools
		// were loaded: it runs none.
		return ""
	}
	outs, err := s.dispatcher.Run(ctx, event, evctx, s)
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

// injectNearLastUser puts hook context into the last user message of a
// seed, as the spec's thread_continued says (not prepended to the thread).
func injectNearLastUser(msgs []thread.Message, text string) []thread.Message {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == thread.RoleUser {
			msgs[i].Content = text + "\n\n" + msgs[i].Content
			return msgs
		}
	}
	return append(msgs, thread.Message{Role: thread.RoleUser, Content: text})
}

// carriedTurns counts the model turns (assistant messages) of a
// continuation's seed, which came from the previous thread: its
// thread_continued event's reconstructed_turns, which the monitor shows.
// A resume counts the same thing (orchestrator.ResumeResult's
// reconstructed_turns, which the CLI prints), so both say the same number;
// a turn is a model call here as in a thread's cost and limits.
func carriedTurns(seed []thread.Message) int {
	n := 0
	for _, m := range seed {
		if m.Role == thread.RoleAssistant {
			n++
		}
	}
	return n
}

// isIntegrity reports whether err says a transcript does not verify: a
// tampered or missing segment, a bad or unknown signature. No retry can
// mend that.
func isIntegrity(err error) bool {
	return err != nil && (errors.Is(err, transcript.ErrTampered) || errors.Is(err, transcript.ErrBadSignature) ||
		errors.Is(err, transcript.ErrUnknownKey))
}

// failIntegrity ends a thread whose transcript (or one it builds on) does
// not verify, instead of failing the activation, which asynq would retry
// forever: error integrity_failed, naming what did not verify, or
// cancelled when a cancel was requested (a cancel always ends a thread,
// whatever its transcript). When the thread's own transcript did not
// open, no final segment can be appended to it: Finalize records the end
// in the registry and thread.json only.
func (s *session) failIntegrity(ctx context.Context, cause error) error {
	ctx, cancel := detachCancel(ctx)
	defer cancel()
	s.log.Error("transcript does not verify; the thread ends", "error", cause)
	code, status := "integrity_failed", thread.StatusError
	msg := "the transcript does not verify: " + cause.Error()
	if s.rec.CancelRequested || stopRequested(ctx) {
		code, status = "cancelled", thread.StatusCancelled
		msg = "cancelled; " + msg
	}
	if s.tw != nil {
		s.decide(status, "", nil, &queue.ErrorInfo{Code: code, Message: msg})
		return s.finalize(ctx)
	}
	out := orchestrator.Outcome{Status: status, Error: &queue.ErrorInfo{Code: code, Message: msg}, Cost: s.rec.Cost, Lease: s.claim.Token}
	if err := s.o.Finalize(ctx, s.rec, s.version, out); err != nil {
		return err
	}
	s.leaseReleased = true
	if s.stopLease != nil {
		s.stopLease()
	}
	s.w.metrics.finished(s.rec.Directive, string(status))
	return nil
}

package orchestrator

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// Continuation kinds.
const (
	KindHandoff = "handoff"
	KindResume  = "resume"
)

// StartRequest asks for a new thread.
type StartRequest struct {
	Directive string
	Inputs    map[string]any
	// Model overrides the directive's model (--model, or a spawn's model).
	Model          string
	LimitOverrides thread.Limits
	// ParentID is the parent thread; "" for a root.
	ParentID string
	// Queue is the asynq queue; default: the parent's, else "default".
	Queue string
	// Bundle is the digest of the project bundle. Required for roots (the
	// CLI builds it); children and continuations inherit it.
	Bundle string
	// ID pre-assigns the thread id (handoff needs it before the thread
	// exists); "" makes a new one.
	ID string
	// Planned says ID was planned before the start (thread.PlannedID: a
	// spawn of a turn, a child of a graph step) and the start may be run
	// again: a thread already registered under ID as a child of ParentID
	// is this start's, and Start returns it as it is (Adopted) instead
	// of starting a twin, counting no spawn and admitting no budget again.
	Planned bool
	// TraceParent is the W3C traceparent of the span starting the thread
	// (a caller's, over the API); "" takes the span in the context, else
	// the parent's or previous thread's (package telemetry).
	TraceParent string

	// Continuation fields: PreviousThreadID is the thread this one
	// continues, Kind is KindHandoff or KindResume, Message the user's
	// resume message.
	PreviousThreadID string
	Kind             string
	Message          string
	// Reserve asks for a guaranteed budget: the child's whole spend limit
	// is set aside from its parent up front, and the start fails when it
	// does not fit (a spawn's reserve: true). Without it the child is
	// admitted while the levels above it have room (ledger package doc).
	Reserve bool
	// Fork makes the thread a fork (Fork): a new chain beside the thread
	// it was forked from, under that thread's parent and limits, with
	// what that thread's chain had left as its spend ceiling.
	Fork *ForkStart
	// Graph starts a graph run of the graph named Directive (package
	// graph) instead of a thread; MaxSteps overrides its max_steps (0:
	// the graph's).
	Graph    bool
	MaxSteps int
	// Fields are more hash fields for the new record (a graph resume's
	// cursor and state edits).
	Fields map[string]string
	// Tenant is a root's tenant ("": thread.DefaultTenant) and Priority
	// its priority (0: the tenant's default, TenantPriority); a child,
	// continuation or fork has its root's, and one that names another is
	// refused (runTenant).
	Tenant   string
	Priority int
	// IdempotencyKey makes the start idempotent (startIdempotent): within
	// the retention, the same key of the same tenant starts one run, and
	// every start of it answers that run (Record.Existing). "" for none.
	IdempotencyKey string
	// Tags label a root's tree (every run of it carries them); a child,
	// continuation or fork has its root's, and one that names others is
	// refused (runTags).
	Tags map[string]string
	// Notify is a root's one-off webhook URL (`--notify`), told of its
	// run's events; a child, continuation or fork has its root's
	// (runNotify).
	Notify string
	// Surface names where the start comes from (SurfaceCLI, SurfaceAPI,
	// ...), for the metric of idempotent replays.
	Surface string

	// idem is the idempotent start this start is the last step of.
	idem *idemStart
}

// Start registers a thread, reserves its budget and enqueues its first
// activation. It fails before anything is stored when the parent does not
// exist or has finished, the directive is unknown, a required input is missing, or depth is
// exhausted; a spawn past the parent's limit fails with spawns_exceeded and
// a budget that does not fit with spend_exceeded.
func (o *Orchestrator) Start(ctx context.Context, req StartRequest) (*registry.Record, error) {
	if req.IdempotencyKey != "" && req.idem == nil {
		return o.startIdempotent(ctx, req)
	}
	if req.Planned {
		if rec, err := o.adopt(ctx, req); rec != nil || err != nil {
			return rec, err
		}
	}
	sc, err := o.startContext(ctx, &req)
	if err != nil {
		return nil, err
	}
	tenant, priority, err := o.runTenant(ctx, req, sc)
	if err != nil {
		return nil, err
	}
	var nt registry.NewThread
	if req.Graph {
		nt, err = o.planGraph(req, sc)
	} else {
		nt, err = o.planThread(req, sc)
	}
	if err != nil {
		return nil, err
	}
	nt.TraceParent, nt.TraceCaller = threadTrace(ctx, req.TraceParent, sc.parent, sc.prev)
	o.placeInTree(&nt, req, sc)
	nt.Tenant, nt.Priority, nt.IdempotencyKey = tenant, priority, req.IdempotencyKey
	if nt.Tags, err = runTags(req, sc); err != nil {
		return nil, err
	}
	if nt.Notify, nt.Webhooks, err = runNotify(req, sc); err != nil {
		return nil, err
	}
	// The admission policy's concurrency keys, computed once, here.
	if nt.ConcurrencyKeys, err = o.concurrencyKeys(ctx, sc, &nt); err != nil {
		return nil, err
	}
	return o.registerAndEnqueue(ctx, req, sc, nt)
}

// startContext is what every start reads first: the parent (which must
// exist and, for a new child, not have finished), the thread a
// continuation continues, and the project bundle (the parent's for a
// child). It fills req's bundle and queue from the parent, else the
// default queue.
type startContext struct {
	parent, prev *registry.Record
	proj         *Project
}

func (o *Orchestrator) startContext(ctx context.Context, req *StartRequest) (startContext, error) {
	var sc startContext
	if req.ParentID != "" {
		p, err := o.reg.Get(ctx, req.ParentID)
		if errors.Is(err, registry.ErrNotFound) {
			return sc, fmt.Errorf("parent thread %q does not exist", req.ParentID)
		}
		if err != nil {
			return sc, err
		}
		sc.parent = p
		// A finished thread takes no new children (its budget is
		// released, nothing would wait for them); a continuation or a
		// fork of a child keeps its parent, finished or not.
		if p.Status.Terminal() && req.PreviousThreadID == "" && req.Fork == nil {
			return sc, fmt.Errorf("parent thread %q is %s: a finished thread takes no children", req.ParentID, p.Status)
		}
		if req.Bundle == "" {
			req.Bundle = p.Bundle
		}
		if req.Queue == "" {
			req.Queue = p.Queue
		}
	}
	if req.Bundle == "" {
		return sc, fmt.Errorf("start %s: no project bundle", req.Directive)
	}
	if req.Queue == "" {
		req.Queue = queue.DefaultQueue
	}
	var err error
	if sc.proj, err = o.Project(ctx, req.Bundle); err != nil {
		return sc, err
	}
	if req.PreviousThreadID != "" {
		if sc.prev, err = o.reg.Get(ctx, req.PreviousThreadID); err != nil {
			return sc, fmt.Errorf("previous thread %q: %w", req.PreviousThreadID, err)
		}
	}
	return sc, nil
}

// planThread plans a thread of a directive: its name, validated inputs,
// limits, capabilities and model.
func (o *Orchestrator) planThread(req StartRequest, sc startContext) (registry.NewThread, error) {
	parent, prev, proj := sc.parent, sc.prev, sc.proj
	name, err := directive.CleanName(req.Directive)
	if err != nil {
		return registry.NewThread{}, err
	}
	d, err := proj.Directive(name)
	if err != nil {
		return registry.NewThread{}, err
	}
	inputs, err := directive.ValidateInputs(d, req.Inputs)
	if err != nil {
		return registry.NewThread{}, fmt.Errorf("directive %s: %w", name, err)
	}
	var parentLimits *thread.Resolved
	if parent != nil {
		parentLimits = &parent.Limits
	}
	limits, err := resolveLimits(req, sc, func() (thread.Resolved, error) {
		return thread.MergeLimits(proj.Resilience.Limits, d.Limits, req.LimitOverrides, parentLimits)
	})
	if err != nil {
		return registry.NewThread{}, err
	}
	caps := append([]string(nil), d.Permissions...)
	var dropped []string
	if parent != nil {
		caps = thread.Intersect(caps, parent.Capabilities)
		dropped = droppedCapabilities(d.Permissions, parent.Capabilities)
	}

	// The tree's explicit model (a root's --model) reaches its children
	// (ResolveTreeModel); a spawn that names one starts its own.
	override, inherited, parentModel := req.Model, "", ""
	switch {
	case req.Fork != nil:
		// Fork names the fork's model (its own --model or its source's).
		override = req.Fork.ModelOverride
	case prev != nil:
		override, inherited = prev.ModelOverride, prev.ModelOverride
	case parent != nil:
		inherited, parentModel = parent.ModelOverride, parent.Model
		if override == "" {
			override = inherited
		}
	}
	model, err := proj.ResolveTreeModel(d, req.Model, inherited, parentModel)
	if o.cfg.Model != "" {
		model, override, err = o.cfg.Model, o.cfg.Model, nil
	}
	if err != nil {
		return registry.NewThread{}, fmt.Errorf("directive %s: %w", name, err)
	}
	if p, ok := config.ScriptPath(model); ok {
		if _, err := proj.ReadFile(p); err != nil {
			return registry.NewThread{}, fmt.Errorf("model %s: the script is not in the project's bundle (a thread runs the scripts its root bundled: "+
				"the root's --model and the script tiers of models.yaml; name it in a tier to use it in a spawn)", model)
		}
	}
	return registry.NewThread{Directive: name, Model: model, Limits: limits, Capabilities: caps, Inputs: inputs,
		ModelOverride: override, DroppedCapabilities: dropped}, nil
}

// droppedCapabilities are the capabilities a child's directive asks for
// that its parent does not hold in full: the child runs without them (or
// with the part its parent holds, for a wildcard), and says so.
func droppedCapabilities(asked, parentHeld []string) []string {
	var out []string
	for _, c := range asked {
		if !thread.Match(parentHeld, c) {
			out = append(out, c)
		}
	}
	return out
}

// resolveLimits are a new thread's limits: a fork runs under the limits of
// the thread it was forked from, a continuation under those of the thread
// it continues (turns and tokens count afresh; spend is what the chain
// has left: planBudget), and anything else under merge's.
func resolveLimits(req StartRequest, sc startContext, merge func() (thread.Resolved, error)) (thread.Resolved, error) {
	switch {
	case req.Fork != nil:
		return req.Fork.From.Limits, nil
	case sc.prev != nil:
		return sc.prev.Limits, nil
	}
	return merge()
}

// placeInTree names nt and places it in its tree: a fork gets a chain and
// a workspace of its own, a continuation goes on in its chain (and
// workspace), a child shares its parent's workspace.
func (o *Orchestrator) placeInTree(nt *registry.NewThread, req StartRequest, sc startContext) {
	nt.ThreadID = req.ID
	if nt.ThreadID == "" {
		nt.ThreadID = o.newID(IDRequest{Directive: nt.Directive, ParentID: req.ParentID, PreviousThreadID: req.PreviousThreadID})
	}
	nt.ParentID, nt.Bundle, nt.Queue = req.ParentID, req.Bundle, req.Queue
	nt.PreviousThreadID, nt.ContinuationKind, nt.ContinuationMessage = req.PreviousThreadID, req.Kind, req.Message
	switch prev, parent := sc.prev, sc.parent; {
	case req.Fork != nil:
		f := req.Fork
		nt.ForkedFrom, nt.ForkTurn, nt.ForkSegment, nt.ForkChainHash = f.From.ThreadID, f.Point.Turn, f.Point.Segment, f.Point.ChainHash
		nt.ForkMessage, nt.Workspace, nt.Capabilities = f.Message, nt.ThreadID, f.From.Capabilities
	case prev != nil:
		nt.ChainRootID = prev.ChainRootID
		nt.ContinuationOf = prev.ThreadID
		nt.ChainIndex = prev.ChainIndex + 1
		nt.Workspace = prev.Workspace
	case parent != nil:
		// A fork's children share its workspace (Record.Workspace).
		nt.Workspace = parent.Workspace
	}
}

// registerAndEnqueue counts a new child's spawn, admits its budget,
// registers it and enqueues its first activation: the common tail of
// every start.
func (o *Orchestrator) registerAndEnqueue(ctx context.Context, req StartRequest, sc startContext, nt registry.NewThread) (*registry.Record, error) {
	parent, prev, id := sc.parent, sc.prev, nt.ThreadID
	undoSpawn, err := o.countSpawn(ctx, req, parent)
	if err != nil {
		return nil, err
	}

	// Budget (step 8) and registration, in one script (start.lua): the
	// budget first, and the record only once the budget is there.
	limits := nt.Limits
	plan, err := o.planBudget(ctx, id, parent, prev, req, &limits)
	if err != nil {
		undoSpawn()
		return nil, fmt.Errorf("budget of %s: %w", id, err)
	}
	nt.Limits, nt.LedgerPath = limits, plan.path
	// From here the thread is registered and queued as one step, whatever
	// becomes of the caller's context: a Ctrl-C of `thread run` between
	// the two would otherwise leave a registered thread without its task
	// (and a reply lost on the way could leave one the caller thinks
	// refused). Redis's own timeouts bound the step.
	ctx = context.WithoutCancel(ctx)
	rec, budgetErr, err := o.register(ctx, plan, nt)
	if (req.Planned || req.idem != nil) && (errors.Is(err, registry.ErrExists) || errors.Is(budgetErr, ledger.ErrExists)) {
		// Another start of the same plan (or idempotency key) registered
		// it meanwhile: its budget and record are that start's, and so is
		// the run.
		undoSpawn()
		return o.adopt(ctx, req)
	}
	if budgetErr != nil {
		undoSpawn()
		return nil, budgetErr
	}
	if err != nil {
		if prev == nil {
			_ = o.ledger.Release(ctx, id, plan.path, string(thread.StatusError))
		}
		undoSpawn()
		return nil, err
	}
	if err := o.enqueueStart(ctx, req, rec); err != nil {
		return nil, err
	}
	o.threadLog(id).Info("thread started", "directive", nt.Directive, "kind", rec.Kind, "parent_id", req.ParentID, "model", nt.Model, "queue", req.Queue)
	return rec, nil
}

// countSpawn counts a new child's spawn against its parent's limit (step
// 6): not a continuation's of an existing child, nor a fork's. The undo
// it returns gives the spawn back, for a child that is then not started
// (its budget does not fit, its registration fails); it does nothing
// when nothing was counted.
func (o *Orchestrator) countSpawn(ctx context.Context, req StartRequest, parent *registry.Record) (undo func(), err error) {
	if parent == nil || req.PreviousThreadID != "" || req.Fork != nil {
		return func() {}, nil
	}
	if _, err := o.reg.IncrSpawns(ctx, parent.ThreadID, parent.Limits.Spawns); err != nil {
		return nil, err
	}
	return func() {
		if err := o.reg.UndoSpawn(context.WithoutCancel(ctx), parent.ThreadID); err != nil {
			o.threadLog(parent.ThreadID).Warn("spawn not given back", "error", err)
		}
	}, nil
}

// enqueueStart admits and enqueues the start activation of rec, which is
// registered. When that fails it is registered but not queued: a planned
// start that Redis did not take (a failover, an outage) is started again
// by its caller, whose activation fails and runs the spawn again, and
// adopts it (adopt enqueues its start then): it stays created for that.
// Any other start is failed now, visibly, for its caller may not try
// again (a tenant ceiling's refusal ended it already).
func (o *Orchestrator) enqueueStart(ctx context.Context, req StartRequest, rec *registry.Record) error {
	_, err := o.admitAndEnqueue(ctx, rec, queue.Activation{ThreadID: rec.ThreadID, Reason: "start"}, 0, false)
	if err == nil {
		return nil
	}
	var ae *thread.AdmissionError
	switch {
	case req.Planned && errors.Is(err, queue.ErrNotEnqueued):
		o.threadLog(rec.ThreadID).Warn("planned start not enqueued: its caller's retry adopts it", "parent_id", req.ParentID, "error", err)
	case !errors.As(err, &ae):
		_ = o.fail(ctx, rec, "enqueue_failed", err.Error())
	}
	return err
}

// adopt returns the thread a planned start already registered (nil, nil
// when there is none): it must be a child of the request's parent, else
// the planned id names someone else's thread and the start is refused.
// An adopted child still created has its start enqueued again, once (the
// task id): Redis may not have taken it at its registration, or its
// start died between the two. A child that
// is not registered but ran (Redis lost its registration with its last
// writes) is restored from the store and adopted (Restore).
func (o *Orchestrator) adopt(ctx context.Context, req StartRequest) (*registry.Record, error) {
	if req.ID == "" {
		return nil, fmt.Errorf("start %s: a planned start needs its id", req.Directive)
	}
	rs, err := o.restore(ctx, req.ID, req.ParentID)
	if errors.Is(err, ErrNotDurable) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rec := rs.Record
	if rec.ParentID != req.ParentID {
		return nil, fmt.Errorf("start %s: thread %s exists under another parent (%q)", req.Directive, req.ID, rec.ParentID)
	}
	if rec.Status == thread.StatusCreated {
		// Its start may not have been enqueued (Redis did not take it:
		// registerAndEnqueue): enqueued now, once (the task id).
		if _, err := o.Reenqueue(ctx, queue.Activation{ThreadID: rec.ThreadID, Reason: "start"}, 0, rec.Queue); err != nil {
			return nil, err
		}
	}
	o.threadLog(rec.ThreadID).Info("planned child adopted", "parent_id", req.ParentID, "status", rec.Status)
	if req.idem != nil {
		req.idem.adopted = true
	}
	return rec, nil
}

// budgetPlan is the ledger step of a start: start.lua's budget function
// fn ("register", "admit" or "reserve") on entry, under path (the entries
// above it, parent first), for amount (USD: the entry's ceiling, or what
// it sets aside); reopen reopens a released entry (a resume).
type budgetPlan struct {
	fn     string
	entry  string
	path   []string
	amount float64
	reopen bool
}

// registerBudget is the ledger step of a root: an entry with ceiling ceil.
func registerBudget(id string, ceil float64) budgetPlan {
	return budgetPlan{fn: "register", entry: id, amount: ceil}
}

// admitBudget is the ledger step of a child (a new entry with ceiling ceil
// under path) or of a continuation (its chain's entry, reopened when
// reopen).
func admitBudget(entry string, path []string, ceil float64, reopen bool) budgetPlan {
	return budgetPlan{fn: "admit", entry: entry, path: path, amount: ceil, reopen: reopen}
}

// reserveBudget is the ledger step of a guaranteed child: amount set
// aside for it above it.
func reserveBudget(id string, path []string, amount float64) budgetPlan {
	return budgetPlan{fn: "reserve", entry: id, path: path, amount: amount}
}

// planBudget decides a new thread's ledger step and its spend limit
// (*limits.Spend), as the ledger package doc says:
//   - a root registers an entry with its spend limit as the ceiling;
//   - a child is admitted under its parent with min(its limit, what the
//     parent has left), or, with req.Reserve, gets its whole limit set
//     aside (and fails when it does not fit);
//   - a continuation (handoff, resume) goes on in its chain's entry, with
//     what the chain has left as its spend limit; a resume reopens the
//     finished chain's entry, and is refused when nothing is left;
//   - a fork gets an entry of its own (planForkBudget).
//
// What is left is read before the script that admits (one round trip
// more per child, none per turn); the ledger checks the room again, and
// every charge is held to the live room of every level anyway.
func (o *Orchestrator) planBudget(ctx context.Context, id string, parent, prev *registry.Record, req StartRequest, limits *thread.Resolved) (budgetPlan, error) {
	switch {
	case req.Fork != nil:
		return o.planForkBudget(ctx, id, parent, req.Fork, limits)
	case prev != nil:
		entry, path := prev.LedgerID(), prev.BudgetPath()
		room, err := o.ledger.Room(ctx, entry, path)
		if err != nil {
			return budgetPlan{}, err
		}
		resume := req.Kind == KindResume
		if resume && room.LeftNano <= 0 {
			return budgetPlan{}, ledger.Exhausted(entry, room.Limiter)
		}
		limits.Spend = room.Left
		return admitBudget(entry, path, room.Left, resume), nil
	case parent == nil:
		return registerBudget(id, limits.Spend), nil
	}
	path := append([]string{parent.LedgerID()}, parent.BudgetPath()...)
	if req.Reserve {
		return reserveBudget(id, path, limits.Spend), nil
	}
	room, err := o.ledger.Room(ctx, parent.LedgerID(), parent.BudgetPath())
	if err != nil {
		return budgetPlan{}, err
	}
	if room.LeftNano <= 0 {
		return budgetPlan{}, ledger.Exhausted(parent.LedgerID(), room.Limiter)
	}
	limits.Spend = min(limits.Spend, room.Left)
	return admitBudget(id, path, limits.Spend, false), nil
}

// startScript is start.lua after the Lua functions it calls, as a Redis
// Function (package redisfn).
var startScript = redisfn.New("start", ledger.Lua+registry.Lua, startLua)

//go:embed start.lua
var startLua string

// register makes the ledger entry of plan and then registers nt, in one
// script (start.lua). budgetErr is the ledger's refusal (nothing was
// registered); err a failure to register (or to run the script) after it.
func (o *Orchestrator) register(ctx context.Context, plan budgetPlan, nt registry.NewThread) (rec *registry.Record, budgetErr, err error) {
	n, err := ledger.ToNano(plan.amount)
	if err != nil {
		return nil, fmt.Errorf("budget of %s: %w", plan.entry, err), nil
	}
	g, err := o.reg.Registration(nt)
	if err != nil {
		return nil, nil, err
	}
	lkeys, lids, err := o.ledger.PathArgs(plan.entry, plan.path)
	if err != nil {
		return nil, fmt.Errorf("budget of %s: %w", plan.entry, err), nil
	}
	reopen := "0"
	if plan.reopen {
		reopen = "1"
	}
	args := slices.Concat([]any{plan.fn, len(lkeys)}, lids, []any{n, reopen, thread.TenantOrDefault(nt.Tenant)}, g.Args)
	res, err := startScript.Run(ctx, o.fast, slices.Concat(lkeys, g.Keys), args...).Result()
	if rerr := ledger.RefusalError(plan.fn, plan.entry, plan.path, plan.amount, err); rerr != nil {
		return nil, rerr, nil
	}
	rec, err = g.Record(res, err)
	return rec, nil, err
}

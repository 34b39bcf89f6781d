package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/internal/luabatch"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/queue"
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

	// Continuation fields: PreviousThreadID is the thread this one
	// continues, Kind is KindHandoff or KindResume, Message the user's
	// resume message.
	PreviousThreadID string
	Kind             string
	Message          string
	// SpendCap caps the spend limit (a continuation's remaining budget).
	SpendCap *float64
}

// Start registers a thread, reserves its budget and enqueues its first
// activation. It fails before anything is stored when the parent does not
// exist, the directive is unknown, a required input is missing, or depth is
// exhausted; a spawn past the parent's limit fails with spawns_exceeded and
// a budget that does not fit with spend_exceeded.
func (o *Orchestrator) Start(ctx context.Context, req StartRequest) (*queue.Record, error) {
	var parent *queue.Record
	if req.ParentID != "" {
		p, err := o.Registry.Get(ctx, req.ParentID)
		if errors.Is(err, queue.ErrNotFound) {
			return nil, fmt.Errorf("parent thread %q does not exist", req.ParentID)
		}
		if err != nil {
			return nil, err
		}
		parent = p
		if req.Bundle == "" {
			req.Bundle = p.Bundle
		}
		if req.Queue == "" {
			req.Queue = p.Queue
		}
	}
	if req.Bundle == "" {
		return nil, fmt.Errorf("start %s: no project bundle", req.Directive)
	}
	if req.Queue == "" {
		req.Queue = queue.DefaultQueue
	}
	proj, err := o.Project(ctx, req.Bundle)
	if err != nil {
		return nil, err
	}
	name, err := directive.CleanName(req.Directive)
	if err != nil {
		return nil, err
	}
	d, err := proj.Directive(name)
	if err != nil {
		return nil, err
	}
	inputs, err := directive.ValidateInputs(d, req.Inputs)
	if err != nil {
		return nil, fmt.Errorf("directive %s: %w", name, err)
	}

	var parentLimits *thread.Resolved
	if parent != nil {
		parentLimits = &parent.Limits
	}
	limits, err := thread.MergeLimits(proj.Resilience.Limits, d.Limits, req.LimitOverrides, parentLimits)
	if err != nil {
		return nil, err
	}
	if req.SpendCap != nil {
		limits.Spend = math.Max(0, math.Min(limits.Spend, *req.SpendCap))
	}

	caps := append([]string(nil), d.Permissions...)
	if parent != nil {
		caps = thread.Intersect(caps, parent.Capabilities)
	}

	model, err := proj.Models.ResolveModel(req.Model, d.Model.ID, d.Model.Tier, d.Model.FallbackID, d.Model.Fallback)
	if errors.Is(err, config.ErrNoModel) && parent != nil && d.Model.ID == "" && d.Model.Tier == "" {
		// A child whose directive names no model runs on its parent's.
		model, err = parent.Model, nil
	}
	if err != nil {
		return nil, fmt.Errorf("directive %s: %w", name, err)
	}

	id := req.ID
	if id == "" {
		id = thread.NewID(name, o.Now())
	}
	nt := queue.NewThread{
		ThreadID:            id,
		Directive:           name,
		ParentID:            req.ParentID,
		Model:               model,
		Limits:              limits,
		Capabilities:        caps,
		Bundle:              req.Bundle,
		Inputs:              inputs,
		Queue:               req.Queue,
		PreviousThreadID:    req.PreviousThreadID,
		ContinuationKind:    req.Kind,
		ContinuationMessage: req.Message,
	}
	if req.PreviousThreadID != "" {
		prev, err := o.Registry.Get(ctx, req.PreviousThreadID)
		if err != nil {
			return nil, fmt.Errorf("previous thread %q: %w", req.PreviousThreadID, err)
		}
		nt.ChainRootID = prev.ChainRootID
		nt.ContinuationOf = prev.ThreadID
		nt.ChainIndex = prev.ChainIndex + 1
	}

	// Spawns (step 6) are counted only for new children, not for a
	// continuation of an existing child; a child that is then not started
	// (its budget does not fit, its registration fails) gives its spawn
	// back.
	counted := false
	if parent != nil && req.PreviousThreadID == "" {
		if _, err := o.Registry.IncrSpawns(ctx, parent.ThreadID, parent.Limits.Spawns); err != nil {
			return nil, err
		}
		counted = true
	}
	undoSpawn := func() {
		if counted {
			if err := o.Registry.UndoSpawn(context.WithoutCancel(ctx), parent.ThreadID); err != nil {
				o.threadLog(parent.ThreadID).Warn("spawn not given back", "error", err)
			}
		}
	}

	// Budget (step 8) and registration, in one script (luabatch): the
	// budget first, and the record only once the budget is there. A
	// continuation whose parent has released reserves nothing from it: it
	// gets a root entry capped at its own limit.
	budget := func() (luabatch.Op, error) { return o.Ledger.RegisterOp(id, limits.Spend) }
	if parent != nil {
		budget = func() (luabatch.Op, error) { return o.Ledger.ReserveOp(id, parent.ThreadID, limits.Spend) }
	}
	rec, budgetErr, err := o.register(ctx, budget, nt)
	if budgetErr != nil && parent != nil && req.PreviousThreadID != "" && errors.Is(budgetErr, ledger.ErrReleased) {
		rec, budgetErr, err = o.register(ctx, func() (luabatch.Op, error) { return o.Ledger.RegisterOp(id, limits.Spend) }, nt)
	}
	if budgetErr != nil {
		undoSpawn()
		return nil, fmt.Errorf("reserve budget for %s: %w", id, budgetErr)
	}
	if err != nil {
		var path []string
		if parent != nil {
			path = append([]string{parent.ThreadID}, parent.ParentLedgerPath()...)
		}
		_ = o.Ledger.Release(context.WithoutCancel(ctx), id, path, string(thread.StatusError))
		undoSpawn()
		return nil, err
	}
	if err := o.Enqueuer.Enqueue(ctx, queue.Activation{ThreadID: id, Reason: "start"}, 0, req.Queue); err != nil {
		// The thread is registered but not queued: housekeeping would not
		// find it (it is not running), so fail it now, visibly.
		_ = o.fail(ctx, rec, "enqueue_failed", err.Error())
		return nil, err
	}
	o.threadLog(id).Info("thread started", "directive", name, "parent_id", req.ParentID, "model", model, "queue", req.Queue)
	return rec, nil
}

// register makes the ledger entry budget builds and then registers nt, in
// one script. budgetErr is the ledger's refusal (nothing was registered);
// err a failure to register (or to run the script) after it.
func (o *Orchestrator) register(ctx context.Context, budget func() (luabatch.Op, error), nt queue.NewThread) (rec *queue.Record, budgetErr, err error) {
	b, err := budget()
	if err != nil {
		return nil, err, nil
	}
	r, err := o.Registry.RegisterOp(nt, &rec)
	if err != nil {
		return nil, nil, err
	}
	errs, err := luabatch.Exec(ctx, o.fast, b, r)
	if err != nil {
		return nil, nil, fmt.Errorf("register thread %q: %w", nt.ThreadID, err)
	}
	if errs[0] != nil {
		return nil, errs[0], nil
	}
	return rec, nil, errs[1]
}

package worker

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/spawn"
	"github.com/spool-run/spool/thread"
)

// toolChildren starts and waits on children of a session's thread for the
// processes of its external tools (tools.Env.Children, package spawn): a
// tool that runs `spool thread run` reaches it through its call's socket
// and token, and this worker starts the thread with its own connections,
// exactly as `thread run --parent` would, so the tool needs none of them.
type toolChildren struct{ s *session }

var _ spawn.Handler = toolChildren{}

// Start starts a child of the calling thread; the parent is never the
// caller's to choose.
func (c toolChildren) Start(ctx context.Context, req spawn.Request) (any, error) {
	if req.Queue != "" {
		if err := queue.CheckName(req.Queue); err != nil {
			return nil, err
		}
	}
	if err := thread.CheckInputs(req.Inputs); err != nil {
		return nil, err
	}
	var limits thread.Limits
	for _, kv := range req.Limits {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("limit %q: want name=value", kv)
		}
		if err := limits.SetLimit(k, v); err != nil {
			return nil, fmt.Errorf("limit %s: %w", kv, err)
		}
	}
	rec, err := c.s.o.Start(ctx, orchestrator.StartRequest{Directive: req.Directive, Inputs: req.Inputs, Model: req.Model,
		LimitOverrides: limits, ParentID: c.s.id(), Queue: req.Queue})
	if err != nil {
		return nil, err
	}
	c.s.log.Info("tool started a child", "thread_id", c.s.id(), "child_id", rec.ThreadID)
	return rec, nil
}

// Wait waits for children of the calling thread (following their
// continuation chains); any other thread is refused.
func (c toolChildren) Wait(ctx context.Context, ids []string, timeout time.Duration) (any, error) {
	for _, id := range ids {
		rec, err := c.s.reg.Get(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("thread %q: %w", id, err)
		}
		if rec.ParentID != c.s.id() {
			return nil, fmt.Errorf("thread %s is not a child of %s, the thread this tool runs for", id, c.s.id())
		}
		if err := c.deadlock(ctx, rec); err != nil {
			return nil, err
		}
	}
	return c.s.o.Wait(ctx, ids, timeout)
}

// deadlock refuses (concurrency_deadlock) a wait on a child that waits
// for admission on a key only its own ancestors hold: this tool's
// activation keeps its slot while it waits, so the child would never
// start. The child is cancelled: the spawn failed.
func (c toolChildren) deadlock(ctx context.Context, rec *registry.Record) error {
	act := rec.Extra[registry.AdmActField]
	if rec.Status != thread.StatusWaiting || act == "" {
		return nil
	}
	dead, key, err := c.s.o.Admission().Deadlocked(ctx, rec.TenantOrDefault(), act, rec.Ancestors)
	if err != nil || !dead {
		return err
	}
	if _, err := c.s.o.Cancel(ctx, rec.ThreadID, true); err != nil {
		c.s.log.Warn("deadlocked child not cancelled", "child_id", rec.ThreadID, "error", err)
	}
	return thread.Refuse(admission.CodeConcurrencyDeadlock, "child %s waits for concurrency key %s, which only its ancestors hold while this tool waits for it", rec.ThreadID, key)
}

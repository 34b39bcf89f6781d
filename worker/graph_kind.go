package worker

import (
	"context"
	"fmt"

	"github.com/spool-run/spool/transcript"
)

// A step in flight across activations (cp.Pending) is of one of six
// kinds, each a type in its own file that answers for its step: how it
// starts, what it waits for, when it is done, its result, and what a
// resumed run carries of it. The walker asks the kind instead of testing
// which one it is, and only the walker completes a step (stepOn): a kind
// returns how the step ended (stepEnd), never completes it itself.
//
//	childStep     graph_child.go     an action's directive or graph child
//	foreachStep   graph_foreach.go   a foreach (of children, or tools here)
//	waitStep      graph_wait.go      a wait on children earlier steps began
//	approvalStep  graph_approval.go  an approval node, or a gated tool
//	sleepStep     graph_sleep.go     a sleep node, until its wake time
//	messageStep   graph_message.go   a wait_message node, until a message
//
// The first three are steps of children and share the window that
// settles, plans and starts them (childWindow, graph_children.go): each
// embeds windowBase and overrides what differs (childKind). A kind holds
// nothing: the step's durable part is its pendingStep, whose Kind names
// the kind in the checkpoint.

// Pending step kinds, as a checkpoint names them (pendingStep.Kind).
const (
	pendingChild    = "child"    // an action's sync directive or graph child
	pendingForeach  = "foreach"  // a foreach of children
	pendingApproval = "approval" // an approval node, or a gated tool
	pendingWait     = "wait"     // a wait node
	pendingSleep    = "sleep"    // a sleep node
	pendingMessage  = "message"  // a wait_message node
)

// pendingKinds are the kinds by the name a checkpoint records.
var pendingKinds = map[string]pendingKind{
	pendingChild:    childStep{},
	pendingForeach:  foreachStep{},
	pendingApproval: approvalStep{},
	pendingWait:     waitStep{},
	pendingSleep:    sleepStep{},
	pendingMessage:  messageStep{},
}

// kind is p's kind; nil when the checkpoint names none of them.
func (p *pendingStep) kind() pendingKind { return pendingKinds[p.Kind] }

// known is nil when p's kind is one of pendingKinds, else the error of a
// state that does not verify (run's, or the run it continues).
func (p *pendingStep) known(run string) error {
	if p.kind() == nil {
		return fmt.Errorf("%w: the pending step %d of %s is of unknown kind %q", errStateInvalid, p.Step, run, p.Kind)
	}
	return nil
}

// children is p's kind as a step of children; nil for an approval, a
// sleep or a wait for a message, which have none.
func (p *pendingStep) children() childKind {
	k, _ := p.kind().(childKind)
	return k
}

// pendingKind is a kind of step in flight.
type pendingKind interface {
	// resume moves step s, pending as p, on as far as this activation
	// can: to its end, or to a wait. first: the activation that began
	// the step, which has not made its wait durable yet.
	resume(ctx context.Context, r *graphRun, s *stepRun, p *pendingStep, first bool) (stepEnd, error)
	// reason is the reason of a checkpoint made while the step waits.
	reason() string
	// carry is what a run resumed from one that ended with p pending
	// (failed or cancelled there) keeps of it, recorded in the resumed
	// run's transcript; nil when the step starts again from its node.
	carry(ctx context.Context, r *graphRun, from string, p *pendingStep) (*pendingStep, error)
}

// childKind is a kind of step of children: what the window
// (childWindow) asks of it.
type childKind interface {
	pendingKind
	// node is the node kind of the step, as step_started records it.
	node() string
	// items are the items the step's children are started from (a
	// foreach's), resolved again from the step's own snapshot; a step
	// whose items changed fails. nil for a step without.
	items(r *graphRun, s *stepRun, p *pendingStep) ([]any, error)
	// scope is the scope the action of item i is resolved in.
	scope(s *stepRun, items []any, i int) map[string]any
	// plans reports whether the step plans and starts its children;
	// false for a wait, whose children earlier steps began: one Redis
	// lost is restored from the store, not started again.
	plans() bool
	// window is how many of the step's children run at once.
	window(r *graphRun, s *stepRun, p *pendingStep) int
	// planLimit is how many items may be planned and unsettled after a
	// round's plans.
	planLimit(p *pendingStep, window int) int
	// stopsOnFailure reports whether an item that failed stops the step:
	// no item starts, and it fails once the running ones have settled.
	stopsOnFailure(s *stepRun) bool
	// wakesOnAny reports whether the run, suspended, wakes when any
	// running child ends (a sliding window), else when all have.
	wakesOnAny(s *stepRun) bool
	// done reports whether the step has settled. notStarted are planned
	// items not registered: a stopping step waits only for the children
	// it started.
	done(s *stepRun, p *pendingStep, notStarted []string) bool
	// result is how the settled step ended: its result, or its failure.
	result(ctx context.Context, r *graphRun, s *stepRun, p *pendingStep) (stepEnd, error)
}

// windowBase is what the kinds of steps of children have in common, and
// what each overrides where it differs: one child at a time, started
// from the step's scope, woken when all running have ended; a resumed
// run starts the step again.
type windowBase struct{}

func (windowBase) reason() string { return transcript.ReasonWaitingChildren }

func (windowBase) carry(context.Context, *graphRun, string, *pendingStep) (*pendingStep, error) {
	return nil, nil
}

func (windowBase) items(*graphRun, *stepRun, *pendingStep) ([]any, error) { return nil, nil }

func (windowBase) scope(s *stepRun, _ []any, _ int) map[string]any { return s.scope }

func (windowBase) plans() bool { return true }

func (windowBase) window(*graphRun, *stepRun, *pendingStep) int { return 1 }

// planLimit: none are planned while two windows are, then up to three.
// Plans go in batches of a window or more, each one segment, and a child
// that ends is replaced by an item already planned: most rounds start
// children without writing a segment.
func (windowBase) planLimit(p *pendingStep, window int) int {
	if len(p.running(nil)) >= 2*window {
		return 0
	}
	return 3 * window
}

func (windowBase) stopsOnFailure(*stepRun) bool { return false }

func (windowBase) wakesOnAny(*stepRun) bool { return false }

func (windowBase) done(_ *stepRun, p *pendingStep, notStarted []string) bool {
	if p.Stopping {
		return len(p.running(notStarted)) == 0
	}
	return len(p.Slots) >= p.Items
}

// keptPending is a fresh pendingStep of p's step, which a resumed run
// carries its kept items in.
func keptPending(p *pendingStep) *pendingStep {
	return &pendingStep{Step: p.Step, Node: p.Node, Kind: p.Kind, Attempt: p.Attempt, StartedAt: p.StartedAt, Items: p.Items,
		Children: map[string]string{}, Slots: map[string]slot{}, Threads: p.Threads, Approval: p.Approval, CallID: p.CallID}
}

// stepEnd is how the activation's part in a step ended: the step done,
// with its result or its failure (serr), which the walker completes it
// with; or not, the activation going on as out says (it suspended, or
// the run's outcome was decided without the step).
type stepEnd struct {
	done   bool
	result any
	serr   error
	out    outcome
}

// stepOK ends a step with result.
func stepOK(result any) stepEnd { return stepEnd{done: true, result: result} }

// stepFailed ends a step with its failure serr.
func stepFailed(serr error) stepEnd { return stepEnd{done: true, serr: serr} }

// stepOpen leaves a step not done: the activation goes on as out says.
func stepOpen(out outcome) stepEnd { return stepEnd{out: out} }

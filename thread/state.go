package thread

import "fmt"

// Status is a thread's lifecycle state.
type Status string

// The statuses, in lifecycle order (see the package doc's picture).
const (
	// StatusCreated is a registered thread that has run no turn yet.
	StatusCreated Status = "created"
	// StatusRunning is a thread an activation holds, or one is due for.
	StatusRunning Status = "running"
	// StatusWaiting is a suspended thread, waiting for something outside
	// it (children, a message, a decision, a rate limit); it holds no
	// worker slot.
	StatusWaiting Status = "waiting"
	// StatusPaused is a thread a person paused (`spool thread pause`): it
	// stopped at a boundary (between turns or graph steps) or while it
	// waited, holds no worker slot, and goes on where it was when
	// unpaused.
	StatusPaused Status = "paused"
	// StatusCompleted is a thread finished with a result. Terminal.
	StatusCompleted Status = "completed"
	// StatusError is a thread that failed. Terminal.
	StatusError Status = "error"
	// StatusCancelled is a thread cancelled by a user or its parent.
	// Terminal.
	StatusCancelled Status = "cancelled"
	// StatusContinued is a thread handed off to (or resumed by) a
	// continuation thread, which its record points to. Terminal.
	StatusContinued Status = "continued"
)

// Statuses lists every status in lifecycle order.
var Statuses = []Status{StatusCreated, StatusRunning, StatusWaiting, StatusPaused, StatusCompleted, StatusError, StatusCancelled, StatusContinued}

// transitions is the table of allowed status changes: from → set of to.
var transitions = map[Status]map[Status]bool{
	StatusCreated: {StatusRunning: true, StatusWaiting: true, StatusError: true, StatusCancelled: true},
	StatusRunning: {StatusWaiting: true, StatusPaused: true, StatusCompleted: true, StatusError: true, StatusCancelled: true, StatusContinued: true},
	StatusWaiting: {StatusRunning: true, StatusPaused: true, StatusError: true, StatusCancelled: true},
	StatusPaused:  {StatusRunning: true, StatusWaiting: true, StatusError: true, StatusCancelled: true},
}

// Transitions returns the allowed transition table as from → []to, for
// callers (the registry's Lua script) that must apply it elsewhere.
func Transitions() map[Status][]Status {
	out := make(map[Status][]Status, len(transitions))
	for _, from := range Statuses {
		for _, to := range Statuses {
			if transitions[from][to] {
				out[from] = append(out[from], to)
			}
		}
	}
	return out
}

// Valid reports whether s is a known status.
func (s Status) Valid() bool {
	for _, v := range Statuses {
		if v == s {
			return true
		}
	}
	return false
}

// Terminal reports whether s is a final state.
func (s Status) Terminal() bool {
	switch s {
	case StatusCompleted, StatusError, StatusCancelled, StatusContinued:
		return true
	}
	return false
}

// Resumable reports whether a user may resume a thread in state s.
func (s Status) Resumable() bool {
	return s == StatusCompleted || s == StatusError || s == StatusCancelled
}

// CanTransition reports whether from → to is allowed.
func CanTransition(from, to Status) bool { return transitions[from][to] }

// TransitionError is returned for a status change the table forbids.
type TransitionError struct {
	From, To Status
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("invalid status transition %s → %s", e.From, e.To)
}

// CheckTransition returns a *TransitionError when from → to is not allowed.
func CheckTransition(from, to Status) error {
	if !to.Valid() {
		return fmt.Errorf("unknown status %q", to)
	}
	if !CanTransition(from, to) {
		return &TransitionError{From: from, To: to}
	}
	return nil
}

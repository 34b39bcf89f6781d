package registry

import (
	"errors"
	"fmt"

	"github.com/spool-run/spool/internal/reply"
	"github.com/spool-run/spool/thread"
)

var (
	// ErrNotFound means there is no registry record for the thread.
	ErrNotFound = errors.New("thread not found")
	// ErrExists refuses a Register of an id that is already registered.
	ErrExists = errors.New("thread already registered")
	// ErrParentNotFound refuses a Register that names a parent that is not registered.
	ErrParentNotFound = errors.New("parent thread not found")
	// ErrConflict refuses a write that named a version that is no longer current.
	// Returned as a *ConflictError.
	ErrConflict = errors.New("version conflict")
	// ErrChainLinked refuses a continuation link that would overwrite another link or
	// close a cycle.
	ErrChainLinked = errors.New("continuation chain already linked")
)

// ConflictError is a stale optimistic-concurrency write: the writer expected
// version Expected, the thread is at Actual, and nothing was changed.
// errors.Is(err, ErrConflict) is true.
type ConflictError struct {
	ThreadID string
	Expected int64
	Actual   int64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("thread %q: version conflict: expected %d, is %d", e.ThreadID, e.Expected, e.Actual)
}

// Is matches ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// RefusalError is the error for a refusal of the registry's scripts (the
// functions of registry.lua and this package's other scripts) about
// thread id, expected being the version the caller held (for a
// CONFLICT): ErrNotFound, ErrExists, ErrParentNotFound, a *ConflictError,
// a *thread.TransitionError, ErrChainLinked, ErrNotClaimable,
// ErrChainMoved, ErrNotPending or ErrFinished, wrapped with what the
// script said. Nil when err is no refusal of theirs.
func RefusalError(id string, expected int64, err error) error {
	r, ok := reply.Refused(err)
	if !ok {
		return nil
	}
	switch r.Code {
	case "NOTFOUND":
		if who := r.Field(0); who != "" {
			id = who
		}
		return fmt.Errorf("thread %q: %w", id, ErrNotFound)
	case "EXISTS":
		return fmt.Errorf("register thread %q: %w", id, ErrExists)
	case "NOPARENT":
		return fmt.Errorf("register thread %q: parent %q: %w", id, r.Field(0), ErrParentNotFound)
	case "CONFLICT":
		return &ConflictError{ThreadID: id, Expected: expected, Actual: r.Int(0)}
	case "TRANSITION":
		return fmt.Errorf("thread %q: %w", id, &thread.TransitionError{From: thread.Status(r.Field(0)), To: thread.Status(r.Field(1))})
	case "LINKED":
		return fmt.Errorf("link continuation: %s: %w", r.Text(0), ErrChainLinked)
	case "NOTCLAIMABLE":
		return fmt.Errorf("thread %q (%s): %w", id, r.Text(0), ErrNotClaimable)
	case "CHAINMOVED":
		return fmt.Errorf("thread %q: the chain of %s moved: %w", id, r.Field(0), ErrChainMoved)
	case "NOTPENDING":
		return fmt.Errorf("thread %q: %s: %w", id, r.Text(0), ErrNotPending)
	case "FINISHED":
		return fmt.Errorf("thread %q is %s: %w", id, r.Field(0), ErrFinished)
	}
	return nil
}

// scriptError is err, the failure of a script of the registry's about
// thread id (expected: the version held), as RefusalError says, else
// wrapped as what failed.
func scriptError(what, id string, expected int64, err error) error {
	if rerr := RefusalError(id, expected, err); rerr != nil {
		return rerr
	}
	return fmt.Errorf("%s: %w", what, err)
}

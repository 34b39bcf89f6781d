package queue

import (
	"errors"
	"fmt"
)

var (
	// ErrNotFound: no registry record for the thread.
	ErrNotFound = errors.New("thread not found")
	// ErrExists: Register of an id that is already registered.
	ErrExists = errors.New("thread already registered")
	// ErrParentNotFound: Register names a parent that is not registered.
	ErrParentNotFound = errors.New("parent thread not found")
	// ErrTerminal: the thread is in a final status and cannot be claimed.
	ErrTerminal = errors.New("thread is in a terminal status")
	// ErrConflict: a write named a version that is no longer current.
	// Returned as a *ConflictError.
	ErrConflict = errors.New("version conflict")
	// ErrChainLinked: a continuation link would overwrite another link or
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

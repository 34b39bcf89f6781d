package ledger

import "errors"

var (
	// ErrNotFound is returned when there is no ledger entry for the thread
	// (or its parent).
	ErrNotFound = errors.New("ledger entry not found")
	// ErrExists is returned when a different entry already exists under
	// the id (another root max, or a child of another parent).
	ErrExists = errors.New("ledger entry exists with other terms")
	// ErrInsufficientBudget is returned when an admission or reservation
	// does not fit in the room left above it, together with a
	// spend_exceeded *thread.LimitError.
	ErrInsufficientBudget = errors.New("insufficient budget")
	// ErrReleased is returned when the entry (or the parent a child is
	// admitted under) has already been released: it takes no more charges
	// or children.
	ErrReleased = errors.New("ledger entry already released")
	// ErrPath is returned when the ids given as an entry's path are not its
	// ancestors as the ledger records them.
	ErrPath = errors.New("ledger path does not match")
)

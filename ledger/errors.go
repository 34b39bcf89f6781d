package ledger

import "errors"

var (
	// ErrNotFound: no ledger entry for the thread (or its parent).
	ErrNotFound = errors.New("ledger entry not found")
	// ErrExists: a different entry already exists under the id (another
	// root max, or a child of another parent).
	ErrExists = errors.New("ledger entry exists with other terms")
	// ErrInsufficientBudget: a reservation does not fit in the parent's
	// remaining budget. Returned together with a spend_exceeded
	// *thread.LimitError.
	ErrInsufficientBudget = errors.New("insufficient budget")
	// ErrReleased: the entry (or the parent a child reserves from) has
	// already been released and takes no more charges or reservations.
	ErrReleased = errors.New("ledger entry already released")
)

package spooltype

import "github.com/spool-run/spool/thread"

// Chain is a continuation chain, first thread first: what `spool thread
// chain --json` prints and the API returns.
type Chain struct {
	Success     bool      `json:"success"`
	ChainLength int       `json:"chain_length"`
	Chain       []*Record `json:"chain"`
	// Forks are the threads forked from the chain's threads, oldest
	// first; each is the first thread of a chain of its own (its record
	// names the thread and turn it was forked from).
	Forks []*Record `json:"forks,omitempty"`
}

// CancelResult is what a cancel request did: `spool thread cancel --json`
// prints it and the API returns it.
type CancelResult struct {
	Success bool `json:"success"`
	// ThreadID is the thread the chain had reached, the one cancelled;
	// Status its status after the request.
	ThreadID string        `json:"thread_id"`
	Status   thread.Status `json:"status"`
	// CancelRequested is false when that thread had finished already:
	// there was nothing to cancel.
	CancelRequested bool `json:"cancel_requested"`
}

// ResumeResult is the spec's resume response. ThreadID names the new
// thread or run as every start's answer does (its record's thread_id), and
// a graph run's resume gives its record as Run, as a fork's answer does;
// NewThreadID and NewThreadResult say the same under the spec's names,
// which scripts read.
type ResumeResult struct {
	Success            bool    `json:"success"`
	Resumed            bool    `json:"resumed"`
	ThreadID           string  `json:"thread_id"`
	OldThreadID        string  `json:"old_thread_id"`
	NewThreadID        string  `json:"new_thread_id"`
	OriginalThreadID   *string `json:"original_thread_id"`
	ResolvedThreadID   string  `json:"resolved_thread_id"`
	Directive          string  `json:"directive"`
	ReconstructedTurns int     `json:"reconstructed_turns"`
	NewThreadResult    *Record `json:"new_thread_result"`
	Run                *Record `json:"run,omitempty"`
}

// PauseResult is what a pause or unpause request did: `spool thread
// pause --json` prints it and the API returns it.
type PauseResult struct {
	Success bool `json:"success"`
	// ThreadID is the run the request was for (the root of its tree with
	// --tree), followed along its continuation chain; Status its status
	// after the request.
	ThreadID string        `json:"thread_id"`
	Status   thread.Status `json:"status"`
	// PauseRequested says the run is paused, or pauses at its next
	// boundary (false after an unpause).
	PauseRequested bool `json:"pause_requested"`
	// Runs counts the unfinished runs the request reached (the run and
	// its descendants); Paused those of them paused when it returned (0
	// after an unpause: a run paused at its boundary waits for its
	// wake-up, one not yet there goes on).
	Runs   int `json:"runs"`
	Paused int `json:"paused"`
}

// Package thread is spool's pure domain: thread ids, states and their allowed
// transitions, limits and their layered merge, cost, and the conversation
// messages that transcripts, providers and the worker exchange. It does no
// I/O.
//
// States and transitions:
//
//	              ┌──────────── cancelled ◀───────────┐
//	              │                                    │
//	created ──▶ running ──▶ completed / error / continued
//	   │          │  ▲
//	   │          ▼  │
//	   │        waiting (suspended on children; holds no worker slot)
//	   │
//	   └──▶ error / cancelled (failed or cancelled before the first turn)
//
// A terminal state (completed, error, cancelled, continued) never changes
// again, with one exception the spec needs: a completed, errored or cancelled
// thread that a user resumes gets a continuation pointer, but its status
// stays as it was (see queue.Registry.SetContinuation).
package thread

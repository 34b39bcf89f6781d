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
//	   │          ▲
//	   ├──────────┘ (parked by admission before its first turn)
//	   └──▶ error / cancelled (failed or cancelled before the first turn)
//
// A terminal state (completed, error, cancelled, continued) never changes
// again, with one exception the spec needs: a completed, errored or cancelled
// thread that a user resumes becomes continued, in the same atomic step that
// gives it its continuation pointer (the spec's set_continuation; see
// registry.Registry.LinkContinuation), so that chain resolution, waits and a
// later resume through its id reach the resumed thread. Its result and
// error stay on the record. It never runs again. The transition table below
// does not list this step, so no status update can take it.
package thread

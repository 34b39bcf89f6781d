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
//	running / waiting ──▶ paused ──▶ waiting ──▶ running
//	                        └──▶ error / cancelled
//
// A person pauses a thread (`spool thread pause`): a waiting one at once,
// a running one at its next boundary (before a turn, between graph
// steps) or at its suspension; it holds no worker slot. Unpaused, it
// waits again for what it waited for (or for its wake-up), and its
// wake-up's claim makes it running.
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

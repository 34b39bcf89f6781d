// Package registry keeps spool's thread records in Redis: a thread's
// status, version, limits, cost, result and links, the lease of the
// activation running it, the continuation chains, waits, approvals and
// the inbox of messages people sent. Every write is one documented Lua
// script (registry.lua holds the functions the compound scripts of
// package orchestrator share); every key comes from keyspace.
//
// A record moves through the statuses of package thread, each move a
// versioned change (Commit, checked against thread's transition table in
// Lua) or one of the scripts named beside the arrows:
//
//	               Claim (start, requeue)
//	Register ──▶ created ───────────────▶ running ──Commit──▶ completed │ error │ cancelled
//	                                      │  ▲  │
//	      Suspend, SuspendForApproval,    │  │  └──LinkContinuation──▶ continued ──▶ (next thread
//	      SuspendUntil (children,         ▼  │                                       of the chain)
//	      approvals, a rate limit)     waiting
//	                                      │  ▲
//	      NotifyFinished and Decide       └──┘ Claim (wake, timeout, retry)
//	      return the Wakes to enqueue
//
// Registry holds the records (Register, Get, List, Commit, Reconcile),
// spawn counts, chains (LinkContinuation, GetChain, ResolveChain), status
// events on one pub/sub channel (WaitTerminal, Subscribe), the control
// channel (cancel, follow, interrupt) and the inbox (Send, Inbox,
// TrimInbox). Activations holds the lease an activation runs under (Claim
// bumps the version, so a dead worker's late writes fail their check;
// Heartbeat; Release), the orphans and stalled waits housekeeping
// re-enqueues (orchestrator.Housekeeper.Recover), suspensions and the wake-ups they
// return, and approvals (SuspendForApproval, Decide).
//
// Scripts refuse with an error reply whose code maps to a sentinel in one
// place (RefusalError: ErrNotFound, ErrConflict, ErrNotClaimable, ...);
// package reply says the protocol. The asynq tasks that carry an
// activation are package queue's.
package registry

// Package worker runs threads: the asynq handler of a thread activation,
// the turn loop of the spec's runner, tool dispatch under the thread's
// capabilities, child spawns and waits that hold no worker slot, automatic
// handoff, and finalization.
//
// One activation, as a picture:
//
//	claim (lease, version V) ──▶ restore from the last checkpoint
//	     │                            (or begin: thread_started hooks + prompt)
//	     ▼
//	┌─▶ cancelled? limits? ──yes──▶ finalize (cancelled / error <limit code>)
//	│    │ no
//	│    ▼
//	│   prompt over the context window? ──yes──▶ handoff; before any call:
//	│    │ no                                   error context_too_small
//	│    ▼
//	│   model call (streaming; token deltas into the transcript; error hooks
//	│    │          decide retry with backoff or fail)
//	│    ▼
//	│   tools (permission check; directive_return; spawn; bound large results)
//	│    ▼
//	│   checkpoint: commit V→V+1 in the registry and charge the ledger with
//	│    │          key (thread, turn) in one script, then the segment
//	│    │          (create-only)
//	│    ▼
//	│   after_step hooks; waiting on children? ──▶ suspend (status waiting) and return
//	│    ▼
//	└── context window full? ──yes──▶ after_complete hooks, then handoff
//	                                  to a continuation thread (none when
//	                                  it would start no smaller: error
//	                                  context_too_small)
//
// Cancellation. A cancel request cancels the activation's context (cause
// errCancelRequested), which stops a model call or a tool at once. Wherever
// the request lands (the model call, a tool, a hook, a checkpoint between
// turns) the activation itself decides the thread cancelled and finalizes
// it on a context detached from the cancel, bounded by
// cancelFinalizeTimeout, while its heartbeat keeps the lease: the thread
// does not wait for the lease to lapse and a recovering worker to find the
// cancel flag. An outcome or a handoff already durable stands.
//
// Retry waits. A model call that fails and is to be retried after less than
// Config.RetryHandBack (transient errors' backoff) waits in its slot. A
// longer wait (a provider's retry-after on a 503) does not hold the
// slot: the thread is checkpointed (reason retry_wait, with the attempts
// so far, which the error hooks' attempt limit counts across activations)
// and handed back, with a recover activation scheduled for the retry time;
// the housekeeping leaves it alone until then (registry.RetryAtField), and a
// cancel ends it at once (no activation holds it). A provider that answers
// "slow down" (rate_limited: a 429, Anthropic's 529 overloaded) has not
// failed the call: the thread is handed back at once, waiting for
// rate_limit as for the fleet's own rate limits, until the provider's
// retry-after (else the hooks' backoff), as often as the provider says
// so; those answers use up none of the retries of other errors, and the
// thread's duration limit ends the wait.
//
// Crash safety. The registry version is the fence: every checkpoint commits
// "expected version = V" before it writes its segment, so a worker whose
// lease was taken over stops at its next checkpoint and writes nothing. A
// segment is create-only, so history is never overwritten. A turn's spend is
// charged in the same atomic step as its commit (a stale activation charges
// nothing), under the idempotency key (thread, turn), and a recovering
// worker re-applies the charge of the last checkpoint, so a crash at any
// point neither loses nor repeats a charge. A worker that dies between the
// commit and the segment has charged the turn that the next activation
// runs again: the second run's charge, under the same key, is the first
// one's (both calls were paid for; the ledger counts the turn once, as the
// transcript does).
// Should Redis itself lose writes (a restart short of its last second), the
// turns whose segments lie past the registry's transcript mark by more
// than the last one may have lost their charges too: the restoring
// activation applies those the ledger lacks (rechargeLost), which costs
// nothing when nothing was lost.
// Tool side effects of a turn that had not checkpointed when its worker
// died run again when the turn is re-run (at-least-once for the tools of
// the interrupted turn; no turn is completed twice).
//
// Transcript marks. The registry records how much of the transcript is
// durable (registry.Record.Transcript: segment count and the chain hash of
// the last one), so that deleting the last segments is detected
// (transcript.Mark). Each checkpoint's commit raises the mark to what was
// durable before it: the segments this activation read when it opened the
// transcript or wrote itself, never the segment it is about to write. So
// a worker that dies between the commit and the segment leaves a mark
// that the transcript still meets, and the next activation, which opens
// the transcript held to the mark, takes over as before. The cost is a lag
// on running threads: the segment of the last checkpoint is covered only
// by the next commit, and deleting it is indistinguishable from a crash
// before it was written (the thread re-runs that turn). A finished thread
// has no lag: Finalize commits after the final segment, with the exact
// mark (Outcome.Transcript); the final thread.json, which that segment's
// checkpoint attests (orchestrator.AttestFinal), names the segment; a
// segment appended later (thread_resumed) raises the mark after it is
// written.
//
// Signatures. A checkpoint's is the only one a turn costs: the files
// written with it (capabilities.md and thread.json at the start, thread.json
// at the end) are attested by it (attestViews: their SHA-256 in its
// artifacts) and written unsigned once it is durable. capabilities.md is
// written once, at the start.
// The registry only ever raises a mark, and every mark is one its writer
// saw durable, so a mark never exceeds the transcript unless segments
// were deleted.
package worker

// Package orchestrator starts, spawns, waits on, cancels and resumes threads.
// It is the one place that knows the order of the registry, ledger, bundle
// and queue steps of the spec's thread_directive.execute, so the CLI, the
// worker's spawn tool and the scheduler all start threads the same way.
//
// Starting a thread (spec steps 1-8, then enqueue):
//
//	parent? ──▶ bundle ──▶ directive ──▶ inputs ──▶ limits (depth) ──▶ spawns
//	   ──▶ capabilities ──▶ model ──▶ reserve budget ──▶ register ──▶ enqueue
//
// Choices the spec leaves open, made here:
//   - A continuation (handoff or resume) carries the chain's remaining spend:
//     its spend limit is the previous thread's limit minus what it spent, so
//     a chain is one logical execution under one budget. Turns and tokens
//     start afresh with the new context.
//   - A continuation or resume whose parent has already released its budget
//     gets a root ledger entry of its own, capped at that remaining spend.
//   - A child reserves its whole resolved spend limit from its parent, as
//     the spec's step 8 says, and a spawn that does not fit fails with
//     spend_exceeded (returned to the parent's model as the spawn's result).
//     Children therefore want smaller spend limits than their parent
//     (directive <limits spend> or the spawn's limit_overrides): a child
//     with the parent's own limit can never fit once the parent has spent
//     anything.
//   - A child whose directive names no model (no id, no tier) and whose
//     spawn call names none runs on its parent's model.
//   - Children inherit their parent's bundle, so a whole tree sees the same
//     bytes of the project as the thread that started it.
//
// Verification (VerifyThread). Before a thread's state is used (resume, a
// handoff's continuation, `spool thread verify`), its signed thread.json
// and capabilities.md are verified with the keyring and checked against
// the registry (VerifyMetadata), and its transcript is read held to the
// transcript marks the registry and thread.json recorded. thread.json and
// capabilities.md are views written beside the turn loop, so a running
// thread may lack them; a finished thread must have thread.json, which
// Finalize writes with the final mark. What a view says may be older than
// the registry (a view is written after its commit), never newer or
// contrary. Strict mode fails on the first problem; lenient mode (the
// project's transcript_integrity) reports problems as warnings.
package orchestrator

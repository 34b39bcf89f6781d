// Package orchestrator starts, spawns, waits on, cancels and resumes threads.
// It is the one place that knows the order of the registry, ledger, bundle
// and queue steps of the spec's thread_directive.execute, so the CLI, the
// worker's spawn tool and the scheduler all start threads the same way.
//
// Starting a thread (spec steps 1-8, then enqueue):
//
//	parent? ──▶ bundle ──▶ directive ──▶ inputs ──▶ limits (depth) ──▶ spawns
//	   ──▶ capabilities ──▶ model ──▶ admit budget ──▶ register ──▶ enqueue
//
// Budgets (CLI.md "Budgets", the ledger package doc). A spend limit is a
// ceiling on a thread's whole subtree, and every charge counts at once
// against the thread and each ancestor:
//
//	root   spend 1.00 ─ ledger entry: max 1.00, actual = the whole tree's spend
//	├─ kid spend min(1.00, what the root has left) ─ admitted, shares the root's
//	├─ kid (reserve: true, spend 0.30) ─ 0.30 set aside in the root up front
//	└─ kid ─▶ continuation ─▶ continuation: one entry for the chain
//
// Choices the spec leaves open, made here:
//   - A child is admitted, not funded: it starts while every level above it
//     has room, with spend limit min(its resolved limit, what its parent
//     has left), and nothing is set aside. Children with their parent's own
//     limit share the parent's budget, so a fan-out runs under default
//     limits. A spawn that finds no room fails with spend_exceeded, given
//     to the parent's model as the spawn's result and written to the
//     parent's transcript (child_refused).
//   - The spec's step 8 reservation is opt-in: a spawn with reserve: true
//     sets its whole spend limit aside from its parent up front (and the
//     levels above it, up to the first one that holds a guarantee of its
//     own), and fails when it does not fit.
//   - A continuation chain has one ledger entry, keyed by its first
//     thread: a handoff's continuation and a user resume go on spending
//     it, with what the chain has left as their spend limit (never a fresh
//     default), so a chain of resumes can never spend more than its first
//     thread's limit. A resume reopens the chain's finished entry, and is
//     refused when nothing is left. Turns and tokens count afresh with the
//     new context, under the limits of the thread continued.
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

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
//   - Children inherit their parent's bundle, so a whole tree sees the same
//     bytes of the project as the thread that started it.
package orchestrator

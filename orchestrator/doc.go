// Package orchestrator starts, spawns, waits on, cancels, resumes and forks
// threads.
// It is the one place that knows the order of the registry, ledger, bundle
// and queue steps of the spec's thread_directive.execute, so the CLI, the
// worker's spawn tool and the scheduler all start threads the same way.
// Orchestrator holds the operations people call (the CLI, the API, the
// MCP server, the monitor); the scheduler takes it as a Housekeeper, with
// the writes of housekeeping, and the worker as a Runtime, with an
// activation's steps and services (ARCHITECTURE.md).
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
//   - A fork (Fork) is not a continuation: it is the first thread of a
//     chain of its own, beside the thread it was forked from (the same
//     parent), so it gets a ledger entry of its own. Its ceiling is what
//     the source's chain had left at the fork's turn, never a fresh
//     default: the chain's ceiling less what the chain had spent by the
//     end of that turn (its earlier threads' own spend, the turns' recorded
//     spend, and the subtree spend of every child started by then). A
//     root's fork registers that as its ceiling; a child's fork is
//     admitted under the child's parent with at most what the parent has
//     left, and is refused once the parent has finished. So a fork never
//     spends what its source's chain could not have spent from that turn,
//     and a tree's ceiling holds over its children's forks too.
//
// Workspaces. The file tools share one workspace per tree
// (registry.Record.WorkspaceID). A fork gets a workspace of its own, which
// its children and continuations share: the store keeps no snapshots, so
// Fork rebuilds the source's workspace as it was at the end of the fork's
// turn by replaying, in the order of their results' timestamps, the
// built-in fs_write calls that succeeded in the signed transcripts of
// every thread sharing it, up to that turn (for a workspace that was a
// fork's, on top of what that fork started with). That is exact for the
// built-in file tools; what external tools changed elsewhere is not
// replayed, and the timestamps are the workers' clocks.
//   - A child whose directive names no model (no id, no tier) and whose
//     spawn call names none runs on its parent's model.
//   - Children inherit their parent's bundle, so a whole tree sees the same
//     bytes of the project as the thread that started it.
//
// Verification (VerifyThread). Before a thread's state is used (resume, a
// handoff's continuation, a fork, `spool thread verify`), its transcript
// is read held to the transcript marks the registry and a signed
// thread.json recorded, and its thread.json and capabilities.md are
// verified and checked against the registry. Each of them is either
// attested by the checkpoint written with it (its SHA-256 in the
// checkpoint's artifacts: one signature per checkpoint covers the turn's
// files, attest.go) or signed on its own (what no checkpoint could
// attest, and what was written before attestation). thread.json and
// capabilities.md are views written beside the turn loop, so a running
// thread may lack them; a finished thread must have thread.json, which
// Finalize writes at the end. What a view says may be older than the
// registry (a view is written after its commit), never newer or contrary.
// Strict mode fails on the first problem; lenient mode (the project's
// transcript_integrity) reports problems as warnings.
package orchestrator

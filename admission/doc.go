// Package admission decides which activations may run, when, and how
// many at once: the fleet's published policy (.ai/config/agent/
// admission.yaml, `spool admission apply`), concurrency keys, each
// tenant's max_running and fair share of the fleet, priority within a
// tenant. It sits beside registry and ledger: the orchestrator asks it
// before it enqueues an activation, the worker before it claims one and
// when one ends.
//
// # Admit, then enqueue
//
// asynq's queues are fixed per worker process, so tenants cannot be
// queues. What enqueues an activation (a start, a wake, a continuation, a
// recovery, a grant) first requests admission (Request: adm_request.lua
// in the tenant's slot); a grant is enqueued as before, a parked
// activation is not enqueued at all and waits in its tenant's state, in
// order, holding no worker slot:
//
//	request ─▶ key full? ─yes─▶ key queue ──(a slot of the key frees)──┐
//	              │no                                                  │
//	              ▼                                                    │
//	        ready queue ◀──────────────────────────────────────────────┘
//	  (priority, class, arrival)
//	              │ grant loop: admitted < min(share, max_running),
//	              │ every key with a free slot (all or none)
//	              ▼
//	        granted ─(enqueued; grant TTL)─▶ claimed: running lease ─▶ released
//	              │                                   │
//	              └─ TTL lapsed: head of its class    └─ lease lapsed: reaped once
//
// asynq's lists hold granted work only; the backlog is in the ready and
// key queues, ordered before any FIFO sees it. A task that reaches a
// worker without a grant (delayed: backoffs, timeouts, rate-limit hand
// backs; redelivered; enqueued while admission was off) is admitted at
// its claim (Claim: adm_claim.lua), and one that finds no room there is
// acknowledged and parked, its next task named with an epoch
// (queue.Activation.Epoch) so it is not the task asynq holds as done.
//
// # The tenant's slot
//
// Each tenant's state is one Cluster slot ({ns:t:<tenant>}; in the
// one-slot layout the namespace's, under adm:t:<tenant>:), thirteen fixed
// keys every tenant script takes (keyspace.AdmTenantKeys, admission.lua):
// nothing a script touches is derived inside it. Activation records,
// key queues and (for the ceilings below) spend windows are fields or
// lexicographic ranges of those keys. Every tenant script first reaps up
// to 64 expired leases and looks at no more than 64 ready entries: no
// script runs long on a big backlog. Counts per queue and reason
// (n:<where>:<queue>), totals (grants, released, reaped:<state>,
// fenced, unreplicated) and the wait histogram live in the state hash,
// written by the scripts themselves, read once per scrape.
//
// # Shares
//
// One balancer (Balancer, under a lock: any worker, the scheduler or
// `spool dev`) computes weighted max-min shares every fair_share.interval
// (Shares) from the worker registry's capacity and each active tenant's
// demand (admitted + ready; blocked work is no demand), and writes each
// share with a pump that grants up to it. A tenant turning active between
// passes takes a provisional share max(1, ⌊C·w/(w+W)⌋) from the last
// pass, read at most once a second per process, and wakes the balancer.
// The cross-tenant choice is off the hot path: every grant is a
// single-slot decision of its own tenant. Shares only decide fairness:
// no bound depends on them.
//
// # Crash and failover
//
// A grant ends by exactly one of a release and a reap, in the script
// that deletes its record (I3). Running leases are renewed with the
// run's own lease, one adm_renew per tenant per worker per renewal; a
// worker stops an activation whose grant it could not renew. With
// grants.durability: replica a granting script is followed, on the same
// connection and in one pipeline, by WAIT 1 1000 when the master has
// replicas, and its grants are enqueued once a replica has them; and a
// renewal carries the highest generation its worker saw, so a slot that
// went back (a failover lost writes) fences its tenant for a lease and
// takes the workers' grants back (adm_renew.lua).
//
// # Choices the spec leaves open
//
//   - Shares sum to the capacity even when demand does not: what demand
//     leaves is split by weight among the tenants below max_running, so
//     work that arrives between passes starts at once (P4). Fairness is
//     unchanged: while tenants are backlogged, no capacity is left.
//   - A share older than three balancer periods (at least 3 s) is
//     stale, and the tenant takes its provisional share: a fleet whose
//     balancer stopped keeps admitting.
//   - A lapsed unclaimed grant counts as reaped (state granted), so
//     grants = releases + reaps holds for every grant.
//   - Yielding hands back as a lapsed lease would: the activation checks
//     its tenant at a turn or step boundary, releases its grant and
//     requests again as "recover" at its version (class 0), so the
//     registry's orphan recovery finds the same request.
//   - `admission off` grants every parked activation (Drain: enqueued,
//     records deleted); running ones are reaped as their leases lapse.
//
// # Tenant ceilings (to come)
//
// Spend windows, starts per minute, runs in flight and on_exhausted:
// refuse are not built yet; the slot is laid out for them: adm:bq is the
// ceiling queue (member REASON|<score>|<activation>, state "blocked",
// counted under n:blocked:<reason>:<queue>), adm:roots the root chains
// in flight, adm:spend and adm:lapsed the windows and the lapsed
// allowances, and each script has one place to check them (adm.new, and
// the grant loop before adm.grant) and one to release them (adm.unhold
// for allowances, adm.wakeall for the ceiling queue).
package admission

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
// pass, read at most once a second per process, and wakes the balancer;
// its first request also lowers the share of each tenant of the last
// pass to ⌊C·w/(W+w_new)⌋ when above it (Admitter.makeRoom), so the
// tenants already running stop granting their own next activations at
// once rather than at the pass (a few hundred ms on a loaded fleet).
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
// # Tenant ceilings
//
// A tenant's ceilings are checked in its slot, in the grant loop before
// a grant (adm.ceiling): max_running bounds what is admitted (it waits
// ready, tenant_concurrency); runs_in_flight and starts_per_minute (GCRA:
// period 60/N s, burst N, its time in the state's gcra) are met by a
// root chain's first activation (class 1, its chain not yet in adm:roots),
// which enters adm:roots at its first grant and leaves it when the chain
// ends (the release of the activation that finished it, or the cancel of
// a waiting root: Ending.Chain); children and later activations never
// count. The spend windows (adm:spend, d:<YYYY-MM-DD>:… and m:<YYYY-MM>:…,
// named from the call's time: a script has no clock) are met by every
// grant (room > 0 once spend_grant is set aside for each grant not yet
// claimed, so that every grant finds room at its claim); a claim lends the activation min(spend_grant, room)
// of the windows of now (held), a top-up (adm_topup.lua, once per
// <activation>:<turn>) lends more before a model call its allowance does
// not cover, and the release settles what the activation spent (the part
// beyond its allowance is the windows' overrun), so spent + held ≤ limit
// in every window at every moment. A running lease reaped with an
// allowance keeps it held in the lapsed hash (adm.lapse) until what it
// spent is known, in another slot: each admitted registry claim notes
// its admission id and the thread's spend (claim.lua: allow_act,
// allow_from), so the run's next admitted claim knows what the dead
// activation spent, and that activation's release settles it
// (adm.settlelapsed, once); housekeeping (Orchestrator.settleLapsed)
// settles from the run's record when its next claim is not coming (the
// run waits or ended), and as all spent when the run is gone or an hour
// passed. Without a spend limit the same settle counts what it spent.
// The windows are kept 40 days and 13 months (`tenant show`, the metrics
// and the monitor read the day and month of now): once a UTC day the
// pump (adm_pump.lua, which the balancer runs for every active tenant
// each pass) walks adm:spend with HSCAN, a step of about 64 fields per
// call, and deletes the older windows, except one whose held is not 0:
// an allowance lent in it settles there however late its activation
// ends, and the window goes at the next day's walk. A tenant with no
// work is not pumped, and its windows stop growing with its spend.
//
// An activation that meets a ceiling waits in the ceiling queue (adm:bq,
// member REASON|<score>|<activation>, state blocked, counted under
// n:blocked:<reason>:<queue>) until an end, a pump (the balancer's pass,
// `tenant set`'s override, a scheduled TypePump task at the time a rate
// or a window has room again: every reply carries that time) finds room
// for it (adm.wakeblocked). Under on_exhausted: refuse a root chain's
// first activation that meets runs_in_flight, starts_per_minute or a
// spend window is refused at its request (REFUSED, no record): the
// orchestrator ends the registered root error with the code
// (tenant_runs_exceeded, tenant_rate_exceeded, tenant_budget_exhausted);
// so is a child's start that finds a spend window full (a refused spawn
// with tenant_budget_exhausted), and a running thread whose window has no
// room left for its next call ends error with it. One it let through
// that finds the ceiling full at its grant waits.
package admission

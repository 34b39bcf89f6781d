// Package scheduler starts cron-scheduled directives and keeps house:
// it re-enqueues orphaned threads, holds the registry and the ledger to
// the signed transcripts when Redis lost writes, and deletes the
// artifacts of old threads.
//
// Schedules live in the project's .ai/config/schedules.yaml (see Parse);
// each entry names a directive, its inputs, a cron spec, a queue, a model,
// limit overrides, and the tenant and priority of its runs. Every thread goes through orchestrator.Start with a
// bundle of the project built at the tick (launch.ProjectBundle), exactly as
// `spool thread run` starts one.
//
// # One thread per tick, however many schedulers
//
// Any number of scheduler processes may run on one Redis (for
// availability); each tick of each entry starts exactly one thread:
//
//		process A ─┐  tick T of entry E        ┌─▶ got it ──▶ registry has E@T? ─no─▶ bundle ─▶ orchestrator.Start
//		process B ─┼─▶ SET lock:schedule:E:T ──┤                  │ yes                         (id = TickThreadID)
//		process C ─┘   NX PX ttl               └─▶ taken: done    └─▶ done (taken)
//
//	  - Every process computes the same ticks: cron specs are read in UTC
//	    (or their CRON_TZ=), and "@every d" ticks are the multiples of d since
//	    the Unix epoch (Every), not counted from each process's start as
//	    robfig/cron's (and so asynq's scheduler's) @every is.
//	  - The lock key (TickLockKey, built with keyspace's Lock) is per entry
//	    and tick; it lives longer than the gap between two ticks plus the
//	    misfire grace, so a late process still finds it.
//	  - The thread id is a function of the entry and the tick
//	    (TickThreadID), so the registry is a second fence: a process that
//	    took a tick whose thread exists (a lock lost to a Redis failover)
//	    starts nothing.
//	  - The start is idempotent under the tick's key (TickIdempotencyKey,
//	    schedule:<entry>:<tick RFC 3339>) in the entry's tenant, which
//	    the record carries and which claims the tick's thread id: a start
//	    that got past both fences answers the registered run, and the
//	    tick is taken.
//
// A tick is at most once: a process that takes the lock and dies before
// the thread is registered loses that tick. Ticks missed while every
// scheduler was down are not caught up, as with cron; a process that
// wakes late runs only the newest tick it missed, if within MisfireGrace.
//
// Why not asynq's Scheduler: it enqueues once per process per tick, and its
// @every ticks are counted from each process's start, so two processes'
// ticks differ and cannot be matched up; and it offers no per-tick hook to
// deduplicate on. The design above keeps its cron parser (robfig/cron).
//
// # Housekeeping
//
// Every HousekeepingInterval one scheduler process (HousekeepingLockKey;
// a process that finds the lock under its own token lost its release, as
// a failover can lose it, and takes it again) runs a pass: Reconcile holds the registry and the ledger to the
// transcripts when Redis may have lost writes (below), orchestrator.Housekeeper.Recover
// re-enqueues running threads whose lease has lapsed (their worker died)
// and waiting threads whose wake-up was lost;
// with Retention set, Retain deletes the blob-store artifacts of threads
// that finished longer ago than Retention and whose tree and chain are no
// longer active; at most once an hour, redisfn.Prune deletes spool's Redis
// Function libraries that no process has used for FunctionsUnused (7 days:
// those of versions no longer deployed, which each deploy would otherwise
// add to Redis for good). Retention keeps the registry records (a few hundred
// bytes each: status, cost, result; what `spool thread show` and the
// ledger read) and marks them with ArtifactsDeletedField; removing records
// would belong to registry.Registry, which owns their layout.
//
// # Reconciliation: the transcript is the source of truth
//
// Redis can lose its last writes: with appendfsync everysec a crash
// loses up to a second or so, a failover what had not reached the
// replica. Redis loses a suffix of its history, so what is left is
// consistent (a commit is never there without the writes before it); it
// is only behind the signed transcripts in the blob store, which lose
// nothing. What a loss leaves, and what repairs it:
//
//	lost in Redis                          left behind                        repaired by
//	a claim (its task taken, acknowledged)  a created thread with no task      a new task, reason requeue (Reconcile)
//	checkpoint commits                      mark and version behind segments   both raised (Reconcile)
//	turn charges                            the ledger under-charged           each recorded turn not charged is
//	                                                                           charged (Reconcile; the worker too)
//	a recover or wake claim                 its task finished, the thread not  the task enqueued again
//	                                                                           (Housekeeper.Recover, Reenqueue)
//	a suspend, a finalize                   a thread running with no lease     orphan recovery: the next activation
//	                                                                           redoes it from the durable checkpoint
//
// A turn's spend is in its cognition_out event, and the worker charges it
// under the key "<thread>:turn:<n>" on the chain's ledger entry, once: so
// charging every recorded turn the ledger lacks is exact. The version is
// raised past the last durable checkpoint's (by 1000), so that no commit
// of an activation the loss cut off can match again; only on a thread no
// activation holds. The mark is raised to the durable segments.
//
// When it runs, so that it costs nothing in the steady state: every pass
// reads the Redis INFO run_id and a marker hash
// (keyspace.Space.Housekeeping: the run_id seen, a canary counter each
// pass increments, the time of the last periodic pass), two round trips.
// A missing marker (the first pass, or a loss that took it), a new run_id
// (Redis restarted or failed over) or a canary lower than this process
// last made it (writes lost without a restart) starts a full
// reconciliation (but for a restart after a clean stop, when the marker is
// still the one the stopping process sealed: Seal, Config.CleanStop, as
// spool dev does of its own Redis): every non-terminal thread and every thread created
// within ReconcileWindow (recently finished ones), each against its whole
// transcript, and every created thread's start task. The marker is written
// only after it succeeded, so one cut short (the blob store down) runs
// again at the next pass. Every ReconcileInterval (10m) a periodic pass
// lists each non-terminal thread's segments (one LIST each) and reads in
// full only the transcripts ahead of the registry's mark by more than the
// normal lag of one segment, and checks the start tasks of created
// threads. Workers need no scheduler for the charges: an activation that
// restores a thread re-applies the turns past the registry's mark that the
// ledger lacks (package worker).
//
// Every repair is logged (one line per thread with what changed, one per
// pass) and counted in spool_reconciled_total{kind} (requeue,
// transcript_mark, version, charge); spool_reconcile_passes_total{trigger}
// counts the passes.
//
// # A thread Redis lost is restored, never written off
//
// A thread registered within the lost writes is gone from Redis whole:
// its record, its task, its ledger entry and its charges in every
// ancestor's entry. If it made a turn durable, the store still has it:
// its signed transcript and thread.json. A full reconciliation reads
// each examined thread's transcript anyway; every child it names
// (child_spawned) that the registry lacks is restored from the store
// (orchestrator.Housekeeper.Restore: its record as it ended, or as it was started and
// running from its last checkpoint with a recover task; its chain; its
// ledger entry, with every turn it recorded charged once along the whole
// path), and then the children those name, down the tree
// (spool_reconciled_total{kind="restore"}). The parent waiting on the
// child restores it too when it finds it missing (package worker), and so
// does a rerun of a planned spawn or graph step (orchestrator's
// StartRequest.Planned), whichever comes first. Not recoverable: a child
// lost before its first checkpoint left nothing durable (its parent is
// told thread_lost and may start it again); a root registered within the
// lost writes is named by no transcript and is gone; and so are the
// other writes with nothing in the store behind them (an approval
// decided, a message sent, a cancel requested within them).
//
// # What replication acknowledges: min-replicas-to-write and WAIT
//
// Redis replicates asynchronously: a master acknowledges a write before
// any replica has it, and a failover promotes a replica without what it
// had not received, the loss above. Two Redis features narrow it. Spool
// needs neither to be exact (what Redis loses, the store gives back), but
// each buys something, at a price (e2e's TestSentinelWaitAndMinReplicas,
// on a real master, replica and Sentinel; the figures in BENCHMARKS.md):
//
//   - min-replicas-to-write N, min-replicas-max-lag S (the master's
//     configuration): the master refuses writes (NOREPLICAS) while fewer
//     than N replicas have acknowledged within S seconds. That bounds what
//     a failover can lose to about S seconds of writes (the test, S = 1:
//     the master took 80 commits in the 1.7 s after its replica froze,
//     then refused), at no cost per write (a commit's latency is the
//     same). The price is availability: with one replica, that replica
//     down or behind stops every write, and spool stalls (its activations
//     retry, as in any Redis outage) until it is back. Run two replicas
//     with N = 1.
//   - WAIT N T, sent after a write on the same connection: it blocks
//     until N replicas have the write, or T passes; a write WAIT
//     acknowledged survives a failover to one of those replicas, and a
//     write it did not (WAIT answers fewer) is one the failover may lose.
//     It costs a replication round trip on every write: on loopback a
//     commit's p50 goes from about 37 to 75-120 µs; a replica in another
//     zone adds its network round trip to every checkpoint. Spool does not
//     send it: its scripts run on a pooled, auto-pipelined client, where
//     WAIT would have to share each write's connection, and what it would
//     keep is what the store restores anyway.
package scheduler

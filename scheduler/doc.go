// Package scheduler starts cron-scheduled directives and keeps house:
// it re-enqueues orphaned threads and deletes the artifacts of old ones.
//
// Schedules live in the project's .ai/config/schedules.yaml (see Parse);
// each entry names a directive, its inputs, a cron spec, a queue, a model
// and limit overrides. Every thread goes through orchestrator.Start with a
// bundle of the project built at the tick (ProjectBundle), exactly as
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
// Every HousekeepingInterval one scheduler process (HousekeepingLockKey)
// runs a pass: worker.Recover re-enqueues running threads whose lease has
// lapsed (their worker died) and waiting threads whose wake-up was lost;
// with Retention set, Retain deletes the blob-store artifacts of threads
// that finished longer ago than Retention and whose tree and chain are no
// longer active. Retention keeps the registry records (a few hundred
// bytes each: status, cost, result; what `spool thread show` and the
// ledger read) and marks them with ArtifactsDeletedField; removing records
// would belong to queue.Registry, which owns their layout.
package scheduler

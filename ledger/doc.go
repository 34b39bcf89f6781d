// Package ledger is spool's hierarchical budget ledger: one Redis hash per
// entry, every change one Lua script (one round trip, FCALL).
//
// A spend limit is a ceiling on a whole subtree: the thread's own turns and
// all of its descendants'. Every charge counts at once against the thread
// and each ancestor, so every level's spend is live and none is ever
// exceeded, at any moment, across the fleet.
//
// Amounts are USD in the API and integer nano-USD (1e-9 USD) in Redis: an
// amount is rounded to the nearest nano-USD (math.Round(usd*1e9)), so sums
// are exact and never drift. An amount must be finite, non-negative and at
// most MaxAmount (1e6 USD), which keeps every sum below 2^53 where Lua's
// numbers are exact integers.
//
// # Entries
//
// One entry per continuation chain (the orchestrator keys it by the
// chain's first thread): a handoff or a resume goes on spending the same
// entry, so a chain is one execution under one ceiling and a chain of
// resumes can never spend more than its first thread's limit. An entry
// holds:
//
//	max       the ceiling of the subtree
//	actual    the subtree's spend: own charges plus every descendant's, live
//	reserved  money set aside for guaranteed descendants not yet spent
//	own       the entry's own accepted charges
//	overrun   the entry's own charges that did not fit (refused spend)
//	status    active until Release, then the final status
//	g         1: guaranteed (Reserve), 0: admitted (Admit, Register)
//
// and actual + reserved ≤ max holds for every entry at every moment.
//
// # Admitted and guaranteed children
//
// A child is admitted by default (Admit): it gets its own ceiling, sets
// nothing aside, and is admitted while every level above it has room;
// children with their parent's own limit share the parent's budget, so a
// fan-out of agents runs under default limits. A spawn may instead ask
// for a guarantee (Reserve): its whole amount is set aside at once in the
// levels above it, or the spawn fails.
//
// Where a reservation is held: in every level from the child's parent up
// to the first active guaranteed ancestor (inclusive), or up to the root —
// the reservation's region. Above that level the level's own reservation,
// which covers everything below it, is held instead.
//
// # A charge
//
// A charge of a by thread T walks T's path (T, parent, ..., root; every
// key shares one Redis Cluster slot). The region of T is T up to its first
// active guaranteed level G (T itself if T is guaranteed), or the root:
//
//	root      max 5.00  actual += a, reserved −= a   ┐ above the region:
//	G (g=1)   max 1.00  actual += a                  │ spent out of G's
//	P         max 1.00  actual += a                  ┘ reservation
//	T         max 1.00  actual += a, own += a        region: T..G, each
//	                                                 level's room checked
//
// The charge is accepted up to the smallest room (max − actual − reserved)
// over the region; the part that does not fit is clamped: it goes to T's
// overrun, and a spend_exceeded *thread.LimitError names the level that had
// no room, so that the thread stops. Clamping (rather than refusing the
// whole charge) records the truth: the money of a model call that has
// already been made is spent up to the ceiling, and the overrun is visible
// on the entry. Above the region the accepted part moves from reserved to
// actual: G's reservation there already counted it, and G's own check
// keeps it within G's ceiling.
//
// # Release
//
// Release marks an entry final. An admitted entry holds nothing: its spend
// is already in every ancestor. A guaranteed entry gives back what it
// neither spent nor set aside (max − actual − reserved) to its
// reservation's region; what it set aside for guaranteed descendants stays
// held. A released entry stays on its descendants' paths: children that
// outlive it keep charging through it, under its ceiling, as admitted
// spend. A resume reopens the chain's released entry (Admit with reopen),
// as an admitted entry.
//
// Charges are idempotent by key (the worker uses "<thread>:turn:<n>"): a
// key is applied once, across the whole path, and a retry returns the
// first outcome, which the entry's hash keeps in a field "charge:<key>"
// (read and written by the same HMGET and HSET as the amounts).
// ReportActual is an absolute, monotonic report of an entry's total own
// spend; it applies only the part not yet charged.
package ledger

// Package ledger is spool's hierarchical budget ledger: one Redis hash per
// thread, every change one Lua script (one round trip, EVALSHA).
//
// Amounts are USD in the API and integer nano-USD (1e-9 USD) in Redis: an
// amount is rounded to the nearest nano-USD (math.Round(usd*1e9)), so sums
// are exact and never drift. An amount must be finite, non-negative and at
// most MaxAmount (1e6 USD), which keeps every sum below 2^53 where Lua's
// numbers are exact integers.
//
// An entry holds:
//
//	max       the budget ceiling (root: registered; child: what it reserved)
//	reserved  budget handed to descendants that have not released yet
//	actual    spend: the thread's own charges plus its released descendants'
//	own       the thread's own accepted charges
//	overrun   the thread's own charges that did not fit (refused spend)
//	status    active until Release, then the final status
//
// The invariant actual + reserved ≤ max holds for every entry at every
// moment:
//
//   - Reserve(child, parent, a) succeeds only when a ≤ parent.max −
//     parent.reserved − parent.actual; then parent.reserved += a and the
//     child gets max = a.
//
//   - Charge and ReportActual add to actual at most max − reserved − actual.
//     A charge that does not fit is clamped: the part that fits is accepted,
//     the rest is added to overrun, and a spend_exceeded *thread.LimitError
//     is returned so that the thread stops. Clamping (rather than refusing
//     the whole charge) records the truth: the money of a model call that
//     has already been made is spent up to the ceiling, and the overrun is
//     visible on the entry.
//
//   - Release(child) applies one delta to the parent: reserved += child.reserved
//     − child.max (the unused reservation comes back, the child's own
//     outstanding grants stay held), actual += child.actual. The delta never
//     increases actual + reserved. If the parent has itself already released,
//     the same delta continues to its parent, and so on up to the first
//     ancestor still active (or the root). So every released entry shows the
//     totals of its subtree, and once every thread of a tree has released,
//     root.actual is the sum of every thread's own charges and root.reserved
//     is 0.
//
//     root (max 1.00)                         reserve B 0.30 from A
//     A  reserved 0.30 ──────────────▶ B (max 0.30, actual 0.12)
//     release B: A.reserved −= 0.30,
//     A.actual   += 0.12
//
// Charges are idempotent by key (the worker uses "<thread>:<turn>"): a key
// is applied once and a retry returns the first outcome, which the entry's
// hash keeps in a field "charge:<key>" (read and written by the same HMGET
// and HSET as the amounts). ReportActual is an
// absolute, monotonic report of a thread's total own spend; it applies only
// the part not yet charged.
package ledger

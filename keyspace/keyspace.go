// Package keyspace builds every Redis key spool uses, in one place.
//
// All of spool's own keys (registry, chains, ledger, spawn counters, cancel
// flags, wake-up bookkeeping) carry one hash tag, "{" + Namespace + "}", so
// every multi-key Lua script touches a single Redis Cluster slot. asynq's
// own keys are asynq's business: it tags them by queue name.
//
// One slot for all of spool's state is a deliberate trade: a thread's
// scripts reach up its ancestor chain and across its children, and the
// ancestors of a thread are not known before it is spawned, so per-tree
// tags would need the tree's root in every thread id. The state is small and
// hot (a few hashes per thread); one Redis node serves it at tens of
// thousands of scripts per second (see BENCHMARKS.md), far above what a
// fleet of LLM workers asks for. Tests isolate themselves with a random
// namespace.
package keyspace

import "strings"

// DefaultNamespace is the namespace used when none is configured.
const DefaultNamespace = "spool"

// Space builds keys for one namespace.
type Space struct {
	ns     string
	prefix string // "spool:{ns}:"
}

// New returns the key space for namespace ns ("" means DefaultNamespace).
func New(ns string) Space {
	if ns == "" {
		ns = DefaultNamespace
	}
	ns = strings.NewReplacer("{", "", "}", "").Replace(ns)
	return Space{ns: ns, prefix: "spool:{" + ns + "}:"}
}

// Namespace is the space's namespace.
func (s Space) Namespace() string { return s.ns }

// Prefix is the common prefix of every key of this space.
func (s Space) Prefix() string { return s.prefix }

// Thread is the registry hash of one thread.
func (s Space) Thread(id string) string { return s.prefix + "thread:" + id }

// Threads is a sorted set of every thread id, scored by creation time (ms).
func (s Space) Threads() string { return s.prefix + "threads" }

// Active is the set of non-terminal thread ids.
func (s Space) Active() string { return s.prefix + "active" }

// Children is the set of child ids of a parent.
func (s Space) Children(parent string) string { return s.prefix + "children:" + parent }

// Forks is the set of the ids of the threads forked from a thread
// (`spool thread fork`).
func (s Space) Forks(id string) string { return s.prefix + "forks:" + id }

// Spawns is the counter of children spawned by a parent.
func (s Space) Spawns(parent string) string { return s.prefix + "spawns:" + parent }

// Events is the pub/sub channel on which status changes are published as
// "thread_id status" (for the threads' waiters).
func (s Space) Events() string { return s.prefix + "events" }

// Control is the pub/sub channel of requests to the workers running a
// thread: "thread_id cancel" (a cancel request) and "thread_id follow"
// (someone follows its transcript live). Apart from the events, so a
// fleet's workers do not each receive every thread's status changes.
func (s Space) Control() string { return s.prefix + "control" }

// Live is the pub/sub channel on which a followed thread's worker
// publishes each transcript event line as it is appended (Registry.Live).
func (s Space) Live(id string) string { return s.prefix + "live:" + id }

// Ledger is the budget ledger hash of one thread.
func (s Space) Ledger(id string) string { return s.prefix + "ledger:" + id }

// Cancel is the cancellation flag of a thread.
func (s Space) Cancel(id string) string { return s.prefix + "cancel:" + id }

// Waits is the set of child ids a waiting thread still waits for.
func (s Space) Waits(id string) string { return s.prefix + "waits:" + id }

// Decisions is the hash of the people's decisions on a thread's tool calls
// that wait for approval: call id → decision JSON.
func (s Space) Decisions(id string) string { return s.prefix + "decisions:" + id }

// AwaitingApproval is the set of thread ids that wait for a decision on
// some tool call (`spool thread approvals` lists them).
func (s Space) AwaitingApproval() string { return s.prefix + "awaiting_approval" }

// Inbox is the list of user messages queued for a thread (`spool thread
// send`, `interrupt`), delivered before its next model call.
func (s Space) Inbox(id string) string { return s.prefix + "inbox:" + id }

// RateLimit is the Redis state of one fleet-wide rate-limit budget (rule
// id, config.RateRule.ID) of one kind: "req", "in", "out" (GCRA's
// theoretical arrival time), "conc" (the concurrency leases, a sorted
// set), "block" (blocked until, after a provider's 429), "wait" (the
// callers waiting, by priority), "stats" (the budget's counters, a hash
// of fixed fields: admitted, throttled, tokens reserved and used).
func (s Space) RateLimit(rule, kind string) string {
	return s.prefix + "ratelimit:" + rule + ":" + kind
}

// RateLimitBudgets is the hash of every rate-limit budget the fleet has
// admitted calls against: budget id → its API key fingerprint ("" unless
// the rule has per_key), so a per-key budget can be found again.
func (s Space) RateLimitBudgets() string { return s.prefix + "ratelimit-budgets" }

// Lease is the activation lease of a thread (who runs it now).
func (s Space) Lease(id string) string { return s.prefix + "lease:" + id }

// Lock is a named short-lived lock (scheduler ticks, housekeeping).
func (s Space) Lock(name string) string { return s.prefix + "lock:" + name }

// Housekeeping is the hash in which housekeeping keeps what it last saw of
// Redis itself (its run id, a canary counter), to tell when Redis lost
// writes (scheduler's reconciliation).
func (s Space) Housekeeping() string { return s.prefix + "housekeeping" }

// Waiters is the set of thread ids waiting on the continuation chain whose
// root is chainRoot.
func (s Space) Waiters(chainRoot string) string { return s.prefix + "waiters:" + chainRoot }

// Queue is the asynq queue name of a spool queue. In the default namespace
// it is the name itself (asynq keeps it under "asynq:{name}:"); in any other
// namespace it is "<namespace>.<name>", so two spool deployments (or two
// tests) sharing one Redis never take each other's tasks.
func (s Space) Queue(name string) string {
	if s.ns == DefaultNamespace {
		return name
	}
	return s.ns + "." + name
}

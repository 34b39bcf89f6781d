// Package keyspace builds every Redis key spool uses, in one place.
//
// Every multi-key Lua script of spool touches a single Redis Cluster slot:
// the keys it names share one hash tag. A space has one of two layouts.
//
// One slot (New, Shards() == 1): every key carries the tag "{" +
// Namespace + "}". Simple, and what a single Redis node or a Sentinel
// pair wants; on a Cluster it puts all of spool's state on one node.
//
// Sharded (NewSharded, n shards): the keys of one thread (its record,
// ledger entry, lease, children, waits, ...) carry the tag of its tree's
// shard, "{" + Namespace + ":" + tag + "}", where the shard is the
// thread id's tree code (thread.TreeCode) modulo n. A child, a
// continuation and a fork are named with their tree's code
// (thread.NewIDIn), so a whole tree lives in one slot and the scripts
// that walk it (a charge up the ancestors, a parent's wait on its
// children, a handoff to a continuation) stay single-slot. The indexes
// that were global (the thread list, the active set, the approvals
// queue) and the pub/sub channels a script publishes on are one per
// shard, in the shard's slot; readers merge them (AllThreads, ...). Each
// shard's tag is chosen so the shards' slots spread evenly over the 16384
// slots, so a Cluster whose nodes own even slot ranges gets an even share
// of the trees. What stays global, on the namespace's own tag: locks, the
// housekeeping hash, the layout record, and the fleet-wide rate-limit
// budgets (their scripts touch nothing else). One key belongs to no
// namespace: FunctionsSeen, as the Function libraries it tracks are the
// server's.
//
// The layout of a namespace is fixed when it is first used (package
// registry's Layout records it in Redis): every process of a deployment
// reads the same. Tests isolate themselves with a random namespace.
package keyspace

import (
	"strconv"
	"strings"

	"github.com/spool-run/spool/thread"
)

// DefaultNamespace is the namespace used when none is configured.
const DefaultNamespace = "spool"

// MaxShards bounds a sharded space's shard count (NewSharded): a shard is
// a tree code modulo the count, and there are thread.TreeCodes codes.
const MaxShards = thread.TreeCodes

// Space builds keys for one namespace.
type Space struct {
	ns     string
	prefix string   // "spool:{ns}:"
	shards []string // per shard, "spool:{ns:tag}:"; nil: one slot
}

// New returns the one-slot key space for namespace ns ("" means
// DefaultNamespace).
func New(ns string) Space {
	if ns == "" {
		ns = DefaultNamespace
	}
	ns = strings.NewReplacer("{", "", "}", "").Replace(ns)
	return Space{ns: ns, prefix: "spool:{" + ns + "}:"}
}

// NewSharded returns the sharded key space for namespace ns with n shards,
// a power of two up to MaxShards (so every shard gets as many tree codes);
// n of 1 or less is New(ns).
func NewSharded(ns string, n int) Space {
	s := New(ns)
	if n <= 1 {
		return s
	}
	if n > MaxShards || n&(n-1) != 0 {
		panic("keyspace: shard count " + strconv.Itoa(n) + " is not a power of two up to " + strconv.Itoa(MaxShards))
	}
	s.shards = make([]string, n)
	for i := range s.shards {
		s.shards[i] = "spool:{" + shardTag(s.ns, i, n) + "}:"
	}
	return s
}

// shardTag is the hash tag of shard i of n: "ns:i", spread (with "."
// suffixes) so the shards spread evenly over a Cluster's nodes.
func shardTag(ns string, i, n int) string {
	return spread(ns+":"+strconv.Itoa(i), ".", i, n)
}

// spread is base, or base with the shortest suffix sep + j (j = 1, 2,
// ...) that puts its hash slot in the i-th n-th of the slot space.
func spread(base, sep string, i, n int) string {
	lo, hi := i*slots/n, (i+1)*slots/n
	for j := 0; ; j++ {
		k := base
		if j > 0 {
			k += sep + strconv.Itoa(j)
		}
		if sl := int(Slot(k)); sl >= lo && sl < hi {
			return k
		}
	}
}

// Shards is the number of shards: 1 for a one-slot space.
func (s Space) Shards() int { return max(len(s.shards), 1) }

// ShardOf is the shard of thread id's tree.
func (s Space) ShardOf(id string) int {
	if s.shards == nil {
		return 0
	}
	return thread.TreeCode(id) % len(s.shards)
}

// tp is the prefix of the keys of thread id: its shard's.
func (s Space) tp(id string) string {
	if s.shards == nil {
		return s.prefix
	}
	return s.shards[s.ShardOf(id)]
}

// all is key built with each shard's prefix.
func (s Space) all(key string) []string {
	if s.shards == nil {
		return []string{s.prefix + key}
	}
	out := make([]string, len(s.shards))
	for i, p := range s.shards {
		out[i] = p + key
	}
	return out
}

// Namespace is the space's namespace.
func (s Space) Namespace() string { return s.ns }

// Prefix is the prefix of the namespace's global keys: of every key in a
// one-slot space.
func (s Space) Prefix() string { return s.prefix }

// Thread is the registry hash of one thread.
func (s Space) Thread(id string) string { return s.tp(id) + "thread:" + id }

// Threads is the sorted set of thread ids, scored by creation time (ms),
// that holds id: its shard's (AllThreads lists every shard's).
func (s Space) Threads(id string) string { return s.tp(id) + "threads" }

// AllThreads are every shard's Threads sets.
func (s Space) AllThreads() []string { return s.all("threads") }

// Active is the set of non-terminal thread ids that holds id: its shard's.
func (s Space) Active(id string) string { return s.tp(id) + "active" }

// AllActive are every shard's Active sets.
func (s Space) AllActive() []string { return s.all("active") }

// Children is the set of child ids of a parent.
func (s Space) Children(parent string) string { return s.tp(parent) + "children:" + parent }

// Forks is the set of the ids of the threads forked from a thread
// (`spool thread fork`).
func (s Space) Forks(id string) string { return s.tp(id) + "forks:" + id }

// Spawns is the counter of children spawned by a parent.
func (s Space) Spawns(parent string) string { return s.tp(parent) + "spawns:" + parent }

// Events is the pub/sub channel on which status changes of id (and every
// thread of its shard) are published as "thread_id status" (for the
// threads' waiters); AllEvents are every shard's. A channel is no key, but
// the scripts that publish name it among their KEYS, so it lives in the
// shard's slot.
func (s Space) Events(id string) string { return s.tp(id) + "events" }

// AllEvents are every shard's Events channels.
func (s Space) AllEvents() []string { return s.all("events") }

// Control is the pub/sub channel of requests to the workers running a
// thread: "thread_id cancel" (a cancel request) and "thread_id follow"
// (someone follows its transcript live). Apart from the events, so a
// fleet's workers do not each receive every thread's status changes.
//
// One per shard, as Events.
func (s Space) Control(id string) string { return s.tp(id) + "control" }

// AllControl are every shard's Control channels.
func (s Space) AllControl() []string { return s.all("control") }

// Live is the pub/sub channel on which a followed thread's worker
// publishes each transcript event line as it is appended (Registry.Live).
func (s Space) Live(id string) string { return s.tp(id) + "live:" + id }

// Deltas is the pub/sub channel on which a followed thread's worker
// publishes the model's text as it is written (Registry.Deltas): never
// stored.
func (s Space) Deltas(id string) string { return s.tp(id) + "deltas:" + id }

// Ledger is the budget ledger hash of one thread.
func (s Space) Ledger(id string) string { return s.tp(id) + "ledger:" + id }

// Cancel is the cancellation flag of a thread.
func (s Space) Cancel(id string) string { return s.tp(id) + "cancel:" + id }

// Waits is the set of child ids a waiting thread still waits for.
func (s Space) Waits(id string) string { return s.tp(id) + "waits:" + id }

// Decisions is the hash of the people's decisions on a thread's tool calls
// that wait for approval: call id → decision JSON.
func (s Space) Decisions(id string) string { return s.tp(id) + "decisions:" + id }

// AwaitingApproval is the set of thread ids that wait for a decision on
// some tool call (`spool thread approvals` lists them) that holds id: its
// shard's.
func (s Space) AwaitingApproval(id string) string { return s.tp(id) + "awaiting_approval" }

// AllAwaitingApproval are every shard's AwaitingApproval sets.
func (s Space) AllAwaitingApproval() []string { return s.all("awaiting_approval") }

// Inbox is the list of user messages queued for a thread (`spool thread
// send`, `interrupt`), delivered before its next model call.
func (s Space) Inbox(id string) string { return s.tp(id) + "inbox:" + id }

// Messages is the list of the messages kept for a graph run (`spool
// graph send`), which its wait_message nodes take, oldest first.
func (s Space) Messages(id string) string { return s.tp(id) + "messages:" + id }

// MessageIDs is the hash of the ids of the messages a graph run was sent
// (message id → seq), by which a send repeated is answered as a duplicate.
func (s Space) MessageIDs(id string) string { return s.tp(id) + "message_ids:" + id }

// TenantThreads is the sorted set of the ids of tenant's runs, scored by
// creation time (ms), that holds id: its shard's (AllTenantThreads lists
// every shard's). `thread list --tenant` reads it instead of every
// record.
func (s Space) TenantThreads(tenant, id string) string { return s.tp(id) + "threads:tenant:" + tenant }

// AllTenantThreads are every shard's TenantThreads sets of tenant.
func (s Space) AllTenantThreads(tenant string) []string { return s.all("threads:tenant:" + tenant) }

// TagThreads is the sorted set of the ids of the runs that carry tag
// ("key=value"), scored by creation time (ms), that holds id: its
// shard's (AllTagThreads lists every shard's). `thread list --tag` reads
// it instead of every record.
func (s Space) TagThreads(tag, id string) string { return s.tp(id) + "threads:tag:" + tag }

// AllTagThreads are every shard's TagThreads sets of tag.
func (s Space) AllTagThreads(tag string) []string { return s.all("threads:tag:" + tag) }

// DirectiveThreads is the sorted set of the ids of the runs of directive
// (a graph run's: its graph), scored by creation time (ms), that holds
// id: its shard's (AllDirectiveThreads lists every shard's).
func (s Space) DirectiveThreads(directive, id string) string {
	return s.tp(id) + "threads:directive:" + directive
}

// AllDirectiveThreads are every shard's DirectiveThreads sets of
// directive.
func (s Space) AllDirectiveThreads(directive string) []string {
	return s.all("threads:directive:" + directive)
}

// DirectiveIndexed is set once every run registered before the
// directive index existed is in it (Registry.BackfillDirectiveIndex):
// until then a listing by directive reads every run.
func (s Space) DirectiveIndexed() string { return s.prefix + "directive_indexed" }

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
func (s Space) Lease(id string) string { return s.tp(id) + "lease:" + id }

// Layout is the string that records a namespace's layout: its shard
// count (package registry's Layout).
func (s Space) Layout() string { return s.prefix + "layout" }

// Lock is a named short-lived lock (scheduler ticks, housekeeping).
func (s Space) Lock(name string) string { return s.prefix + "lock:" + name }

// Housekeeping is the hash in which housekeeping keeps what it last saw of
// Redis itself (its run id, a canary counter), to tell when Redis lost
// writes (scheduler's reconciliation).
func (s Space) Housekeeping() string { return s.prefix + "housekeeping" }

// FunctionsSeen is the hash, one per Redis server (or Cluster) and outside
// every namespace as Redis Functions are, of when a process last used each
// of spool's Function libraries (field: the library's name, value: unix
// seconds), so that housekeeping deletes the libraries no deployed version
// uses any more (package redisfn's Prune).
const FunctionsSeen = "spool:functions"

// Waiters is the set of thread ids waiting on the continuation chain whose
// root is chainRoot.
func (s Space) Waiters(chainRoot string) string { return s.tp(chainRoot) + "waiters:" + chainRoot }

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

// MaxLanes bounds how many asynq queues carry one spool queue in a
// sharded space (Lanes).
const MaxLanes = 8

// Lanes is how many asynq queues carry one spool queue: 1 in a one-slot
// space; in a sharded one, min(Shards, MaxLanes). asynq keeps a queue's
// keys under one hash tag, its name: one queue is one Cluster node's
// load, so a sharded space spreads each spool queue over lanes whose names
// fall evenly on the slot space (as the shards' tags do), a thread's
// activations on the lane of its tree's shard.
func (s Space) Lanes() int { return min(s.Shards(), MaxLanes) }

// QueueOf is the asynq queue of thread id's activations on spool queue
// name: Queue(name), or in a sharded space the lane of id's shard.
func (s Space) QueueOf(name, id string) string {
	if s.Lanes() == 1 {
		return s.Queue(name)
	}
	return s.lane(name, s.ShardOf(id)%s.Lanes())
}

// QueueLanes are the asynq queues of spool queue name (every lane), the
// ones a worker serving name listens on.
func (s Space) QueueLanes(name string) []string {
	if s.Lanes() == 1 {
		return []string{s.Queue(name)}
	}
	out := make([]string, s.Lanes())
	for i := range out {
		out[i] = s.lane(name, i)
	}
	return out
}

// QueueName is the spool queue of asynq queue aq (a lane's or a queue's
// name) in this space, ok false for another namespace's.
func (s Space) QueueName(aq string) (string, bool) {
	base, _, laned := strings.Cut(aq, "~")
	var name string
	if s.ns == DefaultNamespace {
		if strings.Contains(base, ".") {
			return "", false
		}
		name = base
	} else {
		var ok bool
		if name, ok = strings.CutPrefix(base, s.ns+"."); !ok {
			return "", false
		}
	}
	if !laned {
		return name, s.Lanes() == 1
	}
	for _, l := range s.QueueLanes(name) {
		if l == aq {
			return name, true
		}
	}
	return "", false
}

// lane is the name of lane i of spool queue name: Queue(name) + "~i",
// spread (with "~" suffixes) as the shards' tags are.
func (s Space) lane(name string, i int) string {
	return spread(s.Queue(name)+"~"+strconv.Itoa(i), "~", i, s.Lanes())
}

// slots is the number of Redis Cluster hash slots.
const slots = 16384

// Slot is the Redis Cluster slot of key: the CRC16 (XMODEM) of its hash
// tag (the part between the first "{" and the next "}", when not empty),
// else of the whole key.
func Slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % slots
}

// Tenant keys. A tenant's admission state is one Cluster slot of its own,
// so tenants spread over a Cluster's nodes by their tags while each
// tenant's scripts stay single-slot: in a sharded space its keys carry
// the tag "{" + Namespace + ":t:" + tenant + "}"; in a one-slot space they
// carry the namespace's tag, as every key does, under "adm:t:<tenant>:".

// TenantPrefix is the prefix of tenant's keys.
func (s Space) TenantPrefix(tenant string) string {
	if s.shards == nil {
		return s.prefix + "adm:t:" + tenant + ":"
	}
	return "spool:{" + s.ns + ":t:" + tenant + "}:"
}

// Idempotency is the record of one idempotency key of tenant (a hash:
// fingerprint, run id, created at; it expires after the retention),
// named by keyHash, the hex SHA-256 of the key, so a key of any bytes
// makes a key of a fixed shape.
func (s Space) Idempotency(tenant, keyHash string) string {
	return s.TenantPrefix(tenant) + "idem:" + keyHash
}

// IdempotentReplays is the hash that counts the starts that found their
// idempotency key's run: "<tenant> <surface>" → count (the monitor's
// spool_idempotent_replays_total).
func (s Space) IdempotentReplays() string { return s.prefix + "idempotent-replays" }

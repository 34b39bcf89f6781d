package orchestrator

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
)

// The names of the floor that the packages above the orchestrator use,
// given here so that none of them but the worker imports registry, ledger
// or queue (TestFloor): each is the floor's own value or type under a
// second name, so errors.Is matches a sentinel whichever name it is
// tested with, and a record is a spooltype.Record either way.

// The errors the operations return from the registry and the ledger.
var (
	// ErrNotFound means there is no record of the thread
	// (registry.ErrNotFound).
	ErrNotFound = registry.ErrNotFound
	// ErrParentNotFound refuses a start under a parent that is not
	// registered (registry.ErrParentNotFound).
	ErrParentNotFound = registry.ErrParentNotFound
	// ErrConflict refuses a write at a version that is no longer current
	// (registry.ErrConflict).
	ErrConflict = registry.ErrConflict
	// ErrFinished refuses an operation on a thread that has ended
	// (registry.ErrFinished).
	ErrFinished = registry.ErrFinished
	// ErrNotPending means no such tool call waits for a decision
	// (registry.ErrNotPending).
	ErrNotPending = registry.ErrNotPending
	// ErrReleased refuses a charge or a reservation on a chain whose
	// budget was released: it ended (ledger.ErrReleased).
	ErrReleased = ledger.ErrReleased
	// ErrLedgerNotFound means the chain has no ledger entry
	// (ledger.ErrNotFound).
	ErrLedgerNotFound = ledger.ErrNotFound
)

// Names of the registry's records and reads.
const (
	// DecisionApprove and DecisionDeny are a person's decisions on a tool
	// call that waits for approval (Decide).
	DecisionApprove = registry.DecisionApprove
	DecisionDeny    = registry.DecisionDeny
	// WaitingForApproval, WaitingForRateLimit and WaitingForSleep are
	// reasons a thread waits (Record.WaitingFor).
	WaitingForApproval  = registry.WaitingForApproval
	WaitingForRateLimit = registry.WaitingForRateLimit
	WaitingForSleep     = registry.WaitingForSleep
	// WaitingForMessage: a graph run waits at a wait_message node
	// (SendGraphMessage).
	WaitingForMessage = registry.WaitingForMessage
	// ArtifactsDeletedField is the record field (Record.Extra) that
	// retention sets when it deleted a thread's artifacts
	// (Housekeeper.DeleteArtifacts).
	ArtifactsDeletedField = registry.ArtifactsDeletedField
)

type (
	// Filter selects the threads Threads lists.
	Filter = registry.Filter
	// Window is a range of ThreadsByTime's index.
	Window = registry.Window
	// Cursor is where a page of a listing ended (ThreadsPage).
	Cursor = registry.Cursor
	// Reconciliation is what Housekeeper.Reconcile raises.
	Reconciliation = registry.Reconciliation
	// Reconciled is what Housekeeper.Reconcile did.
	Reconciled = registry.Reconciled
	// Enqueuer enqueues activations on asynq (New).
	Enqueuer = queue.Enqueuer
)

// ParseCursor reads a listing's cursor as ThreadsPage gave it.
func ParseCursor(s string) (Cursor, error) { return registry.ParseCursor(s) }

// IDs are the thread ids of a read of ThreadsByTime.
func IDs(zs []redis.Z) []string { return registry.IDs(zs) }

// DefaultQueue is the queue of a thread started without one.
const DefaultQueue = queue.DefaultQueue

// CheckQueueName refuses a queue name no worker could serve
// (queue.CheckName), as Start does.
func CheckQueueName(name string) error { return queue.CheckName(name) }

// MaxAmount is the largest amount (USD) a budget holds: the most a spend
// limit may be.
const MaxAmount = ledger.MaxAmount

// DefaultShards is the shard count of a new namespace on rdb: one, or
// registry.DefaultClusterShards on a Redis Cluster.
func DefaultShards(rdb redis.UniversalClient) int { return registry.DefaultShards(rdb) }

// Layout is the key space of namespace ks on rdb as it was created, or as
// it is created now with want shards (registry.Layout): Config.Shards.
func Layout(ctx context.Context, rdb redis.Cmdable, ks keyspace.Space, want int, strict bool) (keyspace.Space, error) {
	return registry.Layout(ctx, rdb, ks, want, strict)
}

package worker

import (
	"context"
	"time"

	"github.com/hibiken/asynq"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// The services an activation uses, as the small interfaces it needs of
// them, declared here where they are used: *registry.Registry,
// *registry.Activations, *ledger.Ledger and *queue.Enqueuer implement
// them. An activation takes them once, from the worker's orchestrator
// (depsOf), so its steps read s.reg, s.acts, s.ledger, s.enq and s.store,
// and an in-process test can put a fake in any of them (Worker.wrapDeps).

// threadRecords is what an activation reads and writes of thread records.
type threadRecords interface {
	Get(ctx context.Context, id string) (*registry.Record, error)
	GetMany(ctx context.Context, ids []string) ([]*registry.Record, error)
	Statuses(ctx context.Context, ids []string) (map[string]thread.Status, error)
	GetChain(ctx context.Context, id string) ([]*registry.Record, error)
	ListChildren(ctx context.Context, parent string) ([]*registry.Record, error)
	ResolveChain(ctx context.Context, id string) (string, error)
	// Commit records a checkpoint's changes at the expected version.
	Commit(ctx context.Context, id string, expectedVersion int64, ch registry.Changes) (int64, error)
	// TurnSignals reads the cancel and pause flags and the count of
	// queued messages.
	TurnSignals(ctx context.Context, id string) (registry.Signals, error)
	Inbox(ctx context.Context, id string, after int64) ([]registry.InboxMessage, error)
	TrimInbox(ctx context.Context, id string, seq int64) error
	// Messages and TrimMessages read and drop a graph run's messages.
	Messages(ctx context.Context, id, name string, after int64) ([]registry.GraphMessage, error)
	TrimMessages(ctx context.Context, id, name string, seq int64) error
	PublishLive(ctx context.Context, id string, line []byte) error
	// PublishDeltas publishes pieces of the model's text (deltas.go).
	PublishDeltas(ctx context.Context, id string, deltas [][]byte) error
	// Subscribe delivers status events (a graph run's hold on its
	// children).
	Subscribe(ctx context.Context) (*registry.Subscription, error)
}

// activationLeases is what an activation does with its thread's lease
// and its waits: claim and keep the lease, suspend on children, an
// approval or a time, read and clear approval decisions.
type activationLeases interface {
	// ClaimAdmitted claims the thread for an activation; act is its
	// admission id ("": admission off).
	ClaimAdmitted(ctx context.Context, id, reason string, seq int64, token, taskID string, ttl time.Duration, act string) (registry.Claim, error)
	Heartbeat(ctx context.Context, id, token string, ttl time.Duration) error
	Release(ctx context.Context, id, token string) error
	Suspend(ctx context.Context, id string, version int64, targets []registry.WaitTarget) (suspended bool, seq int64, err error)
	SuspendAny(ctx context.Context, id string, version int64, targets []registry.WaitTarget) (suspended bool, seq int64, err error)
	SuspendUntil(ctx context.Context, id string, version int64, reason string, wakeAt time.Time) (int64, error)
	SuspendForApproval(ctx context.Context, id string, version int64, pending []registry.PendingApproval) (seq, open int64, err error)
	SuspendForMessage(ctx context.Context, id string, version int64, name string, after int64, wakeAt time.Time) (int64, error)
	// PauseSelf pauses the thread at a boundary when a pause is
	// requested (0: none is).
	PauseSelf(ctx context.Context, id string, version int64) (int64, error)
	Decisions(ctx context.Context, id string) (map[string]registry.Decision, error)
	ClearApprovals(ctx context.Context, id string) error
}

// budgetLedger charges a thread's spend and reads its room.
type budgetLedger interface {
	Charge(ctx context.Context, id string, path []string, key string, amount float64) (ledger.Charged, error)
	Room(ctx context.Context, id string, path []string) (ledger.Room, error)
}

// activationQueue enqueues a thread's next activation.
type activationQueue interface {
	Enqueue(ctx context.Context, a queue.Activation, seq int64, q string, opts ...asynq.Option) error
}

// deps are the services of one activation.
type deps struct {
	reg     threadRecords
	acts    activationLeases
	ledger  budgetLedger
	enq     activationQueue
	store   blobstore.Store
	signer  *transcript.Signer
	keyring *transcript.Keyring
	// leaseTTL is how long a lease holds without a heartbeat.
	leaseTTL time.Duration
}

// depsOf returns o's services (orchestrator.Services).
func depsOf(o *orchestrator.Runtime) deps {
	sv := o.Services()
	return deps{reg: sv.Registry, acts: sv.Activations, ledger: sv.Ledger, enq: sv.Enqueuer, store: sv.Store,
		signer: sv.Signer, keyring: sv.Keyring, leaseTTL: sv.LeaseTTL}
}

// deps returns the services of an activation: the orchestrator's, or
// what a test put in their place (wrapDeps).
func (w *Worker) deps() deps {
	d := depsOf(w.o)
	if w.wrapDeps != nil {
		d = w.wrapDeps(d)
	}
	return d
}

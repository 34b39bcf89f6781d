package registry

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/internal/reply"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/thread"
)

// ErrNotClaimable is returned by Claim when the activation must not run: the
// thread is finished, is run by a live activation elsewhere, or the wake-up
// is stale. The caller drops the task.
var ErrNotClaimable = errors.New("activation not claimable")

// ErrLeaseLost is returned by Heartbeat when another activation has taken
// the thread over.
var ErrLeaseLost = errors.New("activation lease lost")

// Activations claims threads for a worker and keeps the claim alive.
//
// A claim is a lease: a key with a TTL holding the claimer's token, renewed
// by Heartbeat. A worker that dies stops renewing; once the lease has
// lapsed, the recoverer (Orphans) re-enqueues the thread and the next claim
// takes it over, bumping the thread's version so the dead worker's writes,
// should it wake up, fail their version check.
type Activations struct {
	rdb *redisfn.Client
	ks  keyspace.Space
	now func() time.Time
}

// NewActivations returns the activation store on rdb (shared when it is a
// *redisfn.Client, else wrapped in one).
func NewActivations(rdb redis.UniversalClient, ks keyspace.Space, now func() time.Time) *Activations {
	if now == nil {
		now = time.Now
	}
	return &Activations{rdb: redisfn.NewClient(rdb), ks: ks, now: now}
}

// claimScript starts an activation (claim.lua).
var claimScript = redisfn.New("claim", "", claimLua)

//go:embed claim.lua
var claimLua string

// Claim is what Claim returns.
type Claim struct {
	Version    int64 // the lease's version: every commit of this activation names it
	Activation int64 // 1 for the first activation of the thread
	Token      string
	Record     *Record // the thread as claimed
	// Before is the admission id of the thread's admitted activation
	// before this one ("": none, or a claim without admission) and
	// BeforeSpent what it spent (nano-dollars; -1: unknown): what settles
	// its allowance if its lease was reaped (ClaimAdmitted).
	Before      string
	BeforeSpent int64
}

// Claim starts an activation of thread id for a task with the given reason
// and sequence number. It succeeds when:
//   - reason start or requeue (housekeeping's new task for a created
//     thread whose start task was lost): the thread is created;
//   - reason wake/timeout: the thread is waiting under suspension seq;
//   - reason recover: the thread is running at version seq and its lease has lapsed;
//   - any reason: the thread is running under this very task (asynq
//     redelivered it) and its lease has lapsed.
//
// Otherwise it returns ErrNotClaimable (wrapped, naming the status).
func (a *Activations) Claim(ctx context.Context, id, reason string, seq int64, token, taskID string, ttl time.Duration) (Claim, error) {
	return a.ClaimAdmitted(ctx, id, reason, seq, token, taskID, ttl, "")
}

// ClaimAdmitted is Claim of an activation that admission granted under
// admission id act: the claim notes act and the thread's spend, and
// returns the activation before it with what it spent (Claim.Before).
func (a *Activations) ClaimAdmitted(ctx context.Context, id, reason string, seq int64, token, taskID string, ttl time.Duration, act string) (Claim, error) {
	keys := []string{a.ks.Thread(id), a.ks.Lease(id), a.ks.Active(id), a.ks.Events(id)}
	res, err := claimScript.Run(ctx, a.rdb, keys, reason, seq, token, ttl.Milliseconds(), a.now().UTC().Format(time.RFC3339Nano), taskID, act).Slice()
	if err != nil {
		return Claim{}, scriptError(fmt.Sprintf("claim thread %q", id), id, 0, err)
	}
	if len(res) != 5 {
		return Claim{}, reply.Unexpected("claim", res)
	}
	rec, err := parseFlat(res[2])
	if err != nil {
		return Claim{}, err
	}
	before, _ := res[3].(string)
	return Claim{Version: reply.Int(res[0]), Activation: reply.Int(res[1]), Token: token, Record: rec,
		Before: before, BeforeSpent: reply.Int(res[4])}, nil
}

// heartbeatScript renews a lease held by token (heartbeat.lua).
var heartbeatScript = redisfn.New("heartbeat", "", heartbeatLua)

//go:embed heartbeat.lua
var heartbeatLua string

// Heartbeat renews the lease; ErrLeaseLost when another activation holds it.
func (a *Activations) Heartbeat(ctx context.Context, id, token string, ttl time.Duration) error {
	n, err := heartbeatScript.Run(ctx, a.rdb, []string{a.ks.Lease(id)}, token, ttl.Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("heartbeat %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("thread %q: %w", id, ErrLeaseLost)
	}
	return nil
}

// releaseScript drops a lease held by token (as finalize.lua does with
// the end of a thread). KEYS[1] lease; ARGV[1] token. Returns 1, or 0
// when another token holds it (release_lease.lua).
var releaseScript = redisfn.New("release_lease", "", releaseLua)

//go:embed release_lease.lua
var releaseLua string

// Release drops the lease so that a retry of the task can claim at once.
func (a *Activations) Release(ctx context.Context, id, token string) error {
	return releaseScript.Run(ctx, a.rdb, []string{a.ks.Lease(id)}, token).Err()
}

// LeaseHeld reports whether thread id's activation lease is alive.
func (a *Activations) LeaseHeld(ctx context.Context, id string) (bool, error) {
	n, err := a.rdb.Exists(ctx, a.ks.Lease(id)).Result()
	return n == 1, err
}

// RetryAtField is the thread hash field (Record.Extra) holding, in RFC
// 3339, the time until which a running thread without a lease waits on
// purpose: its worker handed it back to wait out a model call's retry
// time, with an activation scheduled for then. A time past by more than a
// few seconds' grace means nothing.
const RetryAtField = "retry_at"

// retryGrace is how long after its retry time a handed-back thread is
// still no orphan: its activation is due in the next whole second (asynq
// schedules by seconds) and reaches its queue within the worker's
// DelayedTaskCheckInterval.
const retryGrace = 5 * time.Second

// Orphan is a running thread whose activation lease has lapsed.
type Orphan struct {
	ThreadID string
	Version  int64
	Queue    string
}

// Orphans lists active threads in status running whose lease has lapsed:
// their worker died or was cut off. The caller re-enqueues each with reason
// "recover" and the version seen, which Claim checks. A thread handed back
// until a retry time (RetryAtField) is no orphan until then.
func (a *Activations) Orphans(ctx context.Context) ([]Orphan, error) {
	ids, err := members(ctx, a.rdb, a.ks.AllActive())
	if err != nil {
		return nil, err
	}
	var out []Orphan
	for _, id := range ids {
		pipe := a.rdb.Pipeline()
		h := pipe.HMGet(ctx, a.ks.Thread(id), "status", "version", "queue", RetryAtField)
		ex := pipe.Exists(ctx, a.ks.Lease(id))
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		vals := h.Val()
		if len(vals) < 4 || vals[0] != string(thread.StatusRunning) || ex.Val() == 1 {
			continue
		}
		if s, _ := vals[3].(string); s != "" {
			if at, err := time.Parse(time.RFC3339Nano, s); err == nil && at.Add(retryGrace).After(a.now()) {
				continue // handed back until then, with an activation scheduled
			}
		}
		v, _ := strconv.ParseInt(fmt.Sprint(vals[1]), 10, 64)
		q, _ := vals[2].(string)
		out = append(out, Orphan{ThreadID: id, Version: v, Queue: q})
	}
	return out, nil
}

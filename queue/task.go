package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hibiken/asynq"

	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/telemetry"
)

// TypeActivate is the asynq task type of a thread activation: one task runs
// a thread's turns until it finishes, hands off, or suspends to wait.
const TypeActivate = "spool:thread:activate"

// DefaultQueue is the queue threads go to when none is named.
const DefaultQueue = "default"

// Activation is the payload of a TypeActivate task.
type Activation struct {
	ThreadID string `json:"thread_id"`
	// Reason says why the thread is (re)activated: "start", "wake" (the
	// children it waited for finished), "timeout" (a wait timed out),
	// "recover" (housekeeping found it orphaned), "requeue" (housekeeping
	// found it created with its start task lost).
	Reason string `json:"reason"`
	// Seq is the registry sequence number the activation is for: the
	// suspension number of a wake or timeout, the version of a recover;
	// a requeue's is the time of the housekeeping pass (Unix ms), so that
	// each pass's task is a new one.
	Seq int64 `json:"seq,omitempty"`
	// TraceParent is the W3C traceparent of the span that enqueued the
	// activation (Enqueue takes it from its context); the activation's
	// span links to it. The span the activation belongs to is its
	// thread's, in the registry (package telemetry).
	TraceParent string `json:"traceparent,omitempty"`
	// Epoch counts the tasks of this activation a worker took and
	// admission parked (package admission): the task id of the next one
	// ends in "~<epoch>", so that it is a new task, not the one asynq
	// still holds as done. 0 for every activation admission never
	// parked at a worker.
	Epoch int `json:"epoch,omitempty"`
	// Ticket is what admission needs to admit the activation at a worker
	// (a delayed task, a redelivery, a task enqueued while admission was
	// off): nil when the enqueuer had none, and the worker reads the
	// run's record instead.
	Ticket *Ticket `json:"adm,omitempty"`
}

// Ticket is an activation's admission request as its task carries it:
// the run's tenant, queue, priority and concurrency keys (RULE=VALUE, as
// admission keeps them), the class of the activation (1 for a root
// chain's first, 0 for any other) and its root chain, and the
// generation of the tenant's state that granted it (0: not granted).
type Ticket struct {
	Tenant string `json:"t"`
	// Queue is the activation's spool queue.
	Queue    string   `json:"q,omitempty"`
	Priority int      `json:"p"`
	Class    int      `json:"c"`
	Keys     []string `json:"k,omitempty"`
	Root     string   `json:"root,omitempty"`
	Gen      int64    `json:"g,omitempty"`
}

// NewActivation returns the task for an activation.
//
// The first activation's task id is the thread id itself, so an enqueue is
// never duplicated. Later activations carry the reason and a sequence
// number (the registry version that made them) so that one wake-up is one
// task, however many processes try to enqueue it.
func NewActivation(a Activation, seq int64, opts ...asynq.Option) (*asynq.Task, error) {
	a.Seq = seq
	b, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	base := []asynq.Option{asynq.TaskID(TaskID(a, seq)), asynq.MaxRetry(25), asynq.Retention(time.Hour)}
	return asynq.NewTask(TypeActivate, b, append(base, opts...)...), nil
}

// TaskID is the asynq task id of an activation (NewActivation): its
// ActivationID, then "~<epoch>" when a.Epoch is set.
func TaskID(a Activation, seq int64) string {
	id := ActivationID(a, seq)
	if a.Epoch > 0 {
		id += "~" + strconv.Itoa(a.Epoch)
	}
	return id
}

// ActivationID names an activation: the thread id for its start,
// "<thread id>@<reason>-<seq>" for any other. Admission keeps its
// requests and grants under it.
func ActivationID(a Activation, seq int64) string {
	if a.Reason != "" && a.Reason != "start" {
		return fmt.Sprintf("%s@%s-%d", a.ThreadID, a.Reason, seq)
	}
	return a.ThreadID
}

// ParseActivation decodes a TypeActivate payload.
func ParseActivation(t *asynq.Task) (Activation, error) {
	var a Activation
	if err := json.Unmarshal(t.Payload(), &a); err != nil {
		return a, fmt.Errorf("activation payload: %w", err)
	}
	if a.ThreadID == "" {
		return a, fmt.Errorf("activation payload: no thread_id")
	}
	return a, nil
}

// Enqueuer puts activations on asynq queues.
type Enqueuer struct {
	Client *asynq.Client
	// Keys maps spool queue names to asynq queue names (see
	// keyspace.Space.Queue). The zero value is the default namespace.
	Keys keyspace.Space
}

// keys is the key space of the enqueuer's queue names.
func (e *Enqueuer) keys() keyspace.Space {
	if e.Keys.Namespace() == "" {
		return keyspace.New("")
	}
	return e.Keys
}

// ErrNotEnqueued marks an enqueue that Redis did not take: asynq's client
// words every failure of Redis (a refused connection in a failover as much
// as a timeout) as text, which loses the network error's type, so an
// activation's enqueue that fails is marked with it. It is an
// infrastructure failure, to try again, never a refusal.
var ErrNotEnqueued = errors.New("redis did not take the task")

// Enqueue enqueues an activation on queue q. A task that is already queued
// under the same id is not an error: the activation is already on its way.
// A failure is ErrNotEnqueued.
func (e *Enqueuer) Enqueue(ctx context.Context, a Activation, seq int64, q string, opts ...asynq.Option) error {
	if q == "" {
		q = DefaultQueue
	}
	a = withTrace(ctx, a)
	t, err := NewActivation(a, seq, append(opts, asynq.Queue(e.keys().QueueOf(q, a.ThreadID)))...)
	if err != nil {
		return err
	}
	_, err = e.Client.EnqueueContext(ctx, t)
	if errors.Is(err, asynq.ErrTaskIDConflict) || errors.Is(err, asynq.ErrDuplicateTask) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("enqueue %s for %s: %w: %w", a.Reason, a.ThreadID, ErrNotEnqueued, err)
	}
	return nil
}

// withTrace gives a the span in ctx as its TraceParent, unless it has one.
func withTrace(ctx context.Context, a Activation) Activation {
	if a.TraceParent == "" {
		a.TraceParent = telemetry.FromContext(ctx)
	}
	return a
}

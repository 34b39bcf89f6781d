package orchestrator

import (
	"go.opentelemetry.io/otel/trace"

	"github.com/spool-run/spool/blobstore"
)

// Runtime is the orchestrator as the worker has it: the operations
// people call and housekeeping's (its recoverer, a waiting parent's
// restore of a lost child, a recharge), and the steps of an activation
// (Checkpoint, AttestFinal, Finalize, EnqueueWake, the planned ids of its
// children) with the services it runs them on (Services). No package
// above the orchestrator but the worker takes one (TestFloor).
type Runtime struct {
	*Housekeeper
}

// Runtime returns o as the worker has it.
func (o *Orchestrator) Runtime() *Runtime { return &Runtime{o.Housekeeper()} }

// WithStore returns a copy of rt that uses store (the worker's, which
// retries through outages: blobstore.Retrying) in every operation;
// everything else is shared.
func (rt *Runtime) WithStore(store blobstore.Store) *Runtime {
	c := *rt.Orchestrator
	c.store = store
	return c.Runtime()
}

// NewID names a new thread: Config.NewID, else thread.NewID.
func (rt *Runtime) NewID(r IDRequest) string { return rt.newID(r) }

// Tracer is the tracer of spool's spans (Config.Tracing).
func (rt *Runtime) Tracer() trace.Tracer { return rt.tracer() }

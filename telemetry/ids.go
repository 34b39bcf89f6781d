package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/trace"
)

// IDGenerator draws random ids, except for the span a context names
// (WithSpanContext): a thread's span, recorded when the thread ends with
// the ids its activations named as their parent from its start. An SDK
// installed for spool needs it (sdktrace.WithIDGenerator); telemetry/otlp
// installs it.
type IDGenerator struct{}

// NewIDs returns the ids of a new root span.
func (IDGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if sc, ok := SpanContextOf(ctx); ok {
		return sc.TraceID(), sc.SpanID()
	}
	return NewTraceID(), NewSpanID()
}

// NewSpanID returns the id of a new span in trace traceID.
func (IDGenerator) NewSpanID(ctx context.Context, traceID trace.TraceID) trace.SpanID {
	if sc, ok := SpanContextOf(ctx); ok && sc.TraceID() == traceID {
		return sc.SpanID()
	}
	return NewSpanID()
}

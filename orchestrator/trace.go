package orchestrator

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/telemetry"
	"github.com/spool-run/spool/thread"
)

// tracer is the tracer of spool's spans (Config.Tracing).
func (o *Orchestrator) tracer() trace.Tracer { return telemetry.Tracer(o.cfg.Tracing) }

// threadTrace is the trace context of a new thread (package telemetry):
// its own span, and the span that starts it — an explicit traceparent
// (StartRequest.TraceParent), else the span in ctx (a worker's spawn or
// handing-off turn), else the span of its parent or of the thread it
// continues; none for a root an untraced process starts, whose trace id
// is new.
func threadTrace(ctx context.Context, explicit string, parent, prev *registry.Record) (own, caller string) {
	sc, ok := telemetry.Parse(explicit)
	if !ok {
		sc = trace.SpanContextFromContext(ctx)
	}
	for _, r := range []*registry.Record{parent, prev} {
		if sc.IsValid() {
			break
		}
		if r != nil {
			sc, _ = telemetry.Parse(r.TraceParent)
		}
	}
	return telemetry.Format(telemetry.NewThreadSpan(sc)), telemetry.Format(sc)
}

// traceEnd records the span of a thread that ended (rec as Finalize left
// it), with the ids its registry record named from its start, from its
// creation to now. A record without a trace context (registered before
// spool traced) records nothing.
func (o *Orchestrator) traceEnd(rec *registry.Record) {
	own, ok := telemetry.Parse(rec.TraceParent)
	if !ok {
		return
	}
	caller, _ := telemetry.Parse(rec.TraceCaller)
	failure := ""
	if rec.Status == thread.StatusError && rec.Error != nil {
		failure = rec.Error.Code
	}
	attrs := []attribute.KeyValue{
		telemetry.ThreadID.String(rec.ThreadID), telemetry.Directive.String(rec.Directive), telemetry.Status.String(string(rec.Status)),
		telemetry.Turns.Int(rec.Cost.Turns), telemetry.CostUSD.Float64(rec.Cost.Spend), telemetry.ChainRootID.String(rec.ChainRootID),
		telemetry.GenAIRequestModel.String(rec.Model), telemetry.Tenant.String(rec.TenantOrDefault()),
		telemetry.Priority.Int(rec.PriorityOrDefault()),
	}
	if rec.ParentID != "" {
		attrs = append(attrs, telemetry.ParentID.String(rec.ParentID))
	}
	if rec.PreviousThreadID != "" {
		attrs = append(attrs, telemetry.PreviousThreadID.String(rec.PreviousThreadID))
	}
	if rec.ContinuationThreadID != "" {
		attrs = append(attrs, telemetry.ContinuationThreadID.String(rec.ContinuationThreadID))
	}
	telemetry.RecordEnded(o.tracer(), telemetry.SpanThread, own, caller, rec.CreatedAt, o.Now(), failure, attrs...)
}

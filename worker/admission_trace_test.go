package worker

import (
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/telemetry"
	"github.com/spool-run/spool/thread"
)

// TestTraceAdmission: a run's span and its activations' carry its tenant
// and priority; each activation also says how it was admitted (class 1
// for a root chain's first, what it waited for, its concurrency keys);
// and a start with an idempotency key marks the caller's span replayed
// or not. Read from the spans the SDK recorded.
func TestTraceAdmission(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(telemetry.IDGenerator{}))
	h := setupWith(t, nil, harnessConfig{tracing: tp})
	h.publish("version: 1\nconcurrency:\n  - {name: per_dir, directives: ['h/*'], key: '${name}', max: 1}\n")
	h.prov.script("h/a", say("done"))

	starts := map[bool]bool{} // replayed → seen
	var ids []string
	for i, key := range []string{"order-1", "order-1", "order-2"} {
		ctx, span := tp.Tracer("test").Start(h.ctx, "start")
		r, err := h.o.Start(ctx, orchestrator.StartRequest{Directive: "h/a", Bundle: h.bundle, Model: fakeModel,
			Tenant: "acme", Priority: 2, IdempotencyKey: key})
		require.NoError(t, err)
		span.End()
		require.Equal(t, i == 1, *r.Existing)
		if !*r.Existing {
			ids = append(ids, r.ThreadID)
		}
	}
	require.Equal(t, 2, h.drain(false), "two runs, one at a time on their key")
	for _, id := range ids {
		require.Equal(t, thread.StatusCompleted, h.record(id).Status)
	}

	threads, acts := map[string]sdktrace.ReadOnlySpan{}, map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		id := attrOf(s, telemetry.ThreadID).AsString()
		switch s.Name() {
		case "start":
			starts[attrOf(s, telemetry.IdempotencyReplayed).AsBool()] = true
		case telemetry.SpanThread:
			threads[id] = s
		case telemetry.SpanActivation:
			acts[id] = s
		}
	}
	require.Equal(t, map[bool]bool{false: true, true: true}, starts, "the replayed start and the first ones marked")
	for i, id := range ids {
		for _, s := range []sdktrace.ReadOnlySpan{threads[id], acts[id]} {
			require.NotNil(t, s, "a span of %s", id)
			require.Equal(t, "acme", attrOf(s, telemetry.Tenant).AsString(), s.Name())
			require.EqualValues(t, 2, attrOf(s, telemetry.Priority).AsInt64(), s.Name())
		}
		a := acts[id]
		require.EqualValues(t, 1, attrOf(a, telemetry.AdmissionClass).AsInt64(), "a root chain's first activation")
		require.Equal(t, []string{"per_dir=h/a"}, attrOf(a, telemetry.ConcurrencyKeys).AsStringSlice())
		require.GreaterOrEqual(t, attrOf(a, telemetry.AdmissionWaitMS).AsInt64(), int64(0))
		want := admission.WaitCapacity
		if i == 1 {
			want = admission.WaitConcurrency // the key was full when it asked
		}
		require.Equal(t, want, attrOf(a, telemetry.AdmissionReason).AsString())
	}
}

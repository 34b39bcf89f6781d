package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/telemetry"
	"github.com/spool-run/spool/thread"
)

func attrOf(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// TestTraceRetries: each attempt at a model call is a span of its own,
// with the provider's error class; the activations that retry after a
// hand-back are, like the first, children of the thread's span, and link
// to the span that handed the thread back.
func TestTraceRetries(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	h := setupWith(t, nil, harnessConfig{Config: Config{RetryHandBack: 100 * time.Millisecond},
		tracing: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(telemetry.IDGenerator{}))})
	limited := &provider.Error{Class: provider.ClassRateLimited, StatusCode: 429, RetryAfter: 500 * time.Millisecond, Message: "slow down"}
	overloaded := &provider.Error{Class: provider.ClassTransient, StatusCode: 529, Message: "overloaded"}
	h.prov.script("h/a", reply{err: overloaded}, reply{err: limited}, say("done after the wait"))
	id := h.start("h/a", thread.Limits{})
	require.NoError(t, h.activate(id, "start", 0))
	require.Equal(t, 2, h.drain(true), "a recover activation at each retry time")
	r := h.record(id)
	require.Equal(t, thread.StatusCompleted, r.Status, "%+v", r.Error)
	own, ok := telemetry.Parse(r.TraceParent)
	require.True(t, ok)

	var threads, acts, calls, turns []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		require.Equal(t, own.TraceID(), s.SpanContext().TraceID(), s.Name())
		switch s.Name() {
		case telemetry.SpanThread:
			threads = append(threads, s)
			require.Equal(t, own.SpanID(), s.SpanContext().SpanID(), "the span the record named")
			require.Equal(t, "completed", attrOf(s, telemetry.Status).AsString())
		case telemetry.SpanActivation:
			acts = append(acts, s)
		case telemetry.SpanTurn:
			turns = append(turns, s)
		case "chat " + fakeModel:
			calls = append(calls, s)
		}
	}
	require.Len(t, threads, 1)
	require.Len(t, acts, 3)
	for i, a := range acts {
		require.Equal(t, own.SpanID(), a.Parent().SpanID(), "an activation is a child of its thread")
		if i == 0 {
			continue
		}
		require.Equal(t, "handed_back", attrOf(acts[i-1], telemetry.ActivationEnd).AsString())
		require.Len(t, a.Links(), 1, "a retry links to what handed the thread back")
		var handedBack sdktrace.ReadOnlySpan // the turn of the activation before
		for _, turn := range turns {
			if turn.Parent().SpanID() == acts[i-1].SpanContext().SpanID() {
				handedBack = turn
			}
		}
		require.NotNil(t, handedBack)
		require.Equal(t, []string{"hand_back:retry_wait", "hand_back:rate_limit"}[i-1], attrOf(handedBack, telemetry.TurnEnd).AsString())
		require.Equal(t, handedBack.SpanContext().SpanID(), a.Links()[0].SpanContext.SpanID())
	}
	require.Equal(t, "finished", attrOf(acts[2], telemetry.ActivationEnd).AsString())

	require.Len(t, calls, 3)
	for i, want := range []string{"transient", "rate_limited"} {
		require.Equal(t, codes.Error, calls[i].Status().Code)
		require.Equal(t, want, attrOf(calls[i], telemetry.ErrorType).AsString())
		require.EqualValues(t, i+1, attrOf(calls[i], telemetry.Attempt).AsInt64())
	}
	require.Equal(t, codes.Unset, calls[2].Status().Code)
	require.EqualValues(t, 100, attrOf(calls[2], telemetry.GenAIInputTokens).AsInt64())
	require.EqualValues(t, 10, attrOf(calls[2], telemetry.GenAIOutputTokens).AsInt64())
	require.InDelta(t, 100.0/1e6+10*5.0/1e6, attrOf(calls[2], telemetry.CostUSD).AsFloat64(), 1e-12)
	require.Equal(t, id, attrOf(calls[2], telemetry.ThreadID).AsString())
	require.Equal(t, turns[len(turns)-1].SpanContext().SpanID(), calls[2].Parent().SpanID())
}

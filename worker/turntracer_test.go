package worker

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/telemetry"
	"github.com/spool-run/spool/thread"
)

// tracerBundle is a turnTracer of a thread of the fake model and the
// recorder of the spans it ends.
type tracerBundle struct {
	t   *testing.T
	tr  *turnTracer
	rec *tracetest.SpanRecorder
}

func newTracerBundle(t *testing.T) *tracerBundle {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	r := &registry.Record{ThreadID: "t/x-1", Model: fakeModel}
	return &tracerBundle{t: t, rec: rec, tr: newTurnTracer(telemetry.Tracer(tp), r, &fakeProvider{}, &provider.Config{})}
}

// only is the one span the recorder ended.
func (b *tracerBundle) only() sdktrace.ReadOnlySpan {
	b.t.Helper()
	ended := b.rec.Ended()
	require.Len(b.t, ended, 1)
	return ended[0]
}

// TestTurnTracer: each span of a turn names the thread it works for and
// says what it needs (the turn, the model call's API, usage and cost,
// the tool's result, the spawn), without a session.
func TestTurnTracer(t *testing.T) {
	t.Parallel()

	t.Run("turn", func(t *testing.T) {
		t.Parallel()
		b := newTracerBundle(t)
		_, span := b.tr.startTurn(t.Context(), 4)
		endTurn(span, outcome{kind: suspend, reason: "children"}, nil)
		s := b.only()
		require.Equal(t, telemetry.SpanTurn, s.Name())
		require.Equal(t, "t/x-1", attrOf(s, telemetry.ThreadID).AsString())
		require.EqualValues(t, 4, attrOf(s, telemetry.Turn).AsInt64())
		require.Equal(t, "suspend:children", attrOf(s, telemetry.TurnEnd).AsString())
	})

	t.Run("model call", func(t *testing.T) {
		t.Parallel()
		b := newTracerBundle(t)
		req := &provider.Request{Model: fakeModel, MaxTokens: 64, Thread: provider.ThreadInfo{Turn: 2}}
		_, span := b.tr.startModelCall(t.Context(), req, 1)
		b.tr.endModelCall(span, &provider.Response{Usage: provider.Usage{InputTokens: 100, OutputTokens: 10}, StopReason: "end_turn"}, nil)
		s := b.only()
		require.Equal(t, "chat "+fakeModel, s.Name())
		require.Equal(t, "spool.script", attrOf(s, telemetry.GenAIProvider).AsString())
		require.EqualValues(t, 2, attrOf(s, telemetry.Attempt).AsInt64())
		require.EqualValues(t, 100, attrOf(s, telemetry.GenAIInputTokens).AsInt64())
		require.InDelta(t, 100.0/1e6+10*5.0/1e6, attrOf(s, telemetry.CostUSD).AsFloat64(), 1e-12, "priced by the thread's provider")
		require.Equal(t, codes.Unset, s.Status().Code)

		b = newTracerBundle(t)
		_, span = b.tr.startModelCall(t.Context(), req, 0)
		b.tr.endModelCall(span, nil, &provider.Error{Class: provider.ClassTransient, StatusCode: 503, Message: "busy"})
		s = b.only()
		require.Equal(t, codes.Error, s.Status().Code)
		require.Equal(t, "transient", attrOf(s, telemetry.ErrorType).AsString())

		// The call names the model as it was sent, without the prefix
		// that routed it.
		b = newTracerBundle(t)
		_, span = b.tr.startModelCall(t.Context(), &provider.Request{Model: "openai/meta-llama/Llama-3-8B"}, 0)
		span.End()
		s = b.only()
		require.Equal(t, "chat meta-llama/Llama-3-8B", s.Name())
		require.Equal(t, "meta-llama/Llama-3-8B", attrOf(s, telemetry.GenAIRequestModel).AsString())
		require.Equal(t, "openai", attrOf(s, telemetry.GenAIProvider).AsString())
	})

	t.Run("tool", func(t *testing.T) {
		t.Parallel()
		msgs := []thread.Message{
			{Role: thread.RoleTool, ToolCallID: "c-1", IsError: true},
			{Role: thread.RoleTool, ToolCallID: "c-2"},
		}
		for _, tc := range []struct {
			call string
			err  error
			want codes.Code
		}{{"c-1", nil, codes.Error}, {"c-2", nil, codes.Unset}, {"c-3", nil, codes.Unset}, {"c-2", errors.New("store down"), codes.Error}} {
			b := newTracerBundle(t)
			_, span := b.tr.startTool(t.Context(), thread.ToolCall{ID: tc.call}, "rye/file-system/fs_read")
			b.tr.endTool(span, msgs, tc.call, tc.err)
			s := b.only()
			require.Equal(t, "execute_tool rye/file-system/fs_read", s.Name())
			require.Equal(t, tc.call, attrOf(s, telemetry.GenAIToolCallID).AsString())
			require.Equal(t, tc.want, s.Status().Code, "%s %v", tc.call, tc.err)
		}
	})

	t.Run("spawn", func(t *testing.T) {
		t.Parallel()
		b := newTracerBundle(t)
		_, span := b.tr.startSpawn(t.Context(), "h/kid", true)
		endSpawn(span, &registry.Record{ThreadID: "h/kid-1"}, nil)
		s := b.only()
		require.Equal(t, telemetry.SpanSpawn, s.Name())
		require.Equal(t, "h/kid", attrOf(s, telemetry.ChildDirective).AsString())
		require.True(t, attrOf(s, telemetry.SpawnAsync).AsBool())
		require.Equal(t, "h/kid-1", attrOf(s, telemetry.ChildThreadID).AsString())
	})
}

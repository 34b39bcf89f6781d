package telemetry

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

func TestTraceParentRoundTrip(t *testing.T) {
	t.Parallel()
	sc := NewThreadSpan(trace.SpanContext{})
	require.True(t, sc.IsValid())
	require.True(t, sc.IsSampled(), "a new trace is sampled")
	tp := Format(sc)
	require.Regexp(t, `^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`, tp)
	got, ok := Parse(tp)
	require.True(t, ok)
	require.Equal(t, sc.TraceID(), got.TraceID())
	require.Equal(t, sc.SpanID(), got.SpanID())
	require.True(t, got.IsRemote())
	require.Equal(t, sc.TraceID().String(), TraceID(tp))
}

func TestParseRefusesWhatIsNotATraceParent(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "00-0000", "00-00000000000000000000000000000000-0000000000000001-01",
		"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", "zz-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"} {
		_, ok := Parse(s)
		require.False(t, ok, s)
		require.Empty(t, TraceID(s), s)
	}
	require.Empty(t, Format(trace.SpanContext{}))
	require.Empty(t, FromContext(context.Background()))
}

// TestThreadSpanInheritsTheTrace: a thread started under a span (a spawn)
// is in that span's trace, with that span's sampling decision and a span
// id of its own.
func TestThreadSpanInheritsTheTrace(t *testing.T) {
	t.Parallel()
	caller, ok := Parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
	require.True(t, ok)
	own := NewThreadSpan(caller)
	require.Equal(t, caller.TraceID(), own.TraceID())
	require.NotEqual(t, caller.SpanID(), own.SpanID())
	require.False(t, own.IsSampled())
	require.NotEqual(t, NewThreadSpan(caller).SpanID(), own.SpanID())
	require.NotEqual(t, NewThreadSpan(trace.SpanContext{}).TraceID(), NewThreadSpan(trace.SpanContext{}).TraceID())
}

func TestWithSpanContext(t *testing.T) {
	t.Parallel()
	_, ok := SpanContextOf(context.Background())
	require.False(t, ok)
	sc := NewThreadSpan(trace.SpanContext{})
	got, ok := SpanContextOf(WithSpanContext(context.Background(), sc))
	require.True(t, ok)
	require.Equal(t, sc, got)
}

package otlp

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/spool-run/spool/internal/testing/otlptest"
	"github.com/spool-run/spool/telemetry"
)

func TestWanted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		env      map[string]string
		on       bool
		protocol string
		err      string
	}{
		{name: "nothing set", env: nil},
		{name: "an endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, on: true, protocol: "http/protobuf"},
		{name: "the signal's endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, on: true, protocol: "http/protobuf"},
		{name: "another signal's endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4318/v1/metrics"}},
		{name: "exporter otlp, default endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true, protocol: "http/protobuf"},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true, protocol: "grpc"},
		{name: "the signal's protocol wins", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, on: true, protocol: "http/protobuf"},
		{name: "exporter none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{name: "sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}},
		{name: "sdk not disabled", env: map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, on: true, protocol: "http/protobuf"},
		{name: "unsupported exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: "OTEL_TRACES_EXPORTER=zipkin"},
		{name: "unsupported protocol", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
			err: "OTEL_EXPORTER_OTLP_PROTOCOL=http/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on, protocol, err := wanted(func(k string) string { return tc.env[k] }, "TRACES")
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.on, on)
			require.Equal(t, tc.protocol, protocol)
		})
	}
}

// TestNothingSetTracesNothing: with no OTEL_* variable, Setup installs no
// SDK: the core gets the API's no-op provider.
func TestNothingSetTracesNothing(t *testing.T) {
	t.Parallel()
	tel, err := Setup(t.Context(), Config{Getenv: func(string) string { return "" }})
	require.NoError(t, err)
	require.False(t, tel.Tracing())
	require.IsType(t, noop.TracerProvider{}, tel.TracerProvider())
	require.NoError(t, tel.ExportMetrics(t.Context(), prometheus.NewRegistry()))
	require.NoError(t, tel.Shutdown(t.Context()))
}

// exportOnce records a span, a thread's span with fixed ids under it, and
// a counter through tel, then flushes.
func exportOnce(t *testing.T, tel *Telemetry, thread trace.SpanContext) {
	t.Helper()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "spool_turns_total", Help: "Model turns run."})
	reg.MustRegister(c)
	c.Add(3)
	require.NoError(t, tel.ExportMetrics(t.Context(), reg))
	tr := telemetry.Tracer(tel.TracerProvider())
	ctx := trace.ContextWithRemoteSpanContext(t.Context(), thread)
	_, span := tr.Start(ctx, telemetry.SpanActivation)
	span.End()
	now := time.Now()
	telemetry.RecordEnded(tr, telemetry.SpanThread, thread, trace.SpanContext{}, now.Add(-time.Second), now, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, tel.Shutdown(ctx))
}

// requireExported checks what the collector got from exportOnce.
func requireExported(t *testing.T, c *otlptest.Collector, thread trace.SpanContext) {
	t.Helper()
	spans := c.Spans()
	require.Len(t, spans, 2)
	byName := map[string]otlptest.Span{}
	for _, s := range spans {
		byName[s.GetName()] = s
		require.Equal(t, thread.TraceID().String(), s.TraceID())
		require.Equal(t, "spool-test", s.Resource["service.name"])
	}
	// The thread's span, recorded at its end, has the span id its
	// activation named as parent from the start.
	require.Equal(t, thread.SpanID().String(), byName[telemetry.SpanThread].ID())
	require.Empty(t, byName[telemetry.SpanThread].ParentID())
	require.Equal(t, thread.SpanID().String(), byName[telemetry.SpanActivation].ParentID())
	require.True(t, c.Metric("spool_turns_total"), "the Prometheus metric under its own name")
}

// The exporters read the endpoint from the process environment, so these
// tests set it and cannot run in parallel.

func TestExportsOverHTTP(t *testing.T) {
	rx := otlptest.NewHTTP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.URL)
	t.Setenv("OTEL_SERVICE_NAME", "spool-test")
	tel, err := Setup(t.Context(), Config{})
	require.NoError(t, err)
	require.True(t, tel.Tracing())
	thread := telemetry.NewThreadSpan(trace.SpanContext{})
	exportOnce(t, tel, thread)
	requireExported(t, &rx.Collector, thread)
}

func TestExportsOverGRPC(t *testing.T) {
	rx := otlptest.NewGRPC(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.Endpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=spool-test")
	tel, err := Setup(t.Context(), Config{})
	require.NoError(t, err)
	require.Equal(t, "grpc", tel.protocol)
	thread := telemetry.NewThreadSpan(trace.SpanContext{})
	exportOnce(t, tel, thread)
	requireExported(t, &rx.Collector, thread)
}

func TestBadVariableIsAnError(t *testing.T) {
	t.Parallel()
	_, err := Setup(t.Context(), Config{Getenv: func(k string) string {
		return map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "thrift"}[k]
	}})
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=thrift"), err.Error())
}

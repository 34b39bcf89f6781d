// Package otlp installs the OpenTelemetry SDK for a spool process from the
// standard OTEL_* environment variables only: traces (and, optionally,
// the process's Prometheus metrics) exported over OTLP, HTTP or gRPC. With
// none of them set, or OTEL_SDK_DISABLED=true, it installs nothing and the
// process traces through the API's no-op provider, at no cost.
//
// Traces are on when OTEL_TRACES_EXPORTER is "otlp", or when it is unset
// and an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); "none" turns them off. The protocol
// is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL:
// "http/protobuf" (the default) or "grpc". Once a signal is on, the
// exporter is made by OpenTelemetry's autoexport from the same variables,
// and everything else the exporters and the SDK read themselves:
// endpoints, OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION,
// _CERTIFICATE, OTEL_SERVICE_NAME (default "spool"),
// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and its _ARG, OTEL_BSP_*.
// Metrics follow the same rules with OTEL_METRICS_EXPORTER, the _METRICS_
// endpoint and protocol, and OTEL_METRIC_EXPORT_INTERVAL; what they export
// is the process's Prometheus registry, unless OTEL_METRICS_PRODUCERS
// names other producers (autoexport's: "prometheus" is the default
// Prometheus registry, "none" nothing).
//
// This is the package with the SDK and exporter dependencies; spool's
// core uses only the API (package telemetry).
package otlp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	prombridge "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spool-run/spool/telemetry"
)

// Config configures Setup.
type Config struct {
	// ServiceName is service.name unless OTEL_SERVICE_NAME (or
	// OTEL_RESOURCE_ATTRIBUTES) names it. Default "spool".
	ServiceName string
	// ServiceVersion is service.version; "" leaves it out.
	ServiceVersion string
	// Getenv reads the environment. Default os.Getenv. The exporters and
	// the SDK read the process's environment themselves (endpoints,
	// headers, sampler): this decides only whether and how to export.
	Getenv func(string) string
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.ServiceName == "" {
		c.ServiceName = "spool"
	}
	if c.Getenv == nil {
		c.Getenv = os.Getenv
	}
	return c
}

// Telemetry is a process's OpenTelemetry SDK, or nothing.
type Telemetry struct {
	cfg      Config
	res      *resource.Resource
	traces   *sdktrace.TracerProvider // nil: not tracing
	metrics  *sdkmetric.MeterProvider // nil: not exporting metrics
	protocol string
}

// Setup installs what the environment asks for (see the package doc). A
// variable with a value it cannot honour is an error naming it.
func Setup(ctx context.Context, cfg Config) (*Telemetry, error) {
	cfg = cfg.WithDefaults()
	t := &Telemetry{cfg: cfg}
	on, protocol, err := wanted(cfg.Getenv, "TRACES")
	if err != nil || !on {
		return t, err
	}
	if t.res, err = t.resource(ctx); err != nil {
		return nil, err
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("opentelemetry: trace exporter: %w", err)
	}
	if autoexport.IsNoneSpanExporter(exp) { // Getenv said otlp, the process's environment none
		return t, nil
	}
	t.protocol = protocol
	t.traces = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(t.res), sdktrace.WithIDGenerator(telemetry.IDGenerator{}))
	return t, nil
}

// Tracing reports whether spans are exported.
func (t *Telemetry) Tracing() bool { return t.traces != nil }

// TracerProvider is the provider spool's core traces with: the SDK's, or
// the no-op one.
func (t *Telemetry) TracerProvider() trace.TracerProvider {
	if t.traces == nil {
		return noop.NewTracerProvider()
	}
	return t.traces
}

// ExportMetrics exports the metrics g gathers (a process's Prometheus
// registry: the same names, spool_turns_total ...) over OTLP at
// OTEL_METRIC_EXPORT_INTERVAL, when the environment asks for metrics (see
// the package doc); otherwise it does nothing. Call it once.
func (t *Telemetry) ExportMetrics(ctx context.Context, g prometheus.Gatherer) error {
	on, _, err := wanted(t.cfg.Getenv, "METRICS")
	if err != nil || !on || t.metrics != nil {
		return err
	}
	if t.res == nil {
		if t.res, err = t.resource(ctx); err != nil {
			return err
		}
	}
	reader, err := metricReader(ctx, g)
	if err != nil {
		return fmt.Errorf("opentelemetry: metric exporter: %w", err)
	}
	if autoexport.IsNoneMetricReader(reader) {
		return nil
	}
	t.metrics = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(t.res))
	return nil
}

// metricReaderMu serializes metricReader: autoexport takes the fallback
// producer as package state.
var metricReaderMu sync.Mutex

// metricReader is autoexport's reader for the environment, its periodic
// export producing what g gathers (when OTEL_METRICS_PRODUCERS names no
// producer).
func metricReader(ctx context.Context, g prometheus.Gatherer) (sdkmetric.Reader, error) {
	metricReaderMu.Lock()
	defer metricReaderMu.Unlock()
	autoexport.WithFallbackMetricProducer(func(context.Context) (sdkmetric.Producer, error) {
		return prombridge.NewMetricProducer(prombridge.WithGatherer(g)), nil
	})
	return autoexport.NewMetricReader(ctx)
}

// Shutdown flushes what is buffered and stops exporting.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	if t.traces != nil {
		errs = append(errs, t.traces.Shutdown(ctx))
	}
	if t.metrics != nil {
		errs = append(errs, t.metrics.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// resource is the process's: service.name (Config, overridden by the
// environment), service.version, host, and OTEL_RESOURCE_ATTRIBUTES.
func (t *Telemetry) resource(ctx context.Context) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{attribute.String("service.name", t.cfg.ServiceName)}
	if t.cfg.ServiceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", t.cfg.ServiceVersion))
	}
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithHost(), resource.WithProcessPID())
	if err != nil && res == nil {
		return nil, fmt.Errorf("opentelemetry: resource: %w", err)
	}
	return res, nil // a partial resource (a detector failed) still names the service
}

// wanted decides, from the environment, whether a signal ("TRACES",
// "METRICS") is exported and over which protocol.
func wanted(getenv func(string) string, signal string) (bool, string, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, "", nil
	}
	name := "OTEL_" + signal + "_EXPORTER"
	on := false
	switch exporter := strings.TrimSpace(getenv(name)); exporter {
	case "":
		on = getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") != ""
	case "none":
	case "otlp":
		on = true
	default:
		return false, "", fmt.Errorf("%s=%s: spool exports over OTLP only (otlp or none)", name, exporter)
	}
	if !on {
		return false, "", nil
	}
	pname := "OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL"
	protocol := strings.TrimSpace(getenv(pname))
	if protocol == "" {
		pname = "OTEL_EXPORTER_OTLP_PROTOCOL"
		protocol = strings.TrimSpace(getenv(pname))
	}
	switch protocol {
	case "", "http/protobuf":
		return true, "http/protobuf", nil
	case "grpc":
		return true, "grpc", nil
	}
	return false, "", fmt.Errorf("%s=%s: spool exports OTLP as http/protobuf or grpc", pname, protocol)
}

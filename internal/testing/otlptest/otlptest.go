// Package otlptest is an OpenTelemetry collector for tests: it receives
// OTLP exports over HTTP (protobuf, gzip or not) and gRPC, decodes them
// with the OTLP protobuf definitions, and keeps the spans and the names of
// the metrics it was sent.
package otlptest

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is a received span with its resource's attributes.
type Span struct {
	*tracepb.Span
	Resource map[string]string
}

// TraceID is the span's trace id in hex.
func (s Span) TraceID() string { return hex.EncodeToString(s.GetTraceId()) }

// ID is the span's id in hex.
func (s Span) ID() string { return hex.EncodeToString(s.GetSpanId()) }

// ParentID is the span's parent span id in hex; "" for a root.
func (s Span) ParentID() string { return hex.EncodeToString(s.GetParentSpanId()) }

// Attr is the span's attribute key as a string ("" when it has none);
// Int and Float read numbers.
func (s Span) Attr(key string) string { return attr(s.GetAttributes(), key).GetStringValue() }

// Int reads an integer attribute.
func (s Span) Int(key string) int64 { return attr(s.GetAttributes(), key).GetIntValue() }

// Float reads a double attribute.
func (s Span) Float(key string) float64 { return attr(s.GetAttributes(), key).GetDoubleValue() }

// Has reports whether the span has attribute key.
func (s Span) Has(key string) bool { return attr(s.GetAttributes(), key) != nil }

func attr(kvs []*commonpb.KeyValue, key string) *commonpb.AnyValue {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}

// Collector keeps what it received.
type Collector struct {
	mu      sync.Mutex
	spans   []Span
	metrics map[string]bool
}

// Spans returns the spans received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Metric reports whether a metric named name was received.
func (c *Collector) Metric(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.metrics[name]
}

func (c *Collector) addSpans(req *coltracepb.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				c.spans = append(c.spans, Span{Span: sp, Resource: res})
			}
		}
	}
}

func (c *Collector) addMetrics(req *colmetricpb.ExportMetricsServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.metrics == nil {
		c.metrics = map[string]bool{}
	}
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				c.metrics[m.GetName()] = true
			}
		}
	}
}

// HTTP is a collector serving OTLP/HTTP (/v1/traces, /v1/metrics).
type HTTP struct {
	Collector
	// URL is what OTEL_EXPORTER_OTLP_ENDPOINT names.
	URL string
}

// NewHTTP starts an OTLP/HTTP collector, stopped at cleanup.
func NewHTTP(t testing.TB) *HTTP {
	h := &HTTP{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req, resp proto.Message
		var add func()
		switch r.URL.Path {
		case "/v1/traces":
			tr := &coltracepb.ExportTraceServiceRequest{}
			req, resp, add = tr, &coltracepb.ExportTraceServiceResponse{}, func() { h.addSpans(tr) }
		case "/v1/metrics":
			mr := &colmetricpb.ExportMetricsServiceRequest{}
			req, resp, add = mr, &colmetricpb.ExportMetricsServiceResponse{}, func() { h.addMetrics(mr) }
		default:
			http.NotFound(w, r)
			return
		}
		if err := proto.Unmarshal(b, req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		add()
		out, _ := proto.Marshal(resp)
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	h.URL = srv.URL
	return h
}

// GRPC is a collector serving OTLP/gRPC (trace and metrics services).
type GRPC struct {
	Collector
	// Endpoint is what OTEL_EXPORTER_OTLP_ENDPOINT names (with
	// OTEL_EXPORTER_OTLP_INSECURE=true).
	Endpoint string
}

// NewGRPC starts an OTLP/gRPC collector on loopback, stopped at cleanup.
func NewGRPC(t testing.TB) *GRPC {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &GRPC{Endpoint: "http://" + ln.Addr().String()}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, traceService{c: &g.Collector})
	colmetricpb.RegisterMetricsServiceServer(srv, metricService{c: &g.Collector})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return g
}

type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	c *Collector
}

func (s traceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.c.addSpans(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

type metricService struct {
	colmetricpb.UnimplementedMetricsServiceServer
	c *Collector
}

func (s metricService) Export(_ context.Context, req *colmetricpb.ExportMetricsServiceRequest) (*colmetricpb.ExportMetricsServiceResponse, error) {
	s.c.addMetrics(req)
	return &colmetricpb.ExportMetricsServiceResponse{}, nil
}

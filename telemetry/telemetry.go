// Package telemetry is what spool's core needs of OpenTelemetry tracing:
// the names of its spans and attributes, and the W3C trace context that a
// thread keeps in its registry record and its activation tasks. It uses
// only the OpenTelemetry API (a trace.TracerProvider, a no-op one unless
// a process installs an SDK); package telemetry/otlp installs the SDK and
// the OTLP exporters from the standard OTEL_* variables, and only
// cmd/spool imports it.
//
// A tree of threads is one trace:
//
//	spool.thread  root, recorded when it ends      trace_parent 00-T-R-01
//	├── spool.activation  start
//	│   └── spool.turn
//	│       ├── chat MODEL                        gen_ai.*, spool.cost_usd
//	│       └── execute_tool rye/agent/threads/thread_directive
//	│           └── spool.spawn
//	│               └── spool.thread  child       trace_caller = the spawn
//	│                   └── spool.activation ─ ─ ─ ┐  its end wakes the root
//	└── spool.activation  wake  ◀─ ─ ─ link ─ ─ ─ ─┘
//	    ├── spool.turn ...                        the context is full
//	    └── spool.thread  continuation            trace_caller = this activation
//	        └── spool.activation ...
//
// Where the context lives. Each thread's registry record holds two W3C
// traceparent strings, written once when the thread is registered
// (orchestrator.Start) and never changed:
//
//   - trace_parent names the thread's own span: trace id T (its tree's),
//     span id minted for the thread. Every activation of the thread, on
//     whatever worker, for whatever reason (start, wake, timeout, recover,
//     a retry's hand-back), is a child of it, so suspensions, hand-backs,
//     retries and takeovers after a crash stay in one trace.
//   - trace_caller names the span that started the thread: the parent's
//     spool.spawn span for a child, the activation that hands off for a
//     continuation, the caller's span (or the previous thread's span, for
//     a resume from an untraced process) otherwise; empty for a root that
//     an untraced process started, whose trace id is then minted.
//
// Children, continuations and resumes take T from the span in the
// context of the call that starts them (a worker's spawn or activation),
// else from the parent's or previous thread's trace_parent. The ids are
// assigned whether or not any process traces, so `spool thread show`
// always names the trace, and a fleet whose workers turn tracing on later
// still makes one trace per tree.
//
// The thread's span itself is recorded when the thread ends
// (orchestrator.Finalize), from its creation time to its end, with the
// span id trace_parent named: WithSpanContext asks telemetry/otlp's id
// generator for those ids. Until the root ends, a trace viewer shows its
// activations under a span not yet received.
//
// Each activation task's payload (queue.Activation.TraceParent) also
// carries the span that enqueued it (the finishing child that woke its
// parent, the model call that handed its thread back until a retry); the
// activation's span links to it.
package telemetry

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of spool's spans.
const ScopeName = "github.com/spool-run/spool"

// Span names. A model call is named "chat MODEL" and a tool call
// "execute_tool TOOL", as the GenAI semantic conventions name them.
const (
	SpanThread     = "spool.thread"
	SpanActivation = "spool.activation"
	SpanTurn       = "spool.turn"
	SpanSpawn      = "spool.spawn"
	// SpanGraphStep is a step of a graph run, under the run's activation
	// (a step that waits across activations has a span in each); the
	// children it starts are under it.
	SpanGraphStep = "spool.graph.step"
)

// Attributes of spool's spans: the GenAI semantic conventions' on model
// and tool calls, and spool's own.
const (
	GenAIOperation       = attribute.Key("gen_ai.operation.name")
	GenAIProvider        = attribute.Key("gen_ai.provider.name")
	GenAIRequestModel    = attribute.Key("gen_ai.request.model")
	GenAIRequestMaxTok   = attribute.Key("gen_ai.request.max_tokens")
	GenAIResponseModel   = attribute.Key("gen_ai.response.model")
	GenAIFinishReasons   = attribute.Key("gen_ai.response.finish_reasons")
	GenAIInputTokens     = attribute.Key("gen_ai.usage.input_tokens")
	GenAIOutputTokens    = attribute.Key("gen_ai.usage.output_tokens")
	GenAICacheReadTok    = attribute.Key("gen_ai.usage.cache_read.input_tokens")
	GenAICacheWriteTok   = attribute.Key("gen_ai.usage.cache_creation.input_tokens")
	GenAIToolName        = attribute.Key("gen_ai.tool.name")
	GenAIToolCallID      = attribute.Key("gen_ai.tool.call.id")
	ErrorType            = attribute.Key("error.type")
	CostUSD              = attribute.Key("spool.cost_usd")
	ThreadID             = attribute.Key("spool.thread_id")
	Directive            = attribute.Key("spool.directive")
	ParentID             = attribute.Key("spool.parent_id")
	PreviousThreadID     = attribute.Key("spool.previous_thread_id")
	ChainRootID          = attribute.Key("spool.chain_root_id")
	Status               = attribute.Key("spool.status")
	Turn                 = attribute.Key("spool.turn")
	Turns                = attribute.Key("spool.turns")
	Attempt              = attribute.Key("spool.attempt")
	ActivationReason     = attribute.Key("spool.activation.reason")
	ActivationNumber     = attribute.Key("spool.activation.number")
	ActivationEnd        = attribute.Key("spool.activation.end")
	TurnEnd              = attribute.Key("spool.turn.end")
	ChildThreadID        = attribute.Key("spool.child.thread_id")
	ChildDirective       = attribute.Key("spool.child.directive")
	SpawnAsync           = attribute.Key("spool.spawn.async")
	ContinuationThreadID = attribute.Key("spool.continuation_thread_id")
	// A graph run's activation and steps: its graph, and a step's node,
	// number, node kind, attempt and status (ok, error, retry, waiting,
	// handed_back, failed).
	Graph        = attribute.Key("spool.graph")
	GraphNode    = attribute.Key("spool.graph.node")
	GraphStep    = attribute.Key("spool.graph.step")
	GraphKind    = attribute.Key("spool.graph.kind")
	GraphAttempt = attribute.Key("spool.graph.attempt")
	GraphStatus  = attribute.Key("spool.graph.status")
	// A run's tenant and priority (its root's), on its span and each of
	// its activations'; and, on the span of a start that named an
	// idempotency key, whether it answered a run an earlier start of the
	// key made instead of starting one.
	Tenant              = attribute.Key("spool.tenant")
	Priority            = attribute.Key("spool.priority")
	IdempotencyReplayed = attribute.Key("spool.idempotency.replayed")
	// An activation's admission (package admission): its class (0 a tree
	// already started, 1 a root chain's first), how long it waited from
	// its request to its grant and what for, and its run's concurrency
	// keys (RULE=VALUE).
	AdmissionClass  = attribute.Key("spool.admission.class")
	AdmissionWaitMS = attribute.Key("spool.admission.wait_ms")
	AdmissionReason = attribute.Key("spool.admission.reason")
	ConcurrencyKeys = attribute.Key("spool.concurrency_keys")
)

// EventAdmissionYield is the event of an activation that yields its slot
// to its tenant's fair share (it hands its thread back to wait for
// admission again).
const EventAdmissionYield = "admission.yield"

// Operation names (gen_ai.operation.name).
const (
	OpChat        = "chat"
	OpExecuteTool = "execute_tool"
)

// Tracer returns spool's tracer of tp; a nil tp is the no-op provider.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return noopTracer
	}
	return tp.Tracer(ScopeName)
}

var (
	noopTracer   = noop.NewTracerProvider().Tracer(ScopeName)
	traceContext = propagation.TraceContext{}
)

// Format renders sc as a W3C traceparent; "" for an invalid sc.
func Format(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	traceContext.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
	return c.Get("traceparent")
}

// Parse reads a W3C traceparent as a remote span context; false when s is
// empty or not one.
func Parse(s string) (trace.SpanContext, bool) {
	if s == "" {
		return trace.SpanContext{}, false
	}
	ctx := traceContext.Extract(context.Background(), propagation.MapCarrier{"traceparent": s})
	sc := trace.SpanContextFromContext(ctx)
	return sc, sc.IsValid()
}

// FromContext is the traceparent of the span in ctx; "" for none.
func FromContext(ctx context.Context) string {
	return Format(trace.SpanContextFromContext(ctx))
}

// TraceID is the trace id (32 hex digits) of a traceparent; "" when s is
// not one.
func TraceID(s string) string {
	sc, ok := Parse(s)
	if !ok {
		return ""
	}
	return sc.TraceID().String()
}

// NewThreadSpan mints the span context of a new thread's span (see the
// package doc): caller's trace id and sampling flag, or a new trace id,
// sampled, when caller is not valid; always a new span id. Ids are drawn
// even when nothing traces: a thread's trace is known from its start.
func NewThreadSpan(caller trace.SpanContext) trace.SpanContext {
	cfg := trace.SpanContextConfig{TraceID: caller.TraceID(), SpanID: NewSpanID(), TraceFlags: caller.TraceFlags(), Remote: true}
	if !caller.IsValid() {
		cfg.TraceID, cfg.TraceFlags = NewTraceID(), trace.FlagsSampled
	}
	return trace.NewSpanContext(cfg)
}

// NewTraceID is a random, valid trace id.
func NewTraceID() trace.TraceID {
	var id trace.TraceID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:8], rand.Uint64())
		binary.BigEndian.PutUint64(id[8:], rand.Uint64())
	}
	return id
}

// NewSpanID is a random, valid span id.
func NewSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}

type fixedKey struct{}

// WithSpanContext asks the id generator of telemetry/otlp to give the next
// span started with ctx (and only it: start nothing else from ctx) the
// trace and span id of sc: a thread's span, recorded when the thread ends
// with the ids its activations named as their parent all along.
func WithSpanContext(ctx context.Context, sc trace.SpanContext) context.Context {
	return context.WithValue(ctx, fixedKey{}, sc)
}

// SpanContextOf is what WithSpanContext put in ctx.
func SpanContextOf(ctx context.Context) (trace.SpanContext, bool) {
	sc, ok := ctx.Value(fixedKey{}).(trace.SpanContext)
	return sc, ok && sc.IsValid()
}

// RecordEnded records a span that ran from start to end with the ids of
// own (WithSpanContext), as a child of caller, or a root of own's trace
// when caller is not valid; failure, when not "", is its error status.
// Nothing else is started from its context.
func RecordEnded(tr trace.Tracer, name string, own, caller trace.SpanContext, start, end time.Time, failure string, attrs ...attribute.KeyValue) {
	ctx := context.Background()
	opts := []trace.SpanStartOption{trace.WithTimestamp(start), trace.WithAttributes(attrs...)}
	if caller.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, caller)
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	_, span := tr.Start(WithSpanContext(ctx, own), name, opts...)
	if failure != "" {
		span.SetStatus(codes.Error, failure)
	}
	span.End(trace.WithTimestamp(end))
}

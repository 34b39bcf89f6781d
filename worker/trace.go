package worker

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/telemetry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// The worker's spans (package telemetry): an activation, under its
// thread's span (the registry's trace_parent), linked to the span that
// enqueued it; in it, a span per turn, and in a turn, a span per model
// call attempt ("chat MODEL", GenAI attributes), per tool call
// ("execute_tool TOOL") and per spawn. With no SDK installed they are the
// API's no-op spans; the context still carries the thread's span
// context, so the children and continuations a worker starts inherit the
// trace.

// startActivation starts the span of an activation of rec.
func (w *Worker) startActivation(ctx context.Context, act queue.Activation, rec *registry.Record) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(telemetry.ThreadID.String(rec.ThreadID), telemetry.Directive.String(rec.Directive),
			telemetry.ActivationReason.String(act.Reason), telemetry.ActivationNumber.Int64(rec.Activation),
			telemetry.Tenant.String(rec.TenantOrDefault()), telemetry.Priority.Int(rec.PriorityOrDefault())),
	}
	if rec.IsGraph() {
		opts = append(opts, trace.WithAttributes(telemetry.Graph.String(rec.Directive)))
	}
	enqueuer, linked := telemetry.Parse(act.TraceParent)
	if own, ok := telemetry.Parse(rec.TraceParent); ok {
		ctx = trace.ContextWithRemoteSpanContext(ctx, own)
	} else if linked {
		// A thread registered before spool traced: the enqueuer's trace.
		ctx = trace.ContextWithRemoteSpanContext(ctx, enqueuer)
	}
	if linked {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: enqueuer}))
	}
	return w.o.Tracer().Start(ctx, telemetry.SpanActivation, opts...)
}

// endActivation ends an activation's span: how it ended (finished with
// the thread's status, handed_off, suspended, handed_back, stopped), and
// an error status when it failed.
func endActivation(span trace.Span, err error, f *final, handedOff bool) {
	end := "suspended"
	switch {
	case errors.Is(err, errDraining) || errors.Is(err, errRetryLater):
		end = "handed_back"
	case errors.Is(err, errLeaseLost), errors.Is(err, registry.ErrConflict), errors.Is(err, transcript.ErrSegmentExists):
		end = "taken_over" // another activation holds the thread
	case err != nil:
		end = "failed"
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	case handedOff && f != nil && f.Status == thread.StatusContinued:
		end = "handed_off"
	case f != nil:
		end = "finished"
		span.SetAttributes(telemetry.Status.String(string(f.Status)))
	}
	span.SetAttributes(telemetry.ActivationEnd.String(end))
	span.End()
}

// turnTracer starts and ends the spans inside a thread's activation: its
// turns, each attempt at a model call, each tool call and each spawn. It
// holds what their attributes need (the thread, its model and provider,
// the providers' routing) and nothing of the session, so that a step
// traces through it without reaching into the session's state.
type turnTracer struct {
	tracer trace.Tracer
	thread string
	// model and prov price a response (endModelCall).
	model string
	prov  provider.Provider
	// providers route a model to its API (startModelCall).
	providers *provider.Config
}

// newTurnTracer is the tracer of rec's activation, whose model prov calls.
func newTurnTracer(tracer trace.Tracer, rec *registry.Record, prov provider.Provider, providers *provider.Config) *turnTracer {
	return &turnTracer{tracer: tracer, thread: rec.ThreadID, model: rec.Model, prov: prov, providers: providers}
}

// startTurn starts the span of the thread's turn number turn.
func (t *turnTracer) startTurn(ctx context.Context, turn int) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, telemetry.SpanTurn, trace.WithAttributes(
		telemetry.ThreadID.String(t.thread), telemetry.Turn.Int(turn)))
}

// endTurn ends a turn's span with where the turn led.
func endTurn(span trace.Span, o outcome, err error) {
	end := "proceed"
	switch {
	case err != nil:
		end = "failed"
		span.SetStatus(codes.Error, err.Error())
	case o.kind == finish:
		end = "finish"
	case o.kind == suspend:
		end = "suspend:" + o.reason
	case o.kind == handBack:
		end = "hand_back:" + o.reason
	case o.kind == handOff:
		end = "hand_off"
	}
	span.SetAttributes(telemetry.TurnEnd.String(end))
	span.End()
}

// startModelCall starts the span of one attempt at a model call, as the
// GenAI semantic conventions name it: the request's model is the name
// the provider was sent (provider.WireModel: "mock-1" of a thread on
// "openai/mock-1"); the thread's span keeps the thread's spelling.
func (t *turnTracer) startModelCall(ctx context.Context, req *provider.Request, attempt int) (context.Context, trace.Span) {
	api, _ := provider.Route(req.Model, *t.providers)
	if api == "script" {
		api = "spool.script"
	}
	model := provider.WireModel(req.Model, *t.providers)
	return t.tracer.Start(ctx, telemetry.OpChat+" "+model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		telemetry.GenAIOperation.String(telemetry.OpChat), telemetry.GenAIProvider.String(api),
		telemetry.GenAIRequestModel.String(model), telemetry.GenAIRequestMaxTok.Int(req.MaxTokens),
		telemetry.ThreadID.String(t.thread), telemetry.Turn.Int(req.Thread.Turn), telemetry.Attempt.Int(attempt+1)))
}

// endModelCall ends a model call's span with the response's usage and
// cost, or its error's class. gen_ai.usage.input_tokens counts the whole
// prompt, cached tokens included, as the conventions ask (spool's own
// cost counts cache reads and writes apart).
func (t *turnTracer) endModelCall(span trace.Span, resp *provider.Response, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	if err != nil {
		span.SetAttributes(telemetry.ErrorType.String(provider.Classify(err).Class))
		span.SetStatus(codes.Error, err.Error())
		return
	}
	u := resp.Usage
	attrs := []attribute.KeyValue{
		telemetry.GenAIInputTokens.Int(u.PromptTokens()), telemetry.GenAIOutputTokens.Int(u.OutputTokens),
		telemetry.GenAICacheReadTok.Int(u.CacheReadTokens), telemetry.GenAICacheWriteTok.Int(u.CacheWriteTokens),
	}
	if resp.Model != "" {
		attrs = append(attrs, telemetry.GenAIResponseModel.String(resp.Model))
	}
	if resp.StopReason != "" {
		attrs = append(attrs, telemetry.GenAIFinishReasons.StringSlice([]string{resp.StopReason}))
	}
	if cost, err := t.prov.Cost(t.model, u); err == nil {
		attrs = append(attrs, telemetry.CostUSD.Float64(cost))
	}
	span.SetAttributes(attrs...)
}

// startTool starts the span of a tool call.
func (t *turnTracer) startTool(ctx context.Context, call thread.ToolCall, id string) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, telemetry.OpExecuteTool+" "+id, trace.WithAttributes(
		telemetry.GenAIOperation.String(telemetry.OpExecuteTool), telemetry.GenAIToolName.String(id),
		telemetry.GenAIToolCallID.String(call.ID), telemetry.ThreadID.String(t.thread)))
}

// endTool ends a tool call's span; a result the model gets as an error
// (the last message of msgs that answers callID), or a failure of the
// activation, is its error status.
func (t *turnTracer) endTool(span trace.Span, msgs []thread.Message, callID string, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Role == thread.RoleTool && m.ToolCallID == callID {
			if m.IsError {
				span.SetAttributes(telemetry.ErrorType.String("tool_error"))
				span.SetStatus(codes.Error, "the tool's result is an error")
			}
			return
		}
	}
}

// startSpawn starts the span of a spawn of directive; the child's
// thread span is its child.
func (t *turnTracer) startSpawn(ctx context.Context, directive string, async bool) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, telemetry.SpanSpawn, trace.WithAttributes(
		telemetry.ThreadID.String(t.thread), telemetry.ChildDirective.String(directive), telemetry.SpawnAsync.Bool(async)))
}

// endSpawn ends a spawn's span with the child it started, or the refusal.
func endSpawn(span trace.Span, child *registry.Record, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(telemetry.ChildThreadID.String(child.ThreadID))
	}
	span.End()
}

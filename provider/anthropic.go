package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/spool-run/spool/thread"
)

// Anthropic is the Anthropic Messages API adapter.
type Anthropic struct {
	client anthropic.Client
	idle   time.Duration // Config.StreamIdle
	priced
}

// NewAnthropic builds an Anthropic adapter for model, as the thread names
// it ("claude-sonnet-4-5" or "anthropic/claude-sonnet-4-5": the prefix is
// not sent, see wireName). SDK retries are off and the SDK's own
// environment defaults are ignored: key and base URL come from cfg only.
func NewAnthropic(model string, cfg Config, pricing *Pricing) *Anthropic {
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithMaxRetries(0),
		option.WithHTTPClient(cfg.httpClient()),
	}
	if cfg.AnthropicAPIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.AnthropicAPIKey))
	}
	if cfg.AnthropicBaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.AnthropicBaseURL))
	}
	return &Anthropic{client: anthropic.NewClient(opts...), idle: cfg.streamIdle(), priced: priced{api: apiAnthropic, model: model, pricing: pricing}}
}

// Complete implements Provider: streaming (SSE) when onDelta is non-nil, and
// also when the SDK would refuse a long non-streaming call (large MaxTokens).
func (a *Anthropic) Complete(ctx context.Context, req *Request, onDelta func(string)) (resp *Response, err error) {
	defer func() { err = withKeyHint(err, "ANTHROPIC_API_KEY") }()
	names, params, err := prepare(req, a.params)
	if err != nil {
		return nil, err
	}
	// The SDK refuses non-streaming calls it expects to exceed 10 minutes
	// (large max_tokens); those stream without delta callbacks instead.
	_, long := anthropic.CalculateNonStreamingTimeout(int(params.MaxTokens), params.Model, a.client.Options)
	if onDelta == nil && long == nil {
		msg, err := a.client.Messages.New(ctx, params)
		if err != nil {
			return nil, ctxError(ctx, err)
		}
		return anthropicResponse(msg, names), nil
	}
	return a.stream(ctx, params, names, onDelta, req.OnToolDelta)
}

// stream makes the call streaming, each piece of text handed to onDelta
// (when non-nil) and each piece of a tool call's arguments to onTool
// (when non-nil) as it comes, and gathers the response. A stream idle for
// longer than Config.StreamIdle is given up, and one that ends before
// message_stop is an error.
func (a *Anthropic) stream(ctx context.Context, params anthropic.MessageNewParams, names *ToolNames, onDelta func(string), onTool func(ToolDelta)) (*Response, error) {
	ctx, touch, stop := watchIdle(ctx, a.idle)
	defer stop()
	stream := a.client.Messages.NewStreaming(ctx, params)
	defer stream.Close()
	acc := &anthropic.Message{}
	// The tool inputs as streamed: the SDK replaces one that is not
	// JSON (cut at max_tokens, malformed) with {}, which would run the
	// tool with no arguments instead of refusing the call.
	inputs := map[int64][]byte{}
	for stream.Next() {
		touch()
		ev := stream.Current()
		if err := acc.Accumulate(ev); err != nil {
			return nil, &Error{Class: ClassTransient, Message: "malformed stream: " + err.Error(), Err: err}
		}
		if ev.Type == "content_block_delta" && ev.Delta.Type == "input_json_delta" {
			inputs[ev.Index] = append(inputs[ev.Index], ev.Delta.PartialJSON...)
			toolDelta(onTool, acc, ev, names)
		}
		if onDelta != nil && ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta" && ev.Delta.Text != "" {
			onDelta(ev.Delta.Text)
		}
	}
	if err := streamEnd(ctx, stream.Err(), acc.StopReason != "", "before message_stop"); err != nil {
		return nil, err
	}
	for i, in := range inputs {
		if int(i) < len(acc.Content) && acc.Content[i].Type == "tool_use" && len(in) > 0 {
			acc.Content[i].Input = in
		}
	}
	return anthropicResponse(acc, names), nil
}

// toolDelta hands onTool (when non-nil) the piece of a tool call's
// arguments ev carries, naming the call its block in acc.
func toolDelta(onTool func(ToolDelta), acc *anthropic.Message, ev anthropic.MessageStreamEventUnion, names *ToolNames) {
	if onTool == nil || ev.Delta.PartialJSON == "" || int(ev.Index) >= len(acc.Content) {
		return
	}
	b := acc.Content[ev.Index]
	onTool(ToolDelta{Index: int(ev.Index), ID: b.ID, Name: names.ID(b.Name), Args: ev.Delta.PartialJSON})
}

func (a *Anthropic) params(req *Request, names *ToolNames) (anthropic.MessageNewParams, error) {
	p := anthropic.MessageNewParams{
		Model:     anthropic.Model(a.wire(req)),
		MaxTokens: int64(maxTokens(req)),
	}
	for _, t := range req.Tools {
		schema, err := anthropicSchema(t.InputSchema)
		if err != nil {
			return p, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		tp := &anthropic.ToolParam{Name: names.Wire(t.Name), InputSchema: schema}
		if t.Description != "" {
			tp.Description = anthropic.String(t.Description)
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: tp})
	}
	var msgs []anthropic.MessageParam
	// appendUser adds blocks to a trailing user message (so consecutive tool
	// results, and text after them, form one user turn) or starts one.
	appendUser := func(blocks ...anthropic.ContentBlockParamUnion) {
		if n := len(msgs); n > 0 && msgs[n-1].Role == anthropic.MessageParamRoleUser {
			msgs[n-1].Content = append(msgs[n-1].Content, blocks...)
			return
		}
		msgs = append(msgs, anthropic.NewUserMessage(blocks...))
	}
	for i, m := range req.Messages {
		switch m.Role {
		case thread.RoleUser:
			if m.Content != "" {
				appendUser(anthropic.NewTextBlock(m.Content))
			}
		case thread.RoleTool:
			appendUser(anthropic.NewToolResultBlock(m.ToolCallID, m.Content, m.IsError))
		case thread.RoleAssistant:
			var blocks []anthropic.ContentBlockParamUnion
			if m.Content != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Content))
			}
			for _, c := range m.ToolCalls {
				blocks = append(blocks, anthropic.NewToolUseBlock(c.ID, rawInput(c.Input), names.Wire(c.Name)))
			}
			if len(blocks) > 0 {
				msgs = append(msgs, anthropic.NewAssistantMessage(blocks...))
			}
		default:
			return p, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	p.Messages = msgs
	return p, nil
}

func anthropicSchema(raw json.RawMessage) (anthropic.ToolInputSchemaParam, error) {
	var s anthropic.ToolInputSchemaParam
	if len(raw) == 0 {
		return s, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return s, fmt.Errorf("input schema is not a JSON object: %w", err)
	}
	if p, ok := m["properties"]; ok {
		s.Properties = p
	}
	if r, ok := m["required"].([]any); ok {
		for _, v := range r {
			if str, ok := v.(string); ok {
				s.Required = append(s.Required, str)
			}
		}
	}
	extra := map[string]any{}
	for k, v := range m {
		if k != "properties" && k != "required" && k != "type" {
			extra[k] = v
		}
	}
	if len(extra) > 0 {
		s.ExtraFields = extra
	}
	return s, nil
}

func anthropicResponse(msg *anthropic.Message, names *ToolNames) *Response {
	r := &Response{
		StopReason: string(msg.StopReason),
		Model:      string(msg.Model),
		Usage: Usage{
			InputTokens:      int(msg.Usage.InputTokens),
			OutputTokens:     int(msg.Usage.OutputTokens),
			CacheReadTokens:  int(msg.Usage.CacheReadInputTokens),
			CacheWriteTokens: int(msg.Usage.CacheCreationInputTokens),
		},
	}
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			r.Text += b.Text
		case "tool_use":
			r.ToolCalls = append(r.ToolCalls, thread.ToolCall{ID: b.ID, Name: names.ID(b.Name), Input: normaliseInput(string(b.Input))})
		}
	}
	return r
}

// prepare builds a request's wire-name table and, with it, an SDK's
// params; a request either refuses is at fault itself: a permanent error.
func prepare[P any](req *Request, params func(*Request, *ToolNames) (P, error)) (*ToolNames, P, error) {
	names, err := toolNamesFor(req)
	if err == nil {
		var p P
		if p, err = params(req, names); err == nil {
			return names, p, nil
		}
	}
	var zero P
	return nil, zero, &Error{Class: ClassPermanent, Message: err.Error(), Err: err}
}

// toolNamesFor builds the wire-name table of a request: offered tools and
// tools called earlier in the conversation.
func toolNamesFor(req *Request) (*ToolNames, error) {
	var ids []string
	for _, t := range req.Tools {
		ids = append(ids, t.Name)
	}
	for _, m := range req.Messages {
		for _, c := range m.ToolCalls {
			ids = append(ids, c.Name)
		}
	}
	return NewToolNames(ids...)
}

// rawInput is a tool call's input for the wire: {} when empty.
func rawInput(in json.RawMessage) json.RawMessage {
	if len(in) == 0 {
		return json.RawMessage(`{}`)
	}
	return in
}

// normaliseInput makes a model's tool arguments valid JSON: empty becomes
// {}, invalid JSON (a truncated or malformed generation) becomes a JSON
// string holding the text, which a tool's input validation then rejects so
// the model sees the error.
func normaliseInput(s string) json.RawMessage {
	if s == "" {
		return json.RawMessage(`{}`)
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}

// priced is what an SDK adapter knows of its model: its API, the default
// model id (as the thread names it), and the pricing table that prices it
// and knows its context window.
type priced struct {
	api     string
	model   string
	pricing *Pricing
}

// wire is the model name req's call sends: req's model (else the
// adapter's) without the prefix that routed it to this API.
func (p priced) wire(req *Request) string {
	return wireName(p.api, orDefault(req.Model, p.model))
}

// ContextWindow implements Provider.
func (p priced) ContextWindow(model string) int {
	return p.pricing.ContextWindow(orDefault(model, p.model))
}

// Cost implements Provider.
func (p priced) Cost(model string, u Usage) (float64, error) {
	return p.pricing.Cost(orDefault(model, p.model), u)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

var _ Provider = (*Anthropic)(nil)

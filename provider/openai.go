package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/spool-run/spool/thread"
)

// OpenAI is the OpenAI-compatible Chat Completions adapter (OpenAI, vLLM,
// Ollama, llama.cpp server, OpenRouter ...).
//
// Wire choices: the output cap is sent as max_completion_tokens to OpenAI
// itself (no base URL configured; o-series models reject max_tokens) and as
// max_tokens to other servers (what vLLM, Ollama and llama.cpp accept).
// Chat Completions has no is_error flag on tool messages, so a failed tool
// result is sent with an "error: " prefix.
type OpenAI struct {
	client openai.Client
	custom bool          // a base URL is configured: an OpenAI-compatible server
	idle   time.Duration // Config.StreamIdle
	priced
}

// NewOpenAI builds an OpenAI-compatible adapter for model, as the thread
// names it ("gpt-4o", "openai/meta-llama/Llama-3-8B": the "openai/"
// prefix is not sent, see wireName), with SDK retries off. The base URL comes from cfg
// (default https://api.openai.com/v1); an empty cfg key leaves the SDK's
// OPENAI_API_KEY fallback, and no key at all is fine for local servers.
func NewOpenAI(model string, cfg Config, pricing *Pricing) *OpenAI {
	opts := []option.RequestOption{
		option.WithMaxRetries(0),
		option.WithHTTPClient(cfg.httpClient()),
	}
	if cfg.OpenAIAPIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.OpenAIAPIKey))
	}
	base := cfg.OpenAIBaseURL
	if base == "" {
		base = "https://api.openai.com/v1/" // not the SDK's OPENAI_BASE_URL fallback: cfg decides
	}
	opts = append(opts, option.WithBaseURL(base))
	return &OpenAI{client: openai.NewClient(opts...), custom: cfg.OpenAIBaseURL != "", idle: cfg.streamIdle(),
		priced: priced{api: apiOpenAI, model: model, pricing: pricing}}
}

// Complete implements Provider: streaming (with stream_options.include_usage)
// when onDelta is non-nil.
func (o *OpenAI) Complete(ctx context.Context, req *Request, onDelta func(string)) (resp *Response, err error) {
	defer func() { err = withKeyHint(err, "OPENAI_API_KEY") }()
	names, params, err := prepare(req, o.params)
	if err != nil {
		return nil, err
	}
	if onDelta == nil {
		return o.complete(ctx, params, names)
	}
	return o.stream(ctx, params, names, onDelta, req.OnToolDelta)
}

// complete makes the call without streaming: the first choice's text,
// finish reason and tool calls.
func (o *OpenAI) complete(ctx context.Context, params openai.ChatCompletionNewParams, names *ToolNames) (*Response, error) {
	cc, err := o.client.Chat.Completions.New(ctx, params)
	if err != nil {
		return nil, ctxError(ctx, err)
	}
	r := &Response{Model: cc.Model, Usage: openaiUsage(cc.Usage)}
	if len(cc.Choices) > 0 {
		ch := cc.Choices[0]
		r.Text, r.StopReason = ch.Message.Content, ch.FinishReason
		for _, tc := range ch.Message.ToolCalls {
			r.ToolCalls = append(r.ToolCalls, thread.ToolCall{ID: tc.ID, Name: names.ID(tc.Function.Name), Input: normaliseInput(tc.Function.Arguments)})
		}
	}
	return r, nil
}

// stream makes the call streaming, with the usage in the last chunk, each
// piece of text handed to onDelta as it comes. A stream idle for longer
// than Config.StreamIdle is given up, and one that ends without a finish
// reason is an error.
func (o *OpenAI) stream(ctx context.Context, params openai.ChatCompletionNewParams, names *ToolNames, onDelta func(string), onTool func(ToolDelta)) (*Response, error) {
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	ctx, touch, stop := watchIdle(ctx, o.idle)
	defer stop()
	stream := o.client.Chat.Completions.NewStreaming(ctx, params)
	defer stream.Close()
	acc := &openaiStream{calls: map[int64]*openaiCall{}, onDelta: onDelta, onTool: onTool, names: names}
	for stream.Next() {
		touch()
		acc.chunk(stream.Current())
	}
	if err := streamEnd(ctx, stream.Err(), acc.r.StopReason != "", "without a finish_reason"); err != nil {
		return nil, err
	}
	return acc.response(names), nil
}

// openaiStream gathers a streamed response from its chunks: the text, the
// tool calls by index, the model, usage and finish reason.
type openaiStream struct {
	r       Response
	text    strings.Builder
	calls   map[int64]*openaiCall
	onDelta func(string)
	// onTool gets each piece of a call's arguments (nil: none does);
	// names maps the wire's tool names back.
	onTool func(ToolDelta)
	names  *ToolNames
}

// openaiCall is a tool call gathered from the stream: its id and name, and
// its arguments as they came.
type openaiCall struct {
	id, name string
	args     strings.Builder
}

// chunk adds a chunk of the stream: of its choices only the first
// (index 0) counts, its text passed on to onDelta.
func (s *openaiStream) chunk(chunk openai.ChatCompletionChunk) {
	if chunk.Model != "" {
		s.r.Model = chunk.Model
	}
	if chunk.JSON.Usage.Valid() && chunk.Usage.JSON.PromptTokens.Valid() {
		s.r.Usage = openaiUsage(chunk.Usage)
	}
	for _, ch := range chunk.Choices {
		if ch.Index != 0 {
			continue
		}
		if ch.Delta.Content != "" {
			s.text.WriteString(ch.Delta.Content)
			s.onDelta(ch.Delta.Content)
		}
		for _, tc := range ch.Delta.ToolCalls {
			s.toolCall(tc)
		}
		if ch.FinishReason != "" {
			s.r.StopReason = ch.FinishReason
		}
	}
}

// toolCall adds a piece of a tool call to the call of its index: the id
// when given, a piece of the name, a piece of the arguments.
func (s *openaiStream) toolCall(tc openai.ChatCompletionChunkChoiceDeltaToolCall) {
	p := s.calls[tc.Index]
	if p == nil {
		p = &openaiCall{}
		s.calls[tc.Index] = p
	}
	if tc.ID != "" {
		p.id = tc.ID
	}
	if tc.Function.Name != "" {
		p.name += tc.Function.Name
	}
	p.args.WriteString(tc.Function.Arguments)
	if s.onTool != nil && tc.Function.Arguments != "" {
		s.onTool(ToolDelta{Index: int(tc.Index), ID: callID(p.id, tc.Index), Name: s.names.ID(p.name), Args: tc.Function.Arguments})
	}
}

// callID is a streamed call's id: the one the stream gave, else
// call_<index>.
func callID(id string, index int64) string {
	if id == "" {
		return fmt.Sprintf("call_%d", index)
	}
	return id
}

// response is the gathered response, its tool calls in the order of their
// indexes; a call the stream gave no id is call_<index>.
func (s *openaiStream) response(names *ToolNames) *Response {
	r := &s.r
	r.Text = s.text.String()
	idx := make([]int64, 0, len(s.calls))
	for i := range s.calls {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	for _, i := range idx {
		p := s.calls[i]
		r.ToolCalls = append(r.ToolCalls, thread.ToolCall{ID: callID(p.id, i), Name: names.ID(p.name), Input: normaliseInput(p.args.String())})
	}
	return r
}

// openaiUsage normalises Chat Completions usage: prompt_tokens include
// cached tokens (and, on servers that report it, cache writes), which are
// moved out of InputTokens.
func openaiUsage(u openai.CompletionUsage) Usage {
	cached := int(u.PromptTokensDetails.CachedTokens)
	written := int(u.PromptTokensDetails.CacheWriteTokens)
	in := int(u.PromptTokens) - cached - written
	if in < 0 {
		in = 0
	}
	return Usage{InputTokens: in, OutputTokens: int(u.CompletionTokens), CacheReadTokens: cached, CacheWriteTokens: written}
}

func (o *OpenAI) params(req *Request, names *ToolNames) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(o.wire(req))}
	if o.custom {
		p.MaxTokens = openai.Int(int64(maxTokens(req)))
	} else {
		p.MaxCompletionTokens = openai.Int(int64(maxTokens(req)))
	}
	for _, t := range req.Tools {
		fd := shared.FunctionDefinitionParam{Name: names.Wire(t.Name)}
		if t.Description != "" {
			fd.Description = openai.String(t.Description)
		}
		if len(t.InputSchema) > 0 {
			var params map[string]any
			if err := json.Unmarshal(t.InputSchema, &params); err != nil {
				return p, fmt.Errorf("tool %q: input schema is not a JSON object: %w", t.Name, err)
			}
			fd.Parameters = params
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fd))
	}
	for i, m := range req.Messages {
		switch m.Role {
		case thread.RoleUser:
			p.Messages = append(p.Messages, openai.UserMessage(m.Content))
		case thread.RoleTool:
			content := m.Content
			if m.IsError {
				content = "error: " + content
			}
			p.Messages = append(p.Messages, openai.ToolMessage(content, m.ToolCallID))
		case thread.RoleAssistant:
			am := &openai.ChatCompletionAssistantMessageParam{}
			if m.Content != "" || len(m.ToolCalls) == 0 {
				am.Content.OfString = openai.String(m.Content)
			}
			for _, c := range m.ToolCalls {
				am.ToolCalls = append(am.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: c.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name: names.Wire(c.Name), Arguments: string(rawInput(c.Input)),
						},
					},
				})
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: am})
		default:
			return p, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	return p, nil
}

var _ Provider = (*OpenAI)(nil)

package provider

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

func anthropicFor(t *testing.T, f *fakeAPI) Provider {
	t.Helper()
	p, err := New("claude-sonnet-4-5", Config{AnthropicAPIKey: "sk-ant-test", AnthropicBaseURL: f.srv.URL})
	require.NoError(t, err)
	require.IsType(t, &Anthropic{}, p)
	return p
}

func toolRequest() *Request {
	return &Request{
		MaxTokens: 1000,
		Tools: []thread.ToolDef{
			{Name: "rye/file-system/fs_write", Description: "Write a file", InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path"],"additionalProperties":false}`)},
			{Name: "rye/agent/threads/directive_return", Description: "Return outputs", InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)},
		},
		Messages: []thread.Message{
			{Role: thread.RoleUser, Content: "Write two files."},
			{Role: thread.RoleAssistant, Content: "Writing.", ToolCalls: []thread.ToolCall{
				{ID: "toolu_a", Name: "rye/file-system/fs_write", Input: json.RawMessage(`{"path":"a.txt","content":"a"}`)},
				{ID: "toolu_b", Name: "rye/file-system/fs_write", Input: json.RawMessage(`{"path":"/etc/x","content":"b"}`)},
			}},
			{Role: thread.RoleTool, ToolCallID: "toolu_a", ToolName: "rye/file-system/fs_write", Content: "wrote a.txt"},
			{Role: thread.RoleTool, ToolCallID: "toolu_b", ToolName: "rye/file-system/fs_write", Content: "permission denied", IsError: true},
		},
	}
}

const anthropicToolUseJSON = `{
  "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-5-20250929",
  "content": [
    {"type": "text", "text": "I'll return now."},
    {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "rye__agent__threads__directive_return", "input": {"summary": "done", "count": 2}}
  ],
  "stop_reason": "tool_use",
  "stop_sequence": null,
  "usage": {"input_tokens": 472, "cache_creation_input_tokens": 1200, "cache_read_input_tokens": 8000, "output_tokens": 91, "service_tier": "standard"}
}`

func TestAnthropicNonStreamingToolUse(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, reply(200, anthropicToolUseJSON, "request-id: req_1"))
	p := anthropicFor(t, f)
	resp, err := p.Complete(context.Background(), toolRequest(), nil)
	require.NoError(t, err)
	requireResponse(t, &Response{Text: "I'll return now.", StopReason: "tool_use", Model: "claude-sonnet-4-5-20250929",
		Usage:     Usage{InputTokens: 472, OutputTokens: 91, CacheReadTokens: 8000, CacheWriteTokens: 1200},
		ToolCalls: []thread.ToolCall{{ID: "toolu_01A09q90qw90lq917835lq9", Name: "rye/agent/threads/directive_return", Input: json.RawMessage(`{"summary":"done","count":2}`)}}}, resp)

	// The wire request.
	require.EqualValues(t, 1, f.calls.Load())
	require.Equal(t, "/v1/messages", f.paths[0])
	require.Equal(t, "sk-ant-test", f.heads[0].Get("X-Api-Key"))
	b := f.body(0)
	require.Equal(t, "claude-sonnet-4-5", b["model"])
	require.EqualValues(t, 1000, b["max_tokens"])
	require.Nil(t, b["stream"])
	tools := b["tools"].([]any)
	require.Len(t, tools, 2)
	tool0 := tools[0].(map[string]any)
	require.Equal(t, "rye__file-system__fs_write", tool0["name"])
	require.Equal(t, "Write a file", tool0["description"])
	schema := tool0["input_schema"].(map[string]any)
	require.Equal(t, "object", schema["type"])
	require.Equal(t, []any{"path"}, schema["required"])
	require.Equal(t, false, schema["additionalProperties"])
	require.Contains(t, schema["properties"], "content")

	msgs := b["messages"].([]any)
	require.Len(t, msgs, 3, "the two tool results form one user message")
	asst := msgs[1].(map[string]any)
	require.Equal(t, "assistant", asst["role"])
	blocks := asst["content"].([]any)
	require.Len(t, blocks, 3)
	use := blocks[1].(map[string]any)
	require.Equal(t, "tool_use", use["type"])
	require.Equal(t, "toolu_a", use["id"])
	require.Equal(t, "rye__file-system__fs_write", use["name"])
	require.Equal(t, map[string]any{"path": "a.txt", "content": "a"}, use["input"])
	results := msgs[2].(map[string]any)
	require.Equal(t, "user", results["role"])
	rb := results["content"].([]any)
	require.Len(t, rb, 2)
	r0, r1 := rb[0].(map[string]any), rb[1].(map[string]any)
	require.Equal(t, "tool_result", r0["type"])
	require.Equal(t, "toolu_a", r0["tool_use_id"])
	require.Equal(t, false, r0["is_error"])
	require.Equal(t, "toolu_b", r1["tool_use_id"])
	require.Equal(t, true, r1["is_error"])
}

func ev(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }

var anthropicStream = []string{
	ev("message_start", `{"type":"message_start","message":{"id":"msg_014p7gG3wDgGV9EUtLvnow3U","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"cache_creation_input_tokens":0,"cache_read_input_tokens":3000,"output_tokens":2}}}`),
	ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
	ev("ping", `{"type": "ping"}`),
	ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay, let"}}`),
	ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"'s write it."}}`),
	ev("content_block_stop", `{"type":"content_block_stop","index":0}`),
	ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"rye__file-system__fs_write","input":{}}}`),
	ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}`),
	ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"path\": \"out/a"}}`),
	ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":".txt\", \"content\": \"hel"}}`),
	ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"lo\"}"}}`),
	ev("content_block_stop", `{"type":"content_block_stop","index":1}`),
	ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}`),
	ev("message_stop", `{"type":"message_stop"}`),
}

func TestAnthropicStreamingToolUse(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, sse(anthropicStream...))
	p := anthropicFor(t, f)
	resp, deltas := streamed(t, p, toolRequest())
	require.Equal(t, []string{"Okay, let", "'s write it."}, deltas)
	requireResponse(t, &Response{Text: "Okay, let's write it.", StopReason: "tool_use", Model: "claude-sonnet-4-5-20250929",
		Usage:     Usage{InputTokens: 472, OutputTokens: 89, CacheReadTokens: 3000},
		ToolCalls: []thread.ToolCall{{ID: "toolu_01T1x1fJ34qAmk2tNTrN7Up6", Name: "rye/file-system/fs_write", Input: json.RawMessage(`{"path":"out/a.txt","content":"hello"}`)}}}, resp)
	require.Equal(t, true, f.body(0)["stream"])
	require.EqualValues(t, 1, f.calls.Load())
}

func TestAnthropicStreamingText(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, sse(
		ev("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-haiku-4-5-20251001","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":500,"cache_read_input_tokens":0,"output_tokens":1}}}`),
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`),
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" world"}}`),
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`),
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}`),
		ev("message_stop", `{"type":"message_stop"}`),
	))
	p := anthropicFor(t, f)
	resp, deltas := streamed(t, p, hi())
	require.Equal(t, "Hello world", resp.Text)
	require.Equal(t, []string{"Hello", " world"}, deltas)
	require.Empty(t, resp.ToolCalls)
	require.Equal(t, "end_turn", resp.StopReason)
	require.Equal(t, Usage{InputTokens: 10, OutputTokens: 15, CacheWriteTokens: 500}, resp.Usage)
	require.EqualValues(t, DefaultMaxTokens, f.body(0)["max_tokens"])
	_, hasTools := f.body(0)["tools"]
	require.False(t, hasTools)
}

func TestAnthropicErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		handler   func() *fakeAPI
		stream    bool
		class     string
		status    int
		retry     time.Duration
		quota     bool
		msgSubstr string
	}{
		{name: "429 retry-after", class: ClassRateLimited, status: 429, retry: 7 * time.Second, msgSubstr: "rate limit",
			handler: func() *fakeAPI {
				return newFakeAPI(t, reply(429, `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 50,000 input tokens per minute."}}`, "retry-after: 7", "anthropic-ratelimit-input-tokens-remaining: 0"))
			}},
		{name: "429 retry-after-ms wins", class: ClassRateLimited, status: 429, retry: 1500 * time.Millisecond, stream: true,
			handler: func() *fakeAPI {
				return newFakeAPI(t, reply(429, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`, "retry-after: 2", "retry-after-ms: 1500"))
			}},
		{name: "529 overloaded: slow down", class: ClassRateLimited, status: 529, msgSubstr: "Overloaded",
			handler: func() *fakeAPI {
				return newFakeAPI(t, reply(529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
			}},
		{name: "500 api_error", class: ClassTransient, status: 500, stream: true,
			handler: func() *fakeAPI {
				return newFakeAPI(t, reply(500, `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`))
			}},
		{name: "401 invalid key", class: ClassPermanent, status: 401, msgSubstr: "invalid x-api-key (check ANTHROPIC_API_KEY on the worker)",
			handler: func() *fakeAPI {
				return newFakeAPI(t, reply(401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`))
			}},
		{name: "403 from a compatible server that calls it an api_error", class: ClassPermanent, status: 403, stream: true, msgSubstr: "check ANTHROPIC_API_KEY",
			handler: func() *fakeAPI {
				return newFakeAPI(t, reply(403, `{"type":"error","error":{"type":"api_error","message":"key not allowed"}}`))
			}},
		{name: "400 credit balance", class: ClassPermanent, status: 400, quota: true,
			handler: func() *fakeAPI {
				return newFakeAPI(t, reply(400, `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}}`))
			}},
		{name: "mid-stream overloaded: slow down", class: ClassRateLimited, stream: true, msgSubstr: "Overloaded",
			handler: func() *fakeAPI {
				return newFakeAPI(t, sse(anthropicStream[0], anthropicStream[1],
					ev("error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)))
			}},
		{name: "stream cut before message_stop", class: ClassTransient, stream: true,
			handler: func() *fakeAPI { return newFakeAPI(t, sse(anthropicStream[:5]...)) }},
		{name: "malformed body", class: ClassTransient, msgSubstr: "malformed response",
			handler: func() *fakeAPI { return newFakeAPI(t, reply(200, `{malformed json: <<<chaos>>>`)) }},
		{name: "malformed stream event", class: ClassTransient, stream: true, msgSubstr: "malformed response",
			handler: func() *fakeAPI {
				return newFakeAPI(t, sse(anthropicStream[0], anthropicStream[1], ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay`)))
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := tc.handler()
			pe := completeError(t, f, anthropicFor(t, f), tc.stream, Error{Class: tc.class, StatusCode: tc.status, RetryAfter: tc.retry, Quota: tc.quota})
			if tc.msgSubstr != "" {
				require.Contains(t, pe.Message, tc.msgSubstr)
			}
		})
	}
}

func TestAnthropicCancelMidStream(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, sseThenHang(anthropicStream[:4]...))
	p := anthropicFor(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := ""
	_, err := p.Complete(ctx, hi(), func(s string) {
		got += s
		cancel()
	})
	var pe *Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, ClassCancelled, pe.Class, "error: %v", err)
	require.True(t, errors.Is(err, context.Canceled))
	require.Equal(t, "Okay, let", got)
	require.EqualValues(t, 1, f.calls.Load())
}

func TestAnthropicLargeMaxTokensStreamsWithoutCallback(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, sse(anthropicStream...))
	p := anthropicFor(t, f)
	req := toolRequest()
	req.MaxTokens = 64000 // the SDK refuses this without streaming
	resp, err := p.Complete(context.Background(), req, nil)
	require.NoError(t, err)
	require.Equal(t, "Okay, let's write it.", resp.Text)
	require.Equal(t, true, f.body(0)["stream"])
	require.EqualValues(t, 64000, f.body(0)["max_tokens"])
}

func TestAnthropicStreamingCutToolInput(t *testing.T) {
	t.Parallel()
	// max_tokens ends the answer inside a tool call's arguments: the API
	// still closes the block. The call must reach the tool as the text the
	// model wrote (a JSON string, which input validation refuses), never as
	// {}, which would run directive_return or a tool without its arguments.
	cut := func(stop, partial string) []string {
		return []string{
			anthropicStream[0],
			ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"rye__agent__threads__directive_return","input":{}}}`),
			ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":""}}`),
			ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":`+partial+`}}`),
			ev("content_block_stop", `{"type":"content_block_stop","index":0}`),
			ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"`+stop+`","stop_sequence":null},"usage":{"output_tokens":1000}}`),
			ev("message_stop", `{"type":"message_stop"}`),
		}
	}
	cases := []struct {
		name, stop, partial, want string
	}{
		{"cut at max_tokens", "max_tokens", `"{\"result\": \"the first half of"`, `"{\"result\": \"the first half of"`},
		{"malformed", "tool_use", `"{\"result\": done}"`, `"{\"result\": done}"`},
		{"valid", "tool_use", `"{\"result\": \"done\"}"`, `{"result":"done"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeAPI(t, sse(cut(tc.stop, tc.partial)...))
			resp, _ := streamed(t, anthropicFor(t, f), toolRequest())
			require.Equal(t, tc.stop, resp.StopReason)
			requireResponse(t, &Response{StopReason: tc.stop, Model: "claude-sonnet-4-5-20250929",
				Usage:     Usage{InputTokens: 472, OutputTokens: 1000, CacheReadTokens: 3000},
				ToolCalls: []thread.ToolCall{{ID: "toolu_1", Name: "rye/agent/threads/directive_return", Input: json.RawMessage(tc.want)}}}, resp)
		})
	}
}

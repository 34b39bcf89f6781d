package provider

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

func openaiFor(t *testing.T, f *fakeAPI, model string) Provider {
	t.Helper()
	p, err := New(model, Config{OpenAIAPIKey: "sk-test", OpenAIBaseURL: f.srv.URL + "/v1"})
	require.NoError(t, err)
	require.IsType(t, &OpenAI{}, p)
	return p
}

const openaiToolCallJSON = `{
  "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
  "object": "chat.completion",
  "created": 1741570283,
  "model": "gpt-4o-2024-08-06",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": null,
        "tool_calls": [
          {"id": "call_abc123", "type": "function", "function": {"name": "rye__file-system__fs_write", "arguments": "{\"path\":\"a.txt\",\"content\":\"hi\"}"}},
          {"id": "call_def456", "type": "function", "function": {"name": "rye__agent__threads__directive_return", "arguments": ""}}
        ],
        "refusal": null,
        "annotations": []
      },
      "logprobs": null,
      "finish_reason": "tool_calls"
    }
  ],
  "usage": {
    "prompt_tokens": 2006,
    "completion_tokens": 300,
    "total_tokens": 2306,
    "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
  },
  "service_tier": "default",
  "system_fingerprint": "fp_fc9f1d7035"
}`

func TestOpenAINonStreamingToolCalls(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, reply(200, openaiToolCallJSON))
	p := openaiFor(t, f, "gpt-4o")
	resp, err := p.Complete(context.Background(), toolRequest(), nil)
	require.NoError(t, err)
	requireResponse(t, &Response{StopReason: "tool_calls", Model: "gpt-4o-2024-08-06",
		Usage: Usage{InputTokens: 86, OutputTokens: 300, CacheReadTokens: 1920},
		ToolCalls: []thread.ToolCall{{ID: "call_abc123", Name: "rye/file-system/fs_write", Input: json.RawMessage(`{"path":"a.txt","content":"hi"}`)},
			{ID: "call_def456", Name: "rye/agent/threads/directive_return", Input: json.RawMessage(`{}`)}}}, resp)
	require.Equal(t, `{"path":"a.txt","content":"hi"}`, string(resp.ToolCalls[0].Input), "the input as the API sent it")

	require.EqualValues(t, 1, f.calls.Load())
	require.Equal(t, "/v1/chat/completions", f.paths[0])
	require.Equal(t, "Bearer sk-test", f.heads[0].Get("Authorization"))
	b := f.body(0)
	require.Equal(t, "gpt-4o", b["model"])
	require.EqualValues(t, 1000, b["max_tokens"], "a configured base URL is an OpenAI-compatible server")
	tools := b["tools"].([]any)
	fn := tools[0].(map[string]any)["function"].(map[string]any)
	require.Equal(t, "function", tools[0].(map[string]any)["type"])
	require.Equal(t, "rye__file-system__fs_write", fn["name"])
	require.Equal(t, []any{"path"}, fn["parameters"].(map[string]any)["required"])

	msgs := b["messages"].([]any)
	require.Len(t, msgs, 4)
	asst := msgs[1].(map[string]any)
	require.Equal(t, "assistant", asst["role"])
	require.Equal(t, "Writing.", asst["content"])
	calls := asst["tool_calls"].([]any)
	require.Len(t, calls, 2)
	c0 := calls[0].(map[string]any)
	require.Equal(t, "toolu_a", c0["id"])
	require.Equal(t, "function", c0["type"])
	require.Equal(t, "rye__file-system__fs_write", c0["function"].(map[string]any)["name"])
	require.JSONEq(t, `{"path":"a.txt","content":"a"}`, c0["function"].(map[string]any)["arguments"].(string))
	t0, t1 := msgs[2].(map[string]any), msgs[3].(map[string]any)
	require.Equal(t, "tool", t0["role"])
	require.Equal(t, "toolu_a", t0["tool_call_id"])
	require.Equal(t, "wrote a.txt", t0["content"])
	require.Equal(t, "error: permission denied", t1["content"])
}

func data(s string) string { return "data: " + s + "\n\n" }

var openaiToolStream = []string{
	data(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`),
	data(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{"content":"Sure,"},"logprobs":null,"finish_reason":null}],"usage":null}`),
	data(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{"content":" writing."},"logprobs":null,"finish_reason":null}],"usage":null}`),
	data(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_DdmO9pD3xa9XTPNJ32zg2hcA","type":"function","function":{"name":"rye__file-system__fs_write","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}`),
	data(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"pa"}}]},"logprobs":null,"finish_reason":null}],"usage":null}`),
	data(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\": \"a.txt\", \"con"}}]},"logprobs":null,"finish_reason":null}],"usage":null}`),
	data(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_second","type":"function","function":{"name":"rye__agent__threads__directive_return","arguments":"{\"ok\":"}}]},"logprobs":null,"finish_reason":null}],"usage":null}`),
	data(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"tent\": \"hi\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}`),
	data(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"true}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}`),
	data(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}`),
	data(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_06737a9306","choices":[],"usage":{"prompt_tokens":1500,"completion_tokens":42,"total_tokens":1542,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}`),
	data(`[DONE]`),
}

func TestOpenAIStreamingToolCalls(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, sse(openaiToolStream...))
	p := openaiFor(t, f, "openai/gpt-4o-mini")
	resp, deltas := streamed(t, p, toolRequest())
	require.Equal(t, []string{"Sure,", " writing."}, deltas)
	requireResponse(t, &Response{Text: "Sure, writing.", StopReason: "tool_calls", Model: "gpt-4o-mini-2024-07-18",
		Usage: Usage{InputTokens: 476, OutputTokens: 42, CacheReadTokens: 1024},
		ToolCalls: []thread.ToolCall{{ID: "call_DdmO9pD3xa9XTPNJ32zg2hcA", Name: "rye/file-system/fs_write", Input: json.RawMessage(`{"path":"a.txt","content":"hi"}`)},
			{ID: "call_second", Name: "rye/agent/threads/directive_return", Input: json.RawMessage(`{"ok":true}`)}}}, resp)

	b := f.body(0)
	require.Equal(t, "gpt-4o-mini", b["model"])
	require.Equal(t, true, b["stream"])
	require.Equal(t, map[string]any{"include_usage": true}, b["stream_options"])
	require.EqualValues(t, 1, f.calls.Load())
}

func TestOpenAIStreamingTextOfficialEndpoint(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, sse(
		data(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"o4-mini-2025-04-16","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}`),
		data(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"o4-mini-2025-04-16","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}],"usage":null}`),
		data(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"o4-mini-2025-04-16","choices":[{"index":0,"delta":{"content":" there"},"finish_reason":null}],"usage":null}`),
		data(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"o4-mini-2025-04-16","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`),
		data(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"o4-mini-2025-04-16","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":5,"total_tokens":25}}`),
		data(`[DONE]`),
	))
	// Pointed at "OpenAI itself" through an HTTP client that rewrites the
	// host, so no base URL is configured and max_completion_tokens is used.
	p := NewOpenAI("o4-mini", Config{OpenAIAPIKey: "k", HTTPClient: redirectClient(f.srv.URL)}, mustPricing(t, nil))
	resp, deltas := streamed(t, p, hi())
	require.Equal(t, "Hi there", resp.Text)
	require.Equal(t, []string{"Hi", " there"}, deltas)
	require.Equal(t, "stop", resp.StopReason)
	require.Equal(t, Usage{InputTokens: 20, OutputTokens: 5}, resp.Usage)
	b := f.body(0)
	require.EqualValues(t, DefaultMaxTokens, b["max_completion_tokens"])
	require.NotContains(t, b, "max_tokens")
}

func TestOpenAIErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		status  int
		body    string
		headers []string
		stream  bool
		class   string
		retry   time.Duration
		quota   bool
	}{
		{name: "429 rate limit retry-after", status: 429, headers: []string{"retry-after: 3"}, class: ClassRateLimited, retry: 3 * time.Second,
			body: `{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 30000, Requested 500. Please try again in 1s.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`},
		{name: "429 retry-after-ms", status: 429, headers: []string{"retry-after-ms: 250"}, class: ClassRateLimited, retry: 250 * time.Millisecond, stream: true,
			body: `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`},
		{name: "429 without retry-after waits for the exhausted limit's reset", status: 429, stream: true,
			headers: []string{"x-ratelimit-remaining-requests: 499", "x-ratelimit-reset-requests: 120ms", "x-ratelimit-remaining-tokens: 0", "x-ratelimit-reset-tokens: 20s"},
			class:   ClassRateLimited, retry: 20 * time.Second,
			body: `{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 30000, Requested 900. Please try again in 20s.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`},
		{name: "429 insufficient_quota", status: 429, class: ClassPermanent, quota: true,
			body: `{"error":{"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`},
		{name: "500", status: 500, class: ClassTransient,
			body: `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`},
		{name: "503 streaming", status: 503, class: ClassTransient, stream: true,
			body: `{"error":{"message":"The engine is currently overloaded, please try again later.","type":"server_error","param":null,"code":null}}`},
		{name: "401", status: 401, class: ClassPermanent,
			body: `{"error":{"message":"Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`},
		{name: "403 server_error type", status: 403, class: ClassPermanent, stream: true,
			body: `{"error":{"message":"Project does not have access to model","type":"server_error","param":null,"code":null}}`},
		{name: "400 validation", status: 400, class: ClassPermanent,
			body: `{"error":{"message":"Invalid 'tools[0].function.name': string does not match pattern.","type":"invalid_request_error","param":"tools[0].function.name","code":"invalid_value"}}`},
		{name: "malformed body", status: 200, class: ClassTransient, body: `{malformed json: <<<chaos>>>`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeAPI(t, reply(tc.status, tc.body, tc.headers...))
			status := tc.status
			if status < 400 {
				status = 0 // no HTTP error: the body did not parse
			}
			pe := completeError(t, f, openaiFor(t, f, "gpt-4o"), tc.stream, Error{Class: tc.class, StatusCode: status, RetryAfter: tc.retry, Quota: tc.quota})
			require.NotEmpty(t, pe.Message)
			require.Equal(t, tc.status == 401 || tc.status == 403, strings.Contains(pe.Message, "(check OPENAI_API_KEY on the worker)"), pe.Message)
		})
	}
}

func TestOpenAIMidStreamError(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, sse(openaiToolStream[0], openaiToolStream[1],
		data(`{"error":{"message":"The server had an error processing your request.","type":"server_error","param":null,"code":null}}`)))
	p := openaiFor(t, f, "gpt-4o")
	_, err := p.Complete(context.Background(), hi(), func(string) {})
	var pe *Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, ClassTransient, pe.Class, "error: %v", err)

	// A stream that ends without finish_reason (connection dropped) is transient.
	f2 := newFakeAPI(t, sse(openaiToolStream[:3]...))
	p2 := openaiFor(t, f2, "gpt-4o")
	_, err = p2.Complete(context.Background(), hi(), func(string) {})
	require.ErrorAs(t, err, &pe)
	require.Equal(t, ClassTransient, pe.Class, "error: %v", err)

	// So is a chunk that is not JSON.
	f3 := newFakeAPI(t, sse(openaiToolStream[0], openaiToolStream[1], data(`{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"Hi`)))
	_, err = openaiFor(t, f3, "gpt-4o").Complete(context.Background(), hi(), func(string) {})
	require.ErrorAs(t, err, &pe)
	require.Equal(t, ClassTransient, pe.Class, "error: %v", err)
	require.Contains(t, pe.Message, "malformed response")
}

func TestOpenAICancelMidStream(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, sseThenHang(openaiToolStream[:2]...))
	p := openaiFor(t, f, "gpt-4o")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := p.Complete(ctx, hi(), func(s string) { cancel() })
	var pe *Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, ClassCancelled, pe.Class, "error: %v", err)
	require.True(t, errors.Is(err, context.Canceled))
	require.EqualValues(t, 1, f.calls.Load())
}

func TestOpenAICompatibleWithoutKey(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/must-not-be-used")
	f := newFakeAPI(t, reply(200, `{"id":"x","object":"chat.completion","created":1,"model":"qwen2.5:7b","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`))
	p, err := New("qwen2.5:7b", Config{OpenAIBaseURL: f.srv.URL + "/v1"})
	require.NoError(t, err)
	resp, err := p.Complete(context.Background(), hi(), nil)
	require.NoError(t, err)
	require.Equal(t, "hello", resp.Text)
	require.Equal(t, Usage{InputTokens: 9, OutputTokens: 2}, resp.Usage)
	require.EqualValues(t, 1, f.calls.Load())
}

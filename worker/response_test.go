package worker

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// TestCallCutByOutputCap: Claude's answer stops at max_tokens inside a
// directive_return's arguments (the real SSE events, through the
// Anthropic adapter). The call is not run: the thread does not complete
// with empty outputs, and the model is told why its call failed; its next
// answer finishes the thread.
func TestCallCutByOutputCap(t *testing.T) {
	t.Parallel()
	ev := func(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
	start := ev("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":50,"output_tokens":1}}}`)
	answers := [][]string{{
		start,
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"rye__agent__threads__directive_return","input":{}}}`),
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"result\": \"the first half of a long rep"}}`),
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`),
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":900}}`),
		ev("message_stop", `{"type":"message_stop"}`),
	}, {
		start,
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"short report"}}`),
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`),
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":3}}`),
		ev("message_stop", `{"type":"message_stop"}`),
	}}
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range answers[min(int(n.Add(1))-1, len(answers)-1)] {
			_, _ = io.WriteString(w, e)
		}
	}))
	t.Cleanup(srv.Close)
	claude, err := provider.New("claude-sonnet-4-5", provider.Config{AnthropicAPIKey: "k", AnthropicBaseURL: srv.URL})
	require.NoError(t, err)
	viaClaude := reply{fn: func(ctx context.Context, req *provider.Request) (*provider.Response, error) {
		req.Model = ""
		return claude.Complete(ctx, req, func(string) {})
	}}

	h := setup(t, nil, Config{})
	h.prov.script("h/a", viaClaude, viaClaude)
	id := h.start("h/a", thread.Limits{})
	require.NoError(t, h.activate(id, "start", 0))
	rec := h.record(id)
	require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
	require.Equal(t, "short report", rec.Result)
	require.EqualValues(t, 2, n.Load())
	results := eventsOf[transcript.ToolCallResult](h, id, transcript.TypeToolCallResult)
	require.Len(t, results, 1)
	require.True(t, results[0].IsError)
	require.True(t, strings.Contains(results[0].Output, "output limit (max_tokens 4096)"), results[0].Output)
	require.Empty(t, eventsOf[transcript.DirectiveReturn](h, id, transcript.TypeDirectiveReturn))
}

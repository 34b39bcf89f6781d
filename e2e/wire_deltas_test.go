package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// TestAdapterDeltasOnTheWire (issue: the model's words as they are
// written): both provider adapters, streaming from a real-wire mock
// (aimock's SSE, cut into small chunks), hand every piece of the answer
// to onDelta in order: the pieces of a call concatenate to the answer's
// text, and there are many of them.
func TestAdapterDeltasOnTheWire(t *testing.T) {
	t.Parallel()
	mock := testenv.FindAIMock(t)
	answer := strings.Repeat("Streaming works, piece by piece, ünïcödé included. ", 6)
	file := filepath.Join(t.TempDir(), "deltas.json")
	var fixtures []string
	for _, m := range []string{"claude-sonnet-4-5", "gpt-4o"} {
		fixtures = append(fixtures, fmt.Sprintf(`{"match": {"model": %q}, "response": {"content": %q,
			"usage": {"prompt_tokens": 10, "completion_tokens": 80, "total_tokens": 90}}}`, m, answer))
	}
	args := `{"query": "the words as they are written", "limit": 12, "tags": ["a", "b", "c"]}`
	for _, m := range []string{"claude-opus-4-1", "gpt-4.1"} {
		fixtures = append(fixtures, fmt.Sprintf(`{"match": {"model": %q}, "response": {"toolCalls": [{"name": "lookup", "arguments": %q}],
			"usage": {"prompt_tokens": 10, "completion_tokens": 30, "total_tokens": 40}}}`, m, args))
	}
	testenv.WriteFile(t, file, `{"fixtures": [`+strings.Join(fixtures, ",")+`]}`)
	srv := mock.Start(t, file, "--chunk-size", "7")
	cfg := provider.Config{AnthropicAPIKey: "test-key", AnthropicBaseURL: srv.URL, OpenAIAPIKey: "test-key", OpenAIBaseURL: srv.URL + "/v1"}
	for _, model := range []string{"claude-sonnet-4-5", "gpt-4o"} {
		t.Run(model, func(t *testing.T) {
			p, err := provider.New(model, cfg)
			require.NoError(t, err)
			var pieces []string
			resp, err := p.Complete(t.Context(), &provider.Request{Model: model, MaxTokens: 256,
				Messages: []thread.Message{{Role: thread.RoleUser, Content: "stream, please"}}}, func(text string) {
				pieces = append(pieces, text)
			})
			require.NoError(t, err)
			require.Equal(t, answer, resp.Text)
			require.Equal(t, resp.Text, strings.Join(pieces, ""), "the deltas are the answer, in order")
			require.Greater(t, len(pieces), 20, "streamed in pieces")
		})
	}
	for _, model := range []string{"claude-opus-4-1", "gpt-4.1"} {
		t.Run(model+"/tool call", func(t *testing.T) {
			p, err := provider.New(model, cfg)
			require.NoError(t, err)
			var pieces []provider.ToolDelta
			resp, err := p.Complete(t.Context(), &provider.Request{Model: model, MaxTokens: 256,
				Messages:    []thread.Message{{Role: thread.RoleUser, Content: "look it up"}},
				OnToolDelta: func(d provider.ToolDelta) { pieces = append(pieces, d) }}, func(string) {})
			require.NoError(t, err)
			require.Len(t, resp.ToolCalls, 1)
			var written strings.Builder
			for _, d := range pieces {
				require.Equal(t, resp.ToolCalls[0].ID, d.ID, "each piece names its call")
				require.Equal(t, "lookup", d.Name)
				written.WriteString(d.Args)
			}
			require.JSONEq(t, args, written.String(), "the pieces are the call's arguments, in order")
			require.JSONEq(t, args, string(resp.ToolCalls[0].Input))
			require.Greater(t, len(pieces), 3, "streamed in pieces")
		})
	}
}

// TestEventStreamDeltasOnTheWire: a thread on each provider adapter, run
// by a worker against aimock streaming slowly (a chunk of 7 bytes every
// 40 ms), read with GET .../events?deltas=true from its start: the
// deltas of its turn concatenate to the committed turn's text.
func TestEventStreamDeltasOnTheWire(t *testing.T) {
	t.Parallel()
	mock := testenv.FindAIMock(t)
	answer := strings.Repeat("Every word reaches the reader as it is written. ", 4)
	file := filepath.Join(t.TempDir(), "slow.json")
	var fixtures []string
	for _, m := range []string{"claude-sonnet-4-5", "gpt-4o"} {
		fixtures = append(fixtures, fmt.Sprintf(`{"match": {"model": %q}, "latency": 40, "response": {"content": %q,
			"usage": {"prompt_tokens": 10, "completion_tokens": 40, "total_tokens": 50}}}`, m, answer))
	}
	testenv.WriteFile(t, file, `{"fixtures": [`+strings.Join(fixtures, ",")+`]}`)
	srv := mock.Start(t, file, "--chunk-size", "7")
	e := spooltest.New(t, spooltest.Options{Files: map[string]string{
		".ai/directives/t/echo.md": directive("echo", `turns="2"`, fsPerms, `<success>done</success>`),
	}})
	e.Start([]string{"ANTHROPIC_BASE_URL=" + srv.URL, "ANTHROPIC_API_KEY=test-key",
		"OPENAI_BASE_URL=" + srv.URL + "/v1", "OPENAI_API_KEY=test-key"}, "worker", "--concurrency", "2")
	api := startAPI(t, e)
	for _, model := range []string{"claude-sonnet-4-5", "gpt-4o"} {
		t.Run(model, func(t *testing.T) {
			id := startThread(t, e, "t/echo", "--model", model)
			r := &deltaReader{text: map[int]string{}, durable: map[string]transcript.Event{}}
			streamMessages(t.Context(), t, api.base+"/v1/threads/"+url.PathEscape(id)+"/events?deltas=true", func(m sseMessage) bool {
				switch m.event {
				case spooltype.EventDelta:
					var d spooltype.Delta
					require.NoError(t, json.Unmarshal([]byte(m.data), &d))
					require.Equal(t, len(r.text[d.Turn]), d.Offset, "no gap, no overlap")
					r.text[d.Turn] += d.Text
					r.deltas++
				case "":
					var ev transcript.Event
					require.NoError(t, json.Unmarshal([]byte(m.data), &ev))
					r.durable[m.id] = ev
				case spooltype.EventEnd:
					return false
				}
				return true
			})
			var committed string
			for _, ev := range r.durable {
				if ev.Type == transcript.TypeCognitionOut {
					var c transcript.CognitionOut
					require.NoError(t, ev.Decode(&c))
					committed = c.Content
				}
			}
			require.Equal(t, answer, committed)
			require.Equal(t, committed, r.text[1], "the turn's deltas are its committed text (%d deltas: %v)", r.deltas, r.text)
			require.Greater(t, r.deltas, 5)
		})
	}
}

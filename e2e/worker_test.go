package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/thread"
)

// directive renders a directive file.
func directive(name, limits, permissions, outputs string) string {
	return fmt.Sprintf("# %s\n\nA test directive.\n\n```xml\n<directive name=%q version=\"1.0.0\">\n  <metadata>\n    <description>test</description>\n    <limits %s />\n    <permissions>%s</permissions>\n  </metadata>\n  <outputs>%s</outputs>\n</directive>\n```\n",
		name, name, limits, permissions, outputs)
}

const fsPerms = `<execute><tool>rye/file-system/*</tool></execute>`

func workerProject() map[string]string {
	return map[string]string{
		".ai/directives/t/files.md":  directive("files", `turns="6" spend="0.5"`, fsPerms, `<output name="content" required="true">file content</output><output name="path" required="true">file path</output>`),
		".ai/directives/t/denied.md": directive("denied", `turns="4"`, `<execute><tool>rye/file-system/fs_read</tool></execute>`, `<success>done</success>`),
		".ai/directives/t/loop.md":   directive("loop", `turns="10" spend="1.0" tokens="100000"`, fsPerms, `<success>done</success>`),
		"scripts/w.yaml":             script("worker"),
	}
}

func TestWorkerEndToEnd(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, workerProject(), "2")
	e.StartWorker("--concurrency", "2")

	t.Run("fs tools and directive_return", func(t *testing.T) {
		rec := runCompleted(t, e, "t/files", "--input", "name=ada", "--model", "script:scripts/w.yaml")
		require.Equal(t, map[string]any{"content": "hello ada", "path": "notes/ada.txt"}, rec.Outputs)
		require.Equal(t, 3, rec.Cost.Turns)
		require.Equal(t, 450, rec.Cost.InputTokens)
		require.InDelta(t, (450*1.0+60*5.0)/1e6, rec.Cost.Spend, 1e-12)

		// The ledger charged each turn once.
		entry, err := e.Orch.LedgerEntry(t.Context(), rec.ThreadID)
		require.NoError(t, err)
		require.InDelta(t, rec.Cost.Spend, entry.Actual, 1e-9)
		require.Equal(t, "completed", entry.Status)

		// The transcript verifies with the CLI.
		type verified struct {
			Verified bool `json:"verified"`
			Segments int  `json:"segments"`
		}
		out := spoolJSON[verified](t, e, "thread", "verify", rec.ThreadID, "--json")
		require.True(t, out.Verified)
		require.Equal(t, 3, out.Segments, "one segment per turn; the start rides with the first, the end with the last")
	})

	t.Run("permission denied is reported to the model", func(t *testing.T) {
		rec := runCompleted(t, e, "t/denied", "--model", "script:scripts/w.yaml")
		require.Contains(t, rec.Result, "permission denied")
		require.Contains(t, rec.Result, "rye.execute.tool.rye.file-system.fs_write")
		// Nothing was written.
		_, err := e.Store.Get(t.Context(), blobkey.WorkspaceFile(rec.ThreadID, "x.txt"))
		require.ErrorIs(t, err, blobstore.ErrNotFound)
	})

	limits := []struct {
		name, limit, code string
	}{
		{"turns", "turns=2", thread.CodeTurnsExceeded},
		{"tokens", "tokens=2500", thread.CodeTokensExceeded},
		{"spend", "spend=0.004", thread.CodeSpendExceeded},
	}
	for _, tc := range limits {
		t.Run("limit "+tc.name, func(t *testing.T) {
			rec, res := runJSON(t, e, "t/loop", "--model", "script:scripts/w.yaml", "--limit", tc.limit)
			require.Equal(t, 1, res.Code, "a thread that ended in error exits 1")
			require.Equal(t, thread.StatusError, rec.Status)
			require.NotNil(t, rec.Error)
			require.Equal(t, tc.code, rec.Error.Code)
			entry, err := e.Orch.LedgerEntry(t.Context(), rec.ThreadID)
			require.NoError(t, err)
			require.LessOrEqual(t, entry.Actual, entry.Max+1e-12, "the ledger never overspends")
		})
	}
}

// anthropicEnv points a spool process's Anthropic provider at srv.
func anthropicEnv(srv *httptest.Server) []string {
	return []string{"ANTHROPIC_BASE_URL=" + srv.URL, "ANTHROPIC_API_KEY=test-key"}
}

// anthropicServer answers the Messages API: the first request with 429 and
// retry-after, the rest with a text answer.
func anthropicServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	return rateLimitedServer(t, func(n int32, _ []byte) string {
		if n == 1 {
			return "1"
		}
		return ""
	})
}

// rateLimitedServer answers the Messages API with a text answer, or with
// 429 and retry-after limit(n, body) when that is not "" (n counts the
// requests from 1).
func rateLimitedServer(t *testing.T, limit func(n int32, body []byte) string) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/messages" {
			http.NotFound(w, r)
			return
		}
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		if after := limit(n.Add(1), raw); after != "" {
			w.Header().Set("retry-after", after)
			w.Header().Set("content-type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`))
			return
		}
		if stream, _ := body["stream"].(bool); stream {
			writeAnthropicText(w, "msg_1", 42, 7, "recovered after ", "the rate limit")
			return
		}
		w.Header().Set("content-type", "application/json")
		_, _ = w.Write([]byte(`{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"recovered after the rate limit"}],"stop_reason":"end_turn","usage":{"input_tokens":42,"output_tokens":7}}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// writeAnthropicText answers a streaming Messages call: text in the given
// deltas, with the given input and output tokens.
func writeAnthropicText(w http.ResponseWriter, id string, input, output int, deltas ...string) {
	w.Header().Set("content-type", "text/event-stream")
	events := []string{
		`event: message_start` + "\n" + `data: {"type":"message_start","message":{"id":"` + id + `","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"usage":{"input_tokens":` + strconv.Itoa(input) + `,"output_tokens":1}}}`,
		`event: content_block_start` + "\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	}
	for _, d := range deltas {
		text, _ := json.Marshal(d)
		events = append(events, `event: content_block_delta`+"\n"+`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+string(text)+`}}`)
	}
	events = append(events,
		`event: content_block_stop`+"\n"+`data: {"type":"content_block_stop","index":0}`,
		`event: message_delta`+"\n"+`data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":`+strconv.Itoa(output)+`}}`,
		`event: message_stop`+"\n"+`data: {"type":"message_stop"}`,
	)
	_, _ = w.Write([]byte(strings.Join(events, "\n\n") + "\n\n"))
}

func TestProviderRateLimitIsRetried(t *testing.T) {
	t.Parallel()
	srv, calls := anthropicServer(t)
	e := spooltest.New(t, spooltest.Options{Files: map[string]string{
		".ai/directives/t/chat.md": directive("chat", `turns="3"`, fsPerms, `<success>done</success>`),
	}})
	env := anthropicEnv(srv)
	e.Start(env, "worker", "--concurrency", "2")
	e.Start(env, "worker", "--concurrency", "2")
	rec := runCompleted(t, e, "t/chat", "--model", "claude-sonnet-4-5")
	require.Equal(t, "recovered after the rate limit", rec.Result)
	require.Equal(t, int32(2), calls.Load(), "one 429, one success: the SDK does not retry on its own")
	require.Equal(t, 42, rec.Cost.InputTokens)
	require.Equal(t, 7, rec.Cost.OutputTokens)
	require.Greater(t, rec.Cost.Spend, 0.0)

	// The error and its retry are in the transcript.
	tr := e.Spool("thread", "transcript", rec.ThreadID, "--format", "jsonl")
	require.Equal(t, 0, tr.Code, tr.Stderr)
	require.Contains(t, tr.Stdout, `"rate_limited"`)
	_ = time.Second
}

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/transcript"
)

// streamMessages reads the messages of the event stream at url until it
// ends or ctx does, handing each to got (false: stop reading).
func streamMessages(ctx context.Context, t *testing.T, url string, got func(sseMessage) bool) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var m sseMessage
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if m.data != "" && !got(m) {
				return
			}
			m = sseMessage{}
		case strings.HasPrefix(line, "event: "):
			m.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			m.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			m.data += strings.TrimPrefix(line, "data: ")
		}
	}
}

// deltaReader is one reader of a thread's stream with deltas: the text
// it got as deltas, by turn, and the durable events by id.
type deltaReader struct {
	text    map[int]string
	args    map[string]string // a tool call's arguments, by call id
	durable map[string]transcript.Event
	deltas  int
	// got counts the text deltas, for a reader on another goroutine.
	got atomic.Int64
}

// TestEventStreamDeltas (issue: the model's words as they are written):
// GET /v1/threads/{id}/events?deltas=true interleaves the model's text as
// it streams — delta messages without an id, each with its turn and
// offset — with the durable events, which keep their ids. A reader there
// from the start and one that connects mid-turn both get each turn's
// text exactly once, equal to the committed turn's text (cognition_out),
// and the same durable events, each once; no token_delta event comes
// with deltas on. The turn's tool call's arguments come as deltas too
// (call_id, tool), equal to the committed call's.
func TestEventStreamDeltas(t *testing.T) {
	t.Parallel()
	words := strings.Repeat("the quick brown fox jumps over the lazy dog; ", 8)
	files := map[string]string{
		".ai/directives/t/talk.md": directive("talk", `turns="3"`, fsPerms, `<success>done</success>`),
		"scripts/talk.yaml": "price: {input_per_mtok: 1.00, output_per_mtok: 5.00}\nlatency: 300ms\nstream_delay: 500ms\ndirectives:\n  \"t/talk\":\n" +
			"    - text: " + strconvQuote("first: "+words) + "\n      tool_calls: [{tool: rye/file-system/fs_write, input: {path: a.txt, content: one}}]\n" +
			"    - text: " + strconvQuote("second: "+words) + "\n",
	}
	e := spooltest.New(t, spooltest.Options{Files: files})
	e.StartWorker("--concurrency", "2")
	srv := startAPI(t, e)
	id := startThread(t, e, "t/talk", "--model", "script:scripts/talk.yaml")
	stream := srv.base + "/v1/threads/" + url.PathEscape(id) + "/events?deltas=true"

	read := func(ctx context.Context, r *deltaReader) {
		streamMessages(ctx, t, stream, func(m sseMessage) bool {
			switch m.event {
			case spooltype.EventDelta:
				require.Empty(t, m.id, "a delta has no event id")
				var d spooltype.Delta
				require.NoError(t, json.Unmarshal([]byte(m.data), &d))
				if d.CallID != "" {
					require.Equal(t, len(r.args[d.CallID]), d.Offset, "call %s: no gap, no overlap", d.CallID)
					require.Equal(t, "rye/file-system/fs_write", d.Tool)
					r.args[d.CallID] += d.Text
					break
				}
				require.Equal(t, len(r.text[d.Turn]), d.Offset, "turn %d: no gap, no overlap", d.Turn)
				r.text[d.Turn] += d.Text
				r.deltas++
				r.got.Add(1)
			case "":
				var ev transcript.Event
				require.NoError(t, json.Unmarshal([]byte(m.data), &ev))
				require.NotEqual(t, transcript.TypeTokenDelta, ev.Type, "with deltas on, the text comes as deltas")
				_, seen := r.durable[m.id]
				require.False(t, seen, "event %s twice", m.id)
				r.durable[m.id] = ev
			case spooltype.EventEnd:
				return false
			}
			return true
		})
	}
	first := &deltaReader{text: map[int]string{}, args: map[string]string{}, durable: map[string]transcript.Event{}}
	late := &deltaReader{text: map[int]string{}, args: map[string]string{}, durable: map[string]transcript.Event{}}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); read(ctx, first) }()
	// The late reader connects once the first has part of turn 1.
	require.Eventually(t, func() bool { return first.got.Load() >= 2 }, time.Minute, 10*time.Millisecond)
	read(ctx, late)
	<-done

	committed := map[int]string{}
	calls := map[string]string{}
	for _, ev := range first.durable {
		if ev.Type == transcript.TypeCognitionOut {
			var c transcript.CognitionOut
			require.NoError(t, ev.Decode(&c))
			committed[c.Turn] = c.Content
			for _, tc := range c.ToolCalls {
				calls[tc.ID] = string(tc.Input)
			}
		}
	}
	require.Len(t, calls, 1)
	for _, r := range []*deltaReader{first, late} {
		require.Len(t, r.args, 1, "the tool call's arguments came as deltas")
		for id, args := range calls {
			require.JSONEq(t, args, r.args[id], "the call's deltas are its committed arguments")
		}
	}
	require.Equal(t, "first: "+words, committed[1])
	require.Equal(t, "second: "+words, committed[2])
	for _, r := range []*deltaReader{first, late} {
		require.Equal(t, committed, r.text, "the deltas of each turn are its committed text")
		require.Equal(t, len(first.durable), len(r.durable), "the same durable events")
	}
	require.Greater(t, first.deltas, 4, "the text came in pieces")
}

// strconvQuote quotes s for YAML (a JSON string is a YAML string).
func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestFollowWordsAcrossHandoff: `thread run --wait --follow` shows the
// model's words as they are written for the whole chain: the thread it
// started hands off when its context fills, and the continuation's words
// follow under the continuation's own head, each turn's text once.
func TestFollowWordsAcrossHandoff(t *testing.T) {
	t.Parallel()
	words := strings.Repeat("words of the continuation, written slowly; ", 4)
	files := map[string]string{
		".ai/directives/t/chained.md": directive("chained", `turns="6" spend="0.5"`, fsPerms, `<success>done</success>`),
		"scripts/chained.yaml": fmt.Sprintf(`context_window: 2000
price: {input_per_mtok: 1.00, output_per_mtok: 5.00}
latency: 200ms
stream_delay: 400ms
directives:
  "t/chained":
    - text: %q
      tool_calls: [{tool: rye/file-system/fs_write, input: {path: "one.txt", content: "one"}}]
      when: '{{eq .chain_index 0}}'
      usage: {input: 1900, output: 40}
    - text: %q
      when: '{{eq .chain_index 1}}'
      usage: {input: 300, output: 20}
`, "FIRST the first thread writes this before its context fills", "SECOND "+words),
	}
	e := spooltest.New(t, spooltest.Options{Files: files})
	e.StartWorker("--concurrency", "2")
	r := e.Spool("thread", "run", "t/chained", "--model", "script:scripts/chained.yaml", "--wait", "--follow", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &rec))
	first, _ := rec["chain_root_id"].(string)
	last, _ := rec["thread_id"].(string)
	require.NotEqual(t, first, last, "the run handed off: %s", r.Stdout)
	require.Equal(t, "completed", rec["status"])

	// Each thread's written text, under its own head, once.
	written := map[string]string{}
	cur := ""
	for _, line := range strings.Split(r.Stderr, "\n") {
		switch {
		case strings.HasSuffix(line, " writes:") && strings.HasPrefix(line, "["):
			cur = line[1:strings.Index(line, "]")]
		case strings.HasPrefix(line, "    ") && cur != "":
			written[cur] += strings.TrimPrefix(line, "    ")
		default:
			cur = ""
		}
	}
	require.Contains(t, written[last], "SECOND words of the continuation", "the continuation's words, as written:\n%s", r.Stderr)
	require.Equal(t, 1, strings.Count(written[last], "SECOND"), "its text once:\n%s", r.Stderr)
	require.NotContains(t, written[last], "FIRST")
}

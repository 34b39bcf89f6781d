package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

// tinyGraph writes a file and returns: a run whose turns and tokens no
// one set.
const tinyGraph = `version: "1.0.0"
description: writes a file
permissions:
  - rye.execute.tool.rye.file-system.*
config:
  start: write
  nodes:
    write:
      action:
        tool: rye/file-system/fs_write
        params: {path: out.txt, content: "x"}
      next: done
    done:
      type: return
      output: {ok: true}
`

// limitsOf is the "limits" object of a JSON record (at path, a list of
// keys into nested objects, when the record is inside another object).
func limitsOf(t *testing.T, doc []byte, path ...string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(doc, &m), string(doc))
	for _, k := range append(path, "limits") {
		next, ok := m[k].(map[string]any)
		require.True(t, ok, "no object %q in %s", k, doc)
		m = next
	}
	return m
}

// requireUnbounded fails unless limits leave out turns and tokens and
// show the rest.
func requireUnbounded(t *testing.T, limits map[string]any, what string) {
	t.Helper()
	require.NotContains(t, limits, "turns", what)
	require.NotContains(t, limits, "tokens", what)
	for _, k := range []string{"spend", "depth", "spawns", "duration"} {
		require.Contains(t, limits, k, what)
	}
}

// TestUnboundedLimitsAreAbsent: a limit that bounds nothing is absent
// wherever limits show, never 2147483647: a graph run's turns and tokens
// in `graph run`, `thread show` and `graph show` (JSON and text), in the
// API's record (held to the OpenAPI document) and in graph_started of its
// event stream; a thread started with turns=2147483647 in its record, its
// thread_started event and its --follow lines ("turn 1", no bound). A
// record written before, which holds 2147483647, shows it absent too.
func TestUnboundedLimitsAreAbsent(t *testing.T) {
	t.Parallel()
	files := apiProject()
	files[".ai/graphs/g/tiny.yaml"] = tinyGraph
	files[".ai/directives/t/one.md"] = directive("one", `turns="4"`, fsPerms, `<success>done</success>`)
	files["scripts/one.yaml"] = "directives:\n  \"*\":\n    - text: \"ok\"\n"
	e := workerEnv(t, files, "2")
	srv := startAPI(t, e)
	raw := apiCall{t: t, hc: &http.Client{Transport: newOpenAPITransport(t)}, base: srv.base}

	// A graph run: its record as each command and the API show it.
	res := e.Spool("graph", "run", "g/tiny", "--wait", "--json", "--timeout", "2m")
	require.Equal(t, 0, res.Code, res.Stderr)
	requireUnbounded(t, limitsOf(t, []byte(res.Stdout)), "graph run --json")
	var run struct {
		ThreadID string        `json:"thread_id"`
		Status   thread.Status `json:"status"`
	}
	res.JSON(t, &run)
	require.Equal(t, thread.StatusCompleted, run.Status)
	id := run.ThreadID
	shown := func(what string) {
		t.Helper()
		for _, args := range [][]string{{"thread", "show", id, "--json"}, {"graph", "show", id, "--json"}} {
			res := e.Spool(args...)
			require.Equal(t, 0, res.Code, res.Stderr)
			requireUnbounded(t, limitsOf(t, []byte(res.Stdout)), what+": "+strings.Join(args[:2], " "))
		}
		res := e.Spool("thread", "show", id)
		require.Equal(t, 0, res.Code, res.Stderr)
		require.NotContains(t, res.Stdout, "2147483647", what)
		require.Regexp(t, `(?m)^limits +spend \$1\.0000 · depth \d+ · spawns \d+ · duration \d+s$`, res.Stdout, what)
		// A graph run is shown as one: its steps, no model or turns.
		require.Regexp(t, `(?m)^run +`+regexp.QuoteMeta(id)+`\n(?s:.*)^steps +\d+ of \d+$`, res.Stdout, what)
		require.NotRegexp(t, `(?m)^(model|cost) `, res.Stdout, what)
		status, _, body := raw.do("GET", "/v1/threads/"+esc(id), "")
		require.Equal(t, http.StatusOK, status, string(body))
		requireUnbounded(t, limitsOf(t, body), what+": the API's record")
	}
	shown("a graph run")
	events := readSSE(t, streamBody(t, srv.base, id), -1)
	require.NotEmpty(t, events)
	require.Contains(t, events[0].data, `"event_type":"graph_started"`)
	requireUnbounded(t, limitsOf(t, []byte(events[0].data), "payload", "limits"), "graph_started")

	// A record written before holds 2147483647: shown absent the same.
	key := e.Keys.Thread(id)
	require.NoError(t, e.Redis.Universal.HSet(t.Context(), key, "limits",
		`{"turns":2147483647,"tokens":2147483647,"spend":1,"depth":10,"spawns":100,"duration":3600}`).Err())
	shown("a record written before")

	// A thread whose turns bound nothing: its record, thread_started and
	// --follow lines.
	res = e.Spool("thread", "run", "t/one", "--model", "script:scripts/one.yaml", "--limit", "turns=2147483647",
		"--wait", "--follow", "--json", "--timeout", "2m")
	require.Equal(t, 0, res.Code, res.Stderr)
	limits := limitsOf(t, []byte(res.Stdout))
	require.NotContains(t, limits, "turns")
	require.Contains(t, limits, "tokens")
	require.NotContains(t, res.Stderr, "2147483647")
	require.Regexp(t, `(?m)^\[t/one-\S+\] completed +turn 1 · \d+ tokens · `, res.Stderr)
	res.JSON(t, &run)
	started := eventsOf(transcriptEvents(t, e, run.ThreadID), "thread_started")
	require.Len(t, started, 1)
	require.NotContains(t, payload(started[0])["limits"], "turns")
	require.Contains(t, payload(started[0])["limits"], "tokens")
}

// streamBody is the whole event stream of thread id, which has ended.
func streamBody(t *testing.T, base, id string) *bytes.Reader {
	t.Helper()
	resp, err := http.Get(base + "/v1/threads/" + esc(id) + "/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return bytes.NewReader(b)
}

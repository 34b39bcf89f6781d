package e2e

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	spooldirective "github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// stormThreads run at once on each adapter.
const stormThreads = 40

// stormFixtures are aimock's answers: a thread's first call writes a file,
// its second says it is done; each reports its usage, which the threads'
// costs must add up to.
const stormFixtures = `{"fixtures": [
  {"match": {"turnIndex": 0}, "response": {
    "toolCalls": [{"name": "rye__file-system__fs_write", "arguments": {"path": "storm.txt", "content": "weathered"}}],
    "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}},
  {"match": {"turnIndex": 1}, "response": {
    "content": "all done",
    "usage": {"prompt_tokens": 150, "completion_tokens": 10, "total_tokens": 160}}}
]}`

// stormChaos are the faults aimock injects, each at its rate, tried in
// this order on every call: a 500, a 200 whose body is not JSON, a 429
// with retry-after 1, a dropped connection. About a third of the calls go
// through; more than half are told to slow down.
var stormChaos = []string{"--chaos-drop", "0.04", "--chaos-malformed", "0.04", "--chaos-ratelimit", "0.6", "--chaos-disconnect", "0.1"}

// stormResilience gives transient errors 14 retries (a second apart). A
// turn's transient faults count across the 429s between them, and about
// 0.45 of the answers that are not 429 are transient faults here, so a
// turn fails its thread with 0.45^(retries+1): at 8 retries 7.6e-4 a turn,
// about one CI run in ten over the 160 turns of both adapters (it
// happened: a thread ended error after its ninth); at 14, 6e-6 a turn.
// Should 429s count against the retries, as they did, a turn would meet
// far more failures in a row (about four threads of the eighty failed).
const stormResilience = "retry: {max_retries: 14, base: 1.5, max: 1}\n"

// TestProviderStorm: a provider storm is not a failure. On each adapter
// (Anthropic Messages; OpenAI-compatible Chat Completions), 40 threads at
// once on 16 worker slots call aimock, a mock LLM server nobody here
// wrote, that answers at random with 429 and retry-after, 500, a body
// that is not JSON, or a dropped connection. Every thread completes; each
// 429 hands its thread back (waiting for rate_limit, no slot) and every
// other fault is retried as transient, one error event each in the
// transcripts; the tokens the threads counted are what aimock's
// successful answers reported, two per thread.
func TestProviderStorm(t *testing.T) {
	t.Parallel()
	mock := testenv.FindAIMock(t)
	apis := []struct {
		name, model, path string
		env               func(url string) []string
	}{
		{"anthropic", "claude-sonnet-4-5", "/v1/messages",
			func(url string) []string { return []string{"ANTHROPIC_BASE_URL=" + url, "ANTHROPIC_API_KEY=test-key"} }},
		{"openai", "gpt-4o", "/v1/chat/completions",
			func(url string) []string {
				return []string{"OPENAI_BASE_URL=" + url + "/v1", "OPENAI_API_KEY=test-key"}
			}},
	}
	for _, api := range apis {
		t.Run(api.name, func(t *testing.T) {
			fixtures := filepath.Join(t.TempDir(), "storm.json")
			testenv.WriteFile(t, fixtures, stormFixtures)
			srv := mock.Start(t, fixtures, stormChaos...)
			weatherStorm(t, srv, api.model, api.path, api.env(srv.URL))
		})
	}
}

// weatherStorm runs the storm against srv on model, whose calls go to
// path, with env pointing the workers at srv.
func weatherStorm(t *testing.T, srv *testenv.AIMockServer, model, path string, env []string) {
	e := spooltest.New(t, spooltest.Options{Files: map[string]string{
		".ai/directives/t/storm.md":        directive("storm", `turns="4"`, fsPerms, `<success>done</success>`),
		".ai/config/agent/resilience.yaml": stormResilience,
	}})
	workers := []*spooltest.Proc{
		e.Start(env, "worker", "--concurrency", "8"),
		e.Start(env, "worker", "--concurrency", "8"),
	}
	digest, err := spooldirective.BuildBundle(t.Context(), e.Store, e.Project, t.TempDir(), nil)
	require.NoError(t, err)

	began := time.Now()
	ids := make([]string, stormThreads)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			rec, err := e.Orch.Start(t.Context(), orchestrator.StartRequest{Directive: "t/storm", Model: model, Bundle: digest})
			if err == nil {
				ids[i] = rec.ThreadID
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		require.NotEmpty(t, id, "every thread started")
	}
	// How many threads wait for their rate limit at once, holding no slot.
	stop := make(chan struct{})
	waited := make(chan int)
	go func() {
		most := 0
		for {
			select {
			case <-stop:
				waited <- most
				return
			case <-time.After(100 * time.Millisecond):
			}
			n := 0
			for _, id := range ids {
				if r, err := e.Orch.Record(t.Context(), id); err == nil && r.Status == thread.StatusWaiting && r.WaitingFor == registry.WaitingForRateLimit {
					n++
				}
			}
			most = max(most, n)
		}
	}()
	final := e.Wait(ids, 5*time.Minute)
	took := time.Since(began)
	close(stop)
	mostWaiting := <-waited

	counted := thread.Cost{}
	errs, msgs := map[string]int{}, map[string]int{}
	for _, id := range ids {
		rec := final[id]
		require.Equal(t, thread.StatusCompleted, rec.Status, "%s: %+v", id, rec.Error)
		require.Equal(t, "all done", rec.Result)
		require.Equal(t, 2, rec.Cost.Turns)
		require.Equal(t, 250, rec.Cost.InputTokens, "%s: the input tokens of its two calls that went through", id)
		require.Equal(t, 30, rec.Cost.OutputTokens, "%s: the output tokens of its two calls that went through", id)
		counted.InputTokens += rec.Cost.InputTokens
		counted.OutputTokens += rec.Cost.OutputTokens
		for _, pe := range payloads[transcript.Error](t, events(t, e, id), transcript.TypeThreadError) {
			require.True(t, pe.Retryable, "%s: %+v", id, pe)
			errs[pe.Class]++
			if pe.Class == "transient" {
				msgs[shortError(pe.Message)]++
			}
		}
	}

	j := stormJournal(t, srv, path)
	for _, action := range []string{"drop", "malformed", "rateLimit", "disconnect"} {
		require.Positive(t, j.faults[action], "aimock injected %s at least once: %v", action, j.faults)
	}
	require.Equal(t, 2*stormThreads, j.answered, "two calls per thread went through, no more")
	require.Equal(t, j.reported, counted, "the tokens counted are those the successful calls reported")
	require.Equal(t, j.faults["rateLimit"], errs["rate_limited"], "one rate_limited event per 429")
	// One transient event per other fault; a few more may be calls aimock
	// never recorded: a pooled connection that its server (Node closes
	// one idle for 5 s) closed just as a worker sent a call on it. The
	// worker meets a transient error and retries, as it would with a
	// real API; the call never reached the journal.
	faults := j.faults["drop"] + j.faults["malformed"] + j.faults["disconnect"]
	unrecorded := errs["transient"] - faults
	require.GreaterOrEqual(t, unrecorded, 0, "a transient event for every fault aimock injected: %v", msgs)
	require.LessOrEqual(t, unrecorded, 2, "no fault counted twice: %d faults, %d transient events %v", faults, errs["transient"], msgs)
	require.Len(t, errs, 2, "no other class: %v", errs)
	handedBack := 0
	for _, w := range workers {
		handedBack += strings.Count(w.Log(), "provider says slow down; thread handed back")
	}
	require.Equal(t, j.faults["rateLimit"], handedBack, "each 429 handed its thread back")

	t.Logf("storm on %s: %d threads on 16 slots, all completed in %s; aimock answered %d calls: %d went through, faults %v; "+
		"the threads waited out %d rate limits handed back (up to %d threads waiting for rate_limit at once) and retried %d transient errors (%d on calls aimock never recorded); "+
		"tokens counted %d in + %d out, reported by the successful calls %d in + %d out",
		model, stormThreads, took.Round(time.Millisecond), j.calls, j.answered, j.faults,
		errs["rate_limited"], mostWaiting, errs["transient"], unrecorded,
		counted.InputTokens, counted.OutputTokens, j.reported.InputTokens, j.reported.OutputTokens)
}

// journal is what aimock's journal says it answered on one path.
type journal struct {
	calls    int            // requests
	answered int            // answered from a fixture, no fault
	faults   map[string]int // by chaos action
	reported thread.Cost    // the usage the answered calls reported
}

// readJournal decodes srv's journal, every request it kept, into entries.
func readJournal(t *testing.T, srv *testenv.AIMockServer, entries any) {
	t.Helper()
	resp, err := http.Get(srv.URL + "/__aimock/journal")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(entries))
}

// stormJournal reads srv's journal of the requests on path.
func stormJournal(t *testing.T, srv *testenv.AIMockServer, path string) journal {
	t.Helper()
	var entries []struct {
		Path     string `json:"path"`
		Response struct {
			Status      int    `json:"status"`
			ChaosAction string `json:"chaosAction"`
			Fixture     *struct {
				Response struct {
					Usage struct {
						Prompt     int `json:"prompt_tokens"`
						Completion int `json:"completion_tokens"`
					} `json:"usage"`
				} `json:"response"`
			} `json:"fixture"`
		} `json:"response"`
	}
	readJournal(t, srv, &entries)
	j := journal{faults: map[string]int{}}
	for _, en := range entries {
		if en.Path != path {
			continue
		}
		j.calls++
		switch {
		case en.Response.ChaosAction != "":
			j.faults[en.Response.ChaosAction]++
		case en.Response.Status == http.StatusOK && en.Response.Fixture != nil:
			j.answered++
			j.reported.InputTokens += en.Response.Fixture.Response.Usage.Prompt
			j.reported.OutputTokens += en.Response.Fixture.Response.Usage.Completion
		default:
			t.Fatalf("aimock answered %s with %d and no fixture:\n%s", path, en.Response.Status, srv.Log())
		}
	}
	return j
}

// shortError is the start of a transient error's message, its ids cut,
// to count the kinds of failure a storm met.
func shortError(msg string) string {
	if i := strings.Index(msg, "http://"); i >= 0 {
		msg = msg[:i]
	}
	return msg[:min(len(msg), 70)]
}

package e2e

import (
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/thread"
)

// wireModel is a model spelling docs/models.md documents, the name its
// provider must be sent, the path its calls go to, and whether the
// project's pricing.yaml (wirePricing) prices it.
type wireModel struct {
	model, wire, path string
	projectPriced     bool
}

// wireModels are the spellings TestModelNameOnTheWire runs.
var wireModels = []wireModel{
	{"claude-sonnet-4-5", "claude-sonnet-4-5", "/v1/messages", false},           // claude-*: as written
	{"anthropic/claude-sonnet-4-5", "claude-sonnet-4-5", "/v1/messages", false}, // anthropic/<m>: <m>
	{"anthropic/x", "x", "/v1/messages", true},
	{"gpt-4o", "gpt-4o", "/v1/chat/completions", false}, // gpt-*: as written
	{"o4-mini", "o4-mini", "/v1/chat/completions", false},
	{"openai/gpt-4o", "gpt-4o", "/v1/chat/completions", false}, // openai/<m>: <m>
	{"openai/mock-1", "mock-1", "/v1/chat/completions", true},
	{"openai/meta-llama/Llama-3-8B", "meta-llama/Llama-3-8B", "/v1/chat/completions", true},             // a slash in <m>
	{"openai/anthropic/claude-3.5-sonnet", "anthropic/claude-3.5-sonnet", "/v1/chat/completions", true}, // a gateway's namespace
	{"qwen2.5-coder:7b", "qwen2.5-coder:7b", "/v1/chat/completions", true},                              // anything else: OPENAI_BASE_URL, as written
}

// wirePricing prices the models no built-in entry prices, each under the
// thread's spelling at 2/4 USD per million tokens; mock-1 also under its
// wire name at 100/100, which a thread on openai/mock-1 must not be
// charged: spool keys a model on the thread's spelling first.
const wirePricing = `models:
  anthropic/x: {input_per_mtok: 2, output_per_mtok: 4, context_window: 100000}
  openai/mock-1: {input_per_mtok: 2, output_per_mtok: 4, context_window: 100000}
  mock-1: {input_per_mtok: 100, output_per_mtok: 100, context_window: 100000}
  openai/meta-llama/Llama-3-8B: {input_per_mtok: 2, output_per_mtok: 4, context_window: 8192}
  anthropic/claude-3.5-sonnet: {input_per_mtok: 2, output_per_mtok: 4, context_window: 200000}
  qwen2.5-coder:7b: {input_per_mtok: 2, output_per_mtok: 4, context_window: 32768}
`

// TestModelNameOnTheWire: a thread on each documented spelling of a
// model, run with `thread run` on a worker pointed at aimock (a mock
// LLM server nobody here wrote), reaches its provider under the name the
// provider knows: aimock answers a call only from the fixture of that
// exact model name, and any other name with 404 "No fixture matched",
// as vLLM, Ollama and the providers answer "model not found". Its
// journal records the model each call named. The thread's record keeps
// the spelling it was started with, and its cost is priced by it.
func TestModelNameOnTheWire(t *testing.T) {
	t.Parallel()
	mock := testenv.FindAIMock(t)
	var fixtures []string
	for _, w := range wireModels {
		fixtures = append(fixtures, fmt.Sprintf(`{"match": {"model": %q}, "response": {"content": "answered as %s",
			"usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}}`, w.wire, w.wire))
	}
	file := filepath.Join(t.TempDir(), "wire.json")
	testenv.WriteFile(t, file, `{"fixtures": [`+strings.Join(fixtures, ",\n")+`]}`)
	srv := mock.Start(t, file)

	e := spooltest.New(t, spooltest.Options{Files: map[string]string{
		".ai/directives/t/echo.md":      directive("echo", `turns="2"`, fsPerms, `<success>done</success>`),
		".ai/config/agent/pricing.yaml": wirePricing,
	}})
	e.Start([]string{"ANTHROPIC_BASE_URL=" + srv.URL, "ANTHROPIC_API_KEY=test-key",
		"OPENAI_BASE_URL=" + srv.URL + "/v1", "OPENAI_API_KEY=test-key"}, "worker", "--concurrency", "4")

	// thread run, without keys or base URLs here, warns of a missing key
	// only for a model of the real provider's, which goes to its default
	// endpoint unless the workers set a base URL; a model only a
	// compatible server serves draws none (that server may take no key).
	started := map[string]wireModel{}
	for _, w := range wireModels {
		res := e.Spool("thread", "run", "t/echo", "--model", w.model)
		require.Equal(t, 0, res.Code, "%s: %s", w.model, res.Stderr)
		started[strings.TrimSpace(res.Stdout)] = w
		ownModel := strings.HasPrefix(w.wire, "claude-") || (w.path == "/v1/chat/completions" && regexp.MustCompile(`^(gpt-|o4)`).MatchString(w.wire))
		require.Equal(t, ownModel, strings.Contains(res.Stderr, "spool: warning: model "+w.model+" needs "), "%s: %q", w.model, res.Stderr)
	}
	for id, rec := range e.Wait(slices.Collect(maps.Keys(started)), 2*time.Minute) {
		w := started[id]
		require.Equal(t, thread.StatusCompleted, rec.Status, "%s: %+v", w.model, rec.Error)
		require.Equal(t, w.model, rec.Model, "the record keeps the thread's spelling")
		require.Equal(t, "answered as "+w.wire, rec.Result, w.model)
		if w.projectPriced {
			require.InDelta(t, (100*2+20*4)/1e6, rec.Cost.Spend, 1e-12, "%s is priced by the thread's spelling", w.model)
		}
	}

	// What aimock recorded: each call named the model as its provider
	// knows it, and every call was answered from that model's fixture.
	sent := wireJournal(t, srv)
	for _, w := range wireModels {
		require.Contains(t, sent[w.path], w.wire, "%s is sent as %s", w.model, w.wire)
	}
	var excerpt []string
	for path, models := range sent {
		for _, m := range models {
			require.True(t, slices.ContainsFunc(wireModels, func(w wireModel) bool {
				return w.wire == m && w.path == path
			}), "aimock was sent %q on %s, which no provider knows", m, path)
			excerpt = append(excerpt, path+` {"model": "`+m+`"} 200`)
		}
	}
	slices.Sort(excerpt)
	t.Logf("aimock's journal:\n%s", strings.Join(excerpt, "\n"))
}

// wireJournal is the model each call aimock answered named, by path;
// a call it answered with anything but a fixture fails the test.
func wireJournal(t *testing.T, srv *testenv.AIMockServer) map[string][]string {
	t.Helper()
	var entries []struct {
		Path string `json:"path"`
		Body struct {
			Model string `json:"model"`
		} `json:"body"`
		Response struct {
			Status int `json:"status"`
		} `json:"response"`
	}
	readJournal(t, srv, &entries)
	sent := map[string][]string{}
	for _, en := range entries {
		require.Equal(t, http.StatusOK, en.Response.Status, "aimock answered %s model %q with %d", en.Path, en.Body.Model, en.Response.Status)
		sent[en.Path] = append(sent[en.Path], en.Body.Model)
	}
	return sent
}

package worker

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/tools"
)

// echoTool answers a call with its input, and sees the environment it
// runs in.
type echoTool struct {
	name string
	env  *tools.Env
}

func (e *echoTool) Def() thread.ToolDef {
	return thread.ToolDef{Name: e.name, Description: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)}
}

func (e *echoTool) Run(_ context.Context, env *tools.Env, input json.RawMessage) (tools.Result, error) {
	e.env = env
	return tools.Result{Output: string(input)}, nil
}

// runnerBundle is a toolRunner of a thread holding capabilities, with two
// echo tools (t/echo and t/other) and a memory blob store.
type runnerBundle struct {
	r     *toolRunner
	echo  *echoTool
	store blobstore.Store
}

func newRunnerBundle(t *testing.T, capabilities ...string) *runnerBundle {
	t.Helper()
	echo := &echoTool{name: "t/echo"}
	reg, err := tools.NewRegistry(echo, &echoTool{name: "t/other"})
	require.NoError(t, err)
	store := blobstore.NewMemory()
	rec := &registry.Record{ThreadID: "t/x-1", Capabilities: capabilities, DroppedCapabilities: []string{"rye.execute.tool.t.other"}}
	dir := &directive.Directive{}
	dir.Outputs.Fields = append(dir.Outputs.Fields, directive.OutputField{Name: "result", Required: true})
	r := newToolRunner(rec, dir, store, &Config{MaxToolResultBytes: tools.MinMaxResultBytes, MaxOutputTokens: 99})
	r.tools, r.env = reg, &tools.Env{ThreadID: rec.ThreadID}
	return &runnerBundle{r: r, echo: echo, store: store}
}

// TestToolRunner: the runner offers and runs only what the thread's
// capabilities allow, bounds a large result into an artifact, and
// remembers which calls of an answer are refused instead of run.
func TestToolRunner(t *testing.T) {
	t.Parallel()

	t.Run("defs and check", func(t *testing.T) {
		t.Parallel()
		b := newRunnerBundle(t, "rye.execute.tool.t.echo")
		var names []string
		for _, d := range b.r.toolDefs() {
			names = append(names, d.Name)
		}
		require.Equal(t, []string{"t/echo", directiveReturnID}, names, "the allowed tools, then directive_return")
		require.Same(t, &b.r.toolDefs()[0], &b.r.toolDefs()[0], "made once")
		require.NoError(t, b.r.check("t/echo"))
		require.EqualError(t, b.r.check("t/other"), "permission denied: calling t/other needs capability rye.execute.tool.t.other, which this thread does not hold because its parent does not hold it")
	})

	t.Run("run and bound", func(t *testing.T) {
		t.Parallel()
		b := newRunnerBundle(t, "rye.execute.tool.*")
		res, found, err := b.r.run(t.Context(), "t/echo", json.RawMessage(`{"a":1}`))
		require.NoError(t, err)
		require.True(t, found)
		require.JSONEq(t, `{"a":1}`, res.Output)
		require.Same(t, b.r.env, b.echo.env, "the tool runs in the thread's environment")
		_, found, err = b.r.run(t.Context(), "t/none", nil)
		require.NoError(t, err)
		require.False(t, found)

		small, err := b.r.bound(t.Context(), "c-1", tools.Result{Output: "short"})
		require.NoError(t, err)
		require.Equal(t, tools.Result{Output: "short"}, small)
		big := strings.Repeat("x", 4*tools.MinMaxResultBytes)
		cut, err := b.r.bound(t.Context(), "c-2", tools.Result{Output: big})
		require.NoError(t, err)
		require.Equal(t, blobkey.ToolResult("t/x-1", "c-2"), cut.Artifact)
		require.Less(t, len(cut.Output), len(big))
		whole, err := b.store.Get(t.Context(), cut.Artifact)
		require.NoError(t, err)
		require.Equal(t, big, string(whole), "kept whole")
	})

	t.Run("cut calls", func(t *testing.T) {
		t.Parallel()
		b := newRunnerBundle(t)
		b.r.cut("c-1", "too large")
		resp := &provider.Response{StopReason: "max_tokens", ToolCalls: []thread.ToolCall{
			{ID: "c-1", Input: json.RawMessage(`"{\"path\": "`)},
			{ID: "c-2", Input: json.RawMessage(`"{\"path\": "`)},
			{ID: "c-3", Input: json.RawMessage(`{"path":"a"}`)},
		}}
		b.r.refuseCutCalls(resp)
		msg, cut := b.r.cutCall("c-1")
		require.True(t, cut)
		require.Equal(t, "too large", msg, "a call already cut keeps its error")
		msg, cut = b.r.cutCall("c-2")
		require.True(t, cut)
		require.Contains(t, msg, "max_tokens 99")
		_, cut = b.r.cutCall("c-3")
		require.False(t, cut, "a whole input runs")
		b.r.clearCuts()
		_, cut = b.r.cutCall("c-1")
		require.False(t, cut, "the next answer starts with none")
	})
}

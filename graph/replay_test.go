package graph

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const replayGraph = `version: "1"
description: replay
permissions: ["rye.execute.tool.*"]
config:
  start: fetch
  nodes:
    fetch:
      action: {tool: web/get}
      retry: {attempts: 2, backoff: 1s}
      on_error: fallback
      assign: {size: "${result.size}"}
      next:
        - when: {path: state.size, op: gt, value: 10}
          to: big
        - to: small
    fallback:
      type: return
      output: {error: "${state._last_error.code}"}
    big:
      type: return
      output: {size: "${state.size}"}
    small:
      type: return
      output: {size: "${state.size}"}
`

func TestReplay(t *testing.T) {
	t.Parallel()
	g, rep, err := Parse("r", []byte(replayGraph))
	require.NoError(t, err)
	require.Empty(t, rep.Errors)
	res := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	run := ReplayRun{ID: "r-1", Graph: "r", Completed: true, Outputs: map[string]any{"size": 20.0}}
	ok := []ReplayStep{
		{Step: 1, Node: "fetch", Status: StepStatusRetry, RoutedBy: "retry", NextNode: "fetch", ErrorCode: CodeToolError, Attempt: 1},
		{Step: 2, Node: "fetch", Status: StepStatusOK, RoutedBy: "next", NextNode: "big", Result: res(map[string]any{"size": 20}), Kept: true, Assigned: []string{"size"}, Attempt: 2},
		{Step: 3, Node: "big", Status: StepStatusOK, RoutedBy: "return", Kept: true},
	}
	r := Replay(g, run, ok)
	require.Nil(t, r.Divergence, "%+v", r.Divergence)
	require.Nil(t, r.Stopped)
	require.Equal(t, 3, r.Steps)

	// The same result routed to small: the graph goes to big.
	bad := append([]ReplayStep(nil), ok...)
	bad[1].NextNode, bad[2].Node = "small", "small"
	r = Replay(g, run, bad)
	require.Equal(t, &Divergence{Step: 2, Node: "fetch", Message: "the graph routes to big (next), the run went to small (next)"}, r.Divergence)

	// A failure past its retries goes to on_error, whose output reads _last_error.
	failed := []ReplayStep{
		{Step: 1, Node: "fetch", Status: StepStatusError, RoutedBy: "on_error", NextNode: "fallback", ErrorCode: "tool_failed", Attempt: 1},
		{Step: 2, Node: "fallback", Status: StepStatusOK, RoutedBy: "return", Kept: true},
	}
	r = Replay(g, ReplayRun{ID: "r-2", Graph: "r", Completed: true, Outputs: map[string]any{"error": "tool_failed"}}, failed)
	require.Nil(t, r.Divergence, "%+v", r.Divergence)
	r = Replay(g, ReplayRun{ID: "r-2", Graph: "r", Completed: true, Outputs: map[string]any{"error": "other"}}, failed)
	require.NotNil(t, r.Divergence)
	require.Contains(t, r.Divergence.Message, `the graph returns {"error":"tool_failed"}, the run returned {"error":"other"}`)

	// A retry the graph no longer makes; a result not kept stops the replay.
	noRetry := []ReplayStep{{Step: 1, Node: "fetch", Status: StepStatusRetry, RoutedBy: "retry", NextNode: "fetch", ErrorCode: "tool_failed", Attempt: 1}}
	r = Replay(g, run, noRetry)
	require.Equal(t, "the run retried it after tool_failed, the graph does not retry it now", r.Divergence.Message)
	big := []ReplayStep{{Step: 1, Node: "fetch", Status: StepStatusOK, RoutedBy: "next", NextNode: "big", ResultBytes: 90000, Attempt: 1}}
	r = Replay(g, run, big)
	require.Nil(t, r.Divergence)
	require.NotNil(t, r.Stopped)
	require.Equal(t, 0, r.Steps)
}

func TestReplayNewRetry(t *testing.T) {
	t.Parallel()
	g, _, err := Parse("r", []byte(replayGraph))
	require.NoError(t, err)
	// The run failed on a tool error at its first attempt when the node
	// had no retry; the graph retries it now.
	failed := []ReplayStep{{Step: 1, Node: "fetch", Status: StepStatusError, RoutedBy: "on_error", NextNode: "fallback", ErrorCode: CodeToolError, Attempt: 1}}
	r := Replay(g, ReplayRun{ID: "r-3", Graph: "r"}, failed)
	require.NotNil(t, r.Divergence)
	require.Equal(t, "the graph routes to fetch (retry), the run went to fallback (on_error)", r.Divergence.Message)
}

func TestMinSuccessValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ keys, want string }{
		{"min_success: 0", "node fan: min_success: must be at least 1"},
		{"min_success: 5\n      max_items: 3", "node fan: min_success: 5 is more items than max_items (3) lets the foreach have"},
		{"min_success: lots", "min_success"},
	} {
		src := "version: \"1\"\ndescription: q\npermissions: [\"rye.execute.tool.*\"]\nconfig:\n  start: fan\n  nodes:\n    fan:\n      type: foreach\n" +
			"      over: \"${inputs.items}\"\n      " + c.keys + "\n      action: {tool: web/get}\n      next: done\n    done: {type: return}\n"
		_, rep, err := Parse("q", []byte(src))
		require.NoError(t, err)
		var msgs []string
		for _, d := range rep.Errors {
			msgs = append(msgs, d.String())
		}
		require.NotEmpty(t, msgs, c.keys)
		require.Contains(t, strings.Join(msgs, "\n"), c.want)
	}
	g, rep, err := Parse("q", []byte("version: \"1\"\ndescription: q\npermissions: [\"rye.execute.tool.*\"]\nconfig:\n  start: fan\n  nodes:\n    fan:\n      type: foreach\n"+
		"      over: \"${inputs.items}\"\n      min_success: 2\n      action: {tool: web/get}\n      next: done\n    done: {type: return}\n"))
	require.NoError(t, err)
	require.Empty(t, rep.Errors)
	require.Equal(t, 2, g.Nodes["fan"].MinSuccess)
	b, err := g.Canonical()
	require.NoError(t, err)
	require.Contains(t, string(b), "min_success: 2")
}

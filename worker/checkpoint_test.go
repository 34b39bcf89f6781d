package worker

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// TestCheckpointState: a checkpoint carries the spec's operational
// snapshot: iteration, run and turn tool counts by tool, the stop flag and
// why the checkpoint was taken.
func TestCheckpointState(t *testing.T) {
	t.Parallel()
	s := &session{activation: activation{version: 7}}
	s.st = state{Turn: 3, ToolCalls: 5, Cost: thread.Cost{Turns: 3},
		ToolCallsByID: map[string]int{"rye/file-system/fs_read": 4, "rye/file-system/fs_write": 1},
		TurnCallsByID: map[string]int{"rye/file-system/fs_read": 2}}
	raw := json.RawMessage(`{"turn":3}`)
	got := s.checkpointState(raw)
	want := transcript.State{Reason: transcript.ReasonAssistantTurn, Status: "running", Iteration: 3, Version: 7,
		Cost: thread.Cost{Turns: 3}, ToolCallsTotal: 5, ToolCallsIteration: 2,
		ToolCallsByTool:          map[string]int{"rye/file-system/fs_read": 4, "rye/file-system/fs_write": 1},
		ToolCallsIterationByTool: map[string]int{"rye/file-system/fs_read": 2},
		Extra:                    map[string]json.RawMessage{"worker": raw}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("running (-want +got):\n%s", diff)
	}
	s.st.ToolCallsByID["x"] = 9 // a copy: later counting does not change a taken state
	require.Zero(t, got.ToolCallsByTool["x"], "the state shares the worker's map")

	s.st.Pending = []pending{{CallID: "c", Kind: "wait", Threads: []string{"a"}}}
	st := s.checkpointState(raw)
	require.Equal(t, transcript.ReasonWaitingChildren, st.Reason, "waiting")
	require.False(t, st.StopFlag, "waiting")
	s.st.Handoff = "next"
	st = s.checkpointState(raw)
	require.Equal(t, transcript.ReasonHandoff, st.Reason, "handoff")
	require.True(t, st.StopFlag, "handoff")
	s.st.Final = &final{Status: thread.StatusCompleted}
	st = s.checkpointState(raw)
	require.Equal(t, transcript.ReasonRunFinished, st.Reason, "finished")
	require.Equal(t, "completed", st.Status, "finished")
	require.True(t, st.StopFlag, "finished")
}

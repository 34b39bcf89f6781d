package worker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// TestChildDroppedCapabilities: a child whose directive asks for tools its
// parent does not hold runs without them, and says so: the child_spawned
// event and the child's record list them, and a call that needs one is
// denied "because its parent does not hold it" (a capability the
// directive never asked for is denied as before).
func TestChildDroppedCapabilities(t *testing.T) {
	t.Parallel()
	h := setup(t, map[string]string{
		".ai/directives/h/greedy.md": harnessDirective("greedy", `turns="4"`,
			`<execute><tool>rye/file-system/*</tool></execute><execute><tool>acme/secret</tool></execute><load><knowledge>vault/*</knowledge></load>`),
	}, Config{})
	h.prov.script("h/a", call("rye/agent/threads/thread_directive", `{"directive_name":"h/greedy"}`), say("parent done"))
	h.prov.script("h/greedy", call("acme/secret", `{}`), call("acme/other", `{}`), say("kid done"))
	id := h.start("h/a", thread.Limits{})
	require.NoError(t, h.activate(id, "start", 0))
	h.drain(false)
	require.Equal(t, thread.StatusCompleted, h.record(id).Status)

	dropped := []string{"rye.execute.tool.acme.secret", "rye.load.knowledge.vault.*"}
	spawned := eventsOf[transcript.ChildSpawned](h, id, transcript.TypeChildSpawned)
	require.Len(t, spawned, 1)
	require.Equal(t, dropped, spawned[0].DroppedCapabilities)

	kid := h.record(spawned[0].ChildID)
	require.Equal(t, dropped, kid.DroppedCapabilities)
	require.Equal(t, []string{"rye.execute.tool.rye.file-system.*"}, kid.Capabilities)

	results := eventsOf[transcript.ToolCallResult](h, kid.ThreadID, transcript.TypeToolCallResult)
	require.Len(t, results, 2)
	require.Equal(t, "permission denied: calling acme/secret needs capability rye.execute.tool.acme.secret, "+
		"which this thread does not hold because its parent does not hold it", results[0].Output)
	require.Equal(t, "permission denied: calling acme/other needs capability rye.execute.tool.acme.other, "+
		"which this thread does not hold", results[1].Output)

	// A root holds what its directive asks for: nothing dropped.
	require.Empty(t, h.record(id).DroppedCapabilities)
}

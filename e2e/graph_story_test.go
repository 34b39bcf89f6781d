package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// graphShown is what `spool graph show --json` prints of a run's node
// table and steps.
type graphShown struct {
	Record registry.Record `json:"-"`
	Nodes []graph.NodeRow    `json:"nodes"`
	Steps []graph.StepRecord `json:"steps"`
}

// graphJSON runs `spool graph show RUN --json` and decodes it, with the
// raw text.
func graphJSON(t *testing.T, e *spooltest.Env, id string) (graphShown, string) {
	t.Helper()
	res := e.Spool("graph", "show", id, "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	var v graphShown
	res.JSON(t, &v)
	res.JSON(t, &v.Record)
	return v, res.Stdout
}

// nodeRow is the row of node in v.
func nodeRow(t *testing.T, v graphShown, node string) graph.NodeRow {
	t.Helper()
	for _, r := range v.Nodes {
		if r.Node == node {
			return r
		}
	}
	t.Fatalf("no row of node %s in %+v", node, v.Nodes)
	return graph.NodeRow{}
}

// TestGraphCancelledForeach: a run cancelled while two of its four
// foreach items run (two never started) shows the foreach step as
// cancelled, with when it ended and its items told apart (none done, two
// cancelled, two not started) on `graph show` (text and JSON) and the
// API, and no zero time anywhere; after a resume the old run, now
// continued, still shows the step cancelled, not in flight.
func TestGraphCancelledForeach(t *testing.T) {
	t.Parallel()
	e := graphEnv(t, nil)
	srv := startAPI(t, e)
	gate, release := gateFile(t)
	res := e.Spool("graph", "run", "g/hold", "--inputs-json", `{"items": ["a", "b", "c", "d"], "gate": "`+gate+`"}`, "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	var rec registry.Record
	res.JSON(t, &rec)
	id := rec.ThreadID
	waitRecord(t, e, id, "holds two children", func(r *registry.Record) bool {
		return holding(r) && len(children(t, e, id)) == 2
	})
	res = e.Spool("graph", "cancel", id)
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, thread.StatusCancelled, e.Wait([]string{id}, 2*time.Minute)[id].Status)

	checkCancelled := func(id string) {
		t.Helper()
		v, raw := graphJSON(t, e, id)
		require.NotContains(t, raw, "0001-01-01", "no zero time is printed")
		require.Len(t, v.Steps, 1, raw)
		s := v.Steps[0]
		require.Equal(t, graph.StepStatusCancelled, s.Status, "%+v", s)
		require.False(t, s.Ended.IsZero(), "a cancelled step has ended")
		require.False(t, s.Ended.Before(s.Started))
		require.Equal(t, 4, s.ItemsTotal, "%+v", s)
		require.Equal(t, 2, s.ItemsDone, "the two children the cancel stopped ended")
		require.Equal(t, 2, s.ItemsCancelled, "%+v", s)
		require.Zero(t, s.ItemsFailed, "cancelled items are not failed ones")
		require.Equal(t, 2, s.ItemsNotStarted())
		fan := nodeRow(t, v, "fan")
		require.Equal(t, graph.NodeCancelled, fan.Status)
		require.Equal(t, "0/4 done", fan.Children)
		require.Equal(t, "2 cancelled; 2 not started", fan.Detail)
		text := e.Spool("graph", "show", id)
		require.Equal(t, 0, text.Code, text.Stderr)
		require.Regexp(t, `fan\s+foreach\s+⏹ cancelled\s+1\s+1\s+directive g/waiter\s+0/4 done\s+2 cancelled; 2 not started`, text.Stdout)
	}
	checkCancelled(id)

	// The API answers the same step.
	resp, err := http.Get(srv.base + "/v1/graphs/" + esc(id))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.NotContains(t, string(body), "0001-01-01")
	var api graphShown
	require.NoError(t, json.Unmarshal(body, &api), string(body))
	require.Equal(t, graph.StepStatusCancelled, api.Steps[0].Status)
	require.Equal(t, 2, api.Steps[0].ItemsCancelled)

	// Resumed, the old run is continued: its step stays cancelled.
	res = e.Spool("graph", "resume", id, "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	release()
	final := e.Wait([]string{id}, 2*time.Minute)[id]
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	old, err := e.Orch.Record(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, thread.StatusContinued, old.Status)
	checkCancelled(id)
}

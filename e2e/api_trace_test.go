package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/registry"
)

// TestAPIJoinsTheCallersTrace: a thread started through the API with a W3C
// traceparent header belongs to the caller's trace (a service that starts
// agents sees them under its own request); a malformed header is ignored
// and the thread's trace is its own.
func TestAPIJoinsTheCallersTrace(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: apiProject()})
	srv := startAPI(t, e)
	raw := apiCall{t: t, hc: &http.Client{Transport: newOpenAPITransport(t)}, base: srv.base}
	const body = `{"directive": "t/greet", "inputs": {"name": "ada"}, "model": "script:scripts/api.yaml"}`
	start := func(traceparent string) *registry.Record {
		t.Helper()
		status, _, b := raw.do(http.MethodPost, "/v1/threads", body, func(r *http.Request) {
			r.Header.Set("traceparent", traceparent)
		})
		require.Equal(t, http.StatusCreated, status, string(b))
		var rec registry.Record
		require.NoError(t, json.Unmarshal(b, &rec))
		stored, err := e.Orch.Record(context.Background(), rec.ThreadID)
		require.NoError(t, err)
		require.Equal(t, rec.TraceID, stored.TraceID)
		return stored
	}
	const caller = "4bf92f3577b34da6a3ce929d0e0e4736"
	joined := start("00-" + caller + "-00f067aa0ba902b7-01")
	require.Equal(t, caller, joined.TraceID)
	own := start("00-not-a-trace-01")
	require.Len(t, own.TraceID, 32)
	require.NotEqual(t, caller, own.TraceID)
}

// TestRunJoinsTheTraceOfItsEnvironment: `thread run` with TRACEPARENT set
// (OpenTelemetry's environment carrier) starts a thread in that trace; a
// malformed one is ignored.
func TestRunJoinsTheTraceOfItsEnvironment(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: apiProject()})
	const caller = "4bf92f3577b34da6a3ce929d0e0e4736"
	for tp, want := range map[string]string{"00-" + caller + "-00f067aa0ba902b7-01": caller, "00-not-a-trace-01": ""} {
		rec, _ := spoolEnvJSON[registry.Record](t, e, []string{"TRACEPARENT=" + tp}, "thread", "run", "t/greet",
			"--input", "name=ada", "--model", "script:scripts/api.yaml", "--json")
		require.Len(t, rec.TraceID, 32)
		if want != "" {
			require.Equal(t, want, rec.TraceID)
		} else {
			require.NotEqual(t, caller, rec.TraceID)
		}
	}
}

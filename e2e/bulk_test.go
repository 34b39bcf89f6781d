package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// TestBulkCancelSurvivesItsRunner: `spool thread bulk cancel` of 1,000
// runs selected by a tag, its process SIGKILLed partway, is finished by
// a scheduler process that adopts the operation: every matched run ends
// cancelled, once; runs the filter does not select are untouched; the
// operation's counts add up (done = matched, failed 0, one adoption). A
// dry run counts and changes nothing, a run without --yes off a terminal
// is refused, and bad input is one line, exit 2.
func TestBulkCancelSurvivesItsRunner(t *testing.T) {
	t.Parallel()
	const n = 1000
	e := spooltest.New(t, spooltest.Options{Files: apiProject()})
	srv := startAPI(t, e)
	req := func(batch string) func(int) spooltype.RunRequest {
		return func(int) spooltype.RunRequest {
			return spooltype.RunRequest{Directive: "t/slow", Model: "script:scripts/api.yaml", Tags: map[string]string{"batch": batch}}
		}
	}
	ids := submitRuns(t, srv.base, n, 8, req("b42"))
	others := submitRuns(t, srv.base, 20, 4, req("b7"))
	srv.proc.Kill()

	// Bad input, and the refusals that change nothing.
	for _, bad := range [][]string{
		{"thread", "bulk", "cancel", "--status", "nope"},
		{"thread", "bulk", "cancel", "--tag", "batch"},
		{"thread", "bulk", "cancel", "--kind", "workflow"},
		{"thread", "bulk", "cancel", "extra"},
		{"bulk", "show", "not-an-op"},
	} {
		r := e.Spool(bad...)
		require.Equal(t, 2, r.Code, "%v: %s", bad, r.Stderr)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(r.Stderr), "\n")+1, "one line: %s", r.Stderr)
	}
	r := e.Spool("bulk", "show", "bulk-20261203T000000-0123abcd")
	require.Equal(t, 1, r.Code, r.Stderr)
	require.Contains(t, r.Stderr, "not found")

	r = e.Spool("thread", "bulk", "cancel", "--tag", "batch=b42", "--dry-run", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	var dry struct {
		Matched *int `json:"matched"`
	}
	r.JSON(t, &dry)
	require.NotNil(t, dry.Matched)
	require.Equal(t, n, *dry.Matched)
	r = e.Spool("thread", "bulk", "cancel", "--tag", "batch=b42")
	require.Equal(t, 2, r.Code, "no --yes, no terminal to ask on: %s", r.Stderr)
	require.Contains(t, r.Stderr, "--yes")
	first, err := e.Orch.Records(t.Context(), ids[:1])
	require.NoError(t, err)
	require.Equal(t, thread.StatusCreated, first[0].Status, "nothing changed")

	// The operation, its runner killed partway.
	runner := e.Start(nil, "thread", "bulk", "cancel", "--tag", "batch=b42", "--yes", "--json")
	var op orchestrator.BulkOperation
	require.Eventually(t, func() bool {
		r := e.Spool("bulk", "list", "--json")
		var l struct {
			Operations []orchestrator.BulkOperation `json:"operations"`
		}
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &l) != nil || len(l.Operations) == 0 {
			return false
		}
		op = l.Operations[0]
		return op.Done >= n/4
	}, 2*time.Minute, 50*time.Millisecond, "the runner gets a quarter through: %s", runner.Log())
	runner.Kill()
	r = e.Spool("bulk", "show", op.ID, "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	r.JSON(t, &op)
	require.Equal(t, orchestrator.BulkRunning, op.Status, "killed before the end (done %d)", op.Done)
	require.Less(t, op.Done, int64(n))
	t.Logf("runner killed at %d of %d", op.Done, n)

	sched := e.Start(nil, "scheduler", "--housekeeping-interval", "1h")
	require.Eventually(t, func() bool {
		r := e.Spool("bulk", "show", op.ID, "--json")
		return json.Unmarshal([]byte(r.Stdout), &op) == nil && op.Status == orchestrator.BulkCompleted
	}, 2*time.Minute, 200*time.Millisecond, "a scheduler finishes it: %s", sched.Log())
	require.Equal(t, int64(n), op.Matched)
	require.Equal(t, int64(n), op.Done)
	require.Zero(t, op.Failed, "%v", op.Failures)
	require.Equal(t, int64(1), op.Adoptions)
	require.Equal(t, "b42", op.Filter.Tags["batch"])

	recs := e.Wait(ids, 30*time.Second)
	for _, id := range ids {
		rec := recs[id]
		require.Equal(t, thread.StatusCancelled, rec.Status, id)
		require.NotNil(t, rec.Error)
		require.Equal(t, "cancelled", rec.Error.Code, id)
	}
	rest, err := e.Orch.Records(t.Context(), others)
	require.NoError(t, err)
	for _, rec := range rest {
		require.Equal(t, thread.StatusCreated, rec.Status, "%s is not in the filter", rec.ThreadID)
	}

	// The human output, and a second run that finds nothing left.
	r = e.Spool("bulk", "show", op.ID)
	require.Equal(t, 0, r.Code, r.Stderr)
	require.Contains(t, r.Stdout, "cancel, completed")
	require.Contains(t, r.Stdout, "matched 1000, done 1000")
	r = e.Spool("thread", "bulk", "cancel", "--tag", "batch=b42", "--yes", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	var again struct {
		Operation string `json:"operation"`
		Matched   int    `json:"matched"`
		Status    string `json:"status"`
	}
	r.JSON(t, &again)
	require.NotEmpty(t, again.Operation)
	require.Zero(t, again.Matched, "finished runs are not cancelled again")
	require.Equal(t, orchestrator.BulkCompleted, again.Status)
}

// TestBulkAPI: POST /v1/bulk approves every pending call of the runs a
// tag selects, in the background, and GET /v1/bulk/{id} follows it to
// completed; the runs go on to complete. A bulk resume then resumes each
// of them once (a second finds nothing to resume), and a dry run counts.
func TestBulkAPI(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: apiProject()})
	srv := startAPI(t, e)
	e.StartWorker()
	tr := newOpenAPITransport(t)
	raw := apiCall{t: t, hc: &http.Client{Transport: tr}, base: srv.base}
	ids := submitRuns(t, srv.base, 5, 5, func(int) spooltype.RunRequest {
		return spooltype.RunRequest{Directive: "t/gated", Model: "script:scripts/api.yaml", Tags: map[string]string{"review": "r1"}}
	})
	for _, id := range ids {
		waitStatus(t, e, id, thread.StatusWaiting)
		require.Eventually(t, func() bool {
			calls, err := e.Orch.Approvals(t.Context(), id)
			return err == nil && len(calls) == 1
		}, time.Minute, 20*time.Millisecond)
	}

	raw.problem(400, "bad_request", "POST", "/v1/bulk", `{"action": "explode"}`)
	raw.problem(400, "bad_request", "POST", "/v1/bulk", `{"action": "cancel", "status": "nope"}`)
	raw.problem(400, "bad_request", "POST", "/v1/bulk", `{"action": "cancel", "since": "yesterday"}`)
	raw.problem(404, "not_found", "GET", "/v1/bulk/bulk-20261203T000000-0123abcd", "")

	status, _, body := raw.do("POST", "/v1/bulk", `{"action": "approve", "tags": {"review": "r1"}, "dry_run": true}`)
	require.Equal(t, 200, status, string(body))
	require.JSONEq(t, `{"matched": 5}`, string(body))

	status, h, body := raw.do("POST", "/v1/bulk", `{"action": "approve", "tags": {"review": "r1"}, "by": "ops", "reason": "batch reviewed"}`)
	require.Equal(t, 202, status, string(body))
	var started orchestrator.BulkStarted
	require.NoError(t, json.Unmarshal(body, &started))
	require.Equal(t, int64(5), started.Matched)
	require.Equal(t, "/v1/bulk/"+started.Operation, h.Get("Location"))
	var op orchestrator.BulkOperation
	require.Eventually(t, func() bool {
		status, _, body := raw.do("GET", "/v1/bulk/"+started.Operation, "")
		return status == 200 && json.Unmarshal(body, &op) == nil && op.Status == orchestrator.BulkCompleted
	}, time.Minute, 50*time.Millisecond)
	require.Equal(t, int64(5), op.Done)
	require.Zero(t, op.Failed)
	require.Equal(t, "ops", op.By)
	recs := e.Wait(ids, 2*time.Minute)
	for _, id := range ids {
		require.Equal(t, thread.StatusCompleted, recs[id].Status, id)
	}

	// Resume each completed run once, from the CLI.
	r := e.Spool("thread", "bulk", "resume", "--tag", "review=r1", "--status", "completed", "--message", "and once more", "--yes", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	var res struct {
		Matched int   `json:"matched"`
		Done    int64 `json:"done"`
	}
	r.JSON(t, &res)
	require.Equal(t, 5, res.Matched)
	require.Equal(t, int64(5), res.Done)
	var tails []string
	for _, id := range ids {
		ch, err := e.Orch.GetChain(t.Context(), id)
		require.NoError(t, err)
		require.Len(t, ch.Chain, 2, "%s resumed once", id)
		tails = append(tails, ch.Chain[1].ThreadID)
	}
	// The originals are resumed: only a resumed run that ended and
	// carries the tag is one a resume would act on now.
	// (each continuation calls the gated tool again and waits for a
	// decision, which keeps it still while this counts).
	for _, id := range tails {
		waitStatus(t, e, id, thread.StatusWaiting)
	}
	r = e.Spool("thread", "bulk", "resume", "--tag", "review=r1", "--status", "completed", "--dry-run", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	var dry struct {
		Matched int `json:"matched"`
	}
	r.JSON(t, &dry)
	require.Zero(t, dry.Matched, "a resumed run is not resumed again")
}

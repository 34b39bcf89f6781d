package monitor_test

import (
	"net/http"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// TestBulkFromTheList: a filtered list offers the bulk actions (an
// unfiltered one does not); an action asks first, saying how many runs,
// and changes nothing until confirmed; confirmed, it cancels every run
// the filter selects, and no other.
func TestBulkFromTheList(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	start := func(tags map[string]string) *registry.Record {
		rec, err := e.orch.Start(t.Context(), orchestrator.StartRequest{Directive: "t/root", Inputs: map[string]any{"gate": e.gate},
			Model: "script:" + treeScript, Bundle: e.bundle, Tags: tags})
		require.NoError(t, err)
		e.waitTreeHeld(rec.ThreadID)
		return rec
	}
	a, b := start(map[string]string{"batch": "b1"}), start(map[string]string{"batch": "b1"})
	other := start(map[string]string{"batch": "b2"})
	s := e.session()

	require.NotContains(t, s.get("/").body, `action="/bulk"`, "no filter, no bulk action")
	require.Contains(t, s.get("/?tag=batch%3Db1").body, `action="/bulk"`)

	_, body := s.act("/bulk", url.Values{"action": {"cancel"}})
	require.Contains(t, body, "Narrow the list with a filter first")
	require.Equal(t, http.StatusBadRequest, s.do(http.MethodPost, "/bulk", url.Values{"action": {"explode"}, "tag": {"batch=b1"}}).code)

	r := s.do(http.MethodPost, "/bulk", url.Values{"action": {"cancel"}, "tag": {"batch=b1"}})
	require.Equal(t, http.StatusOK, r.code, r.body)
	m := regexp.MustCompile(`Cancel (\d+) runs\?`).FindStringSubmatch(r.body)
	require.NotNil(t, m, r.body)
	require.Contains(t, r.body, `<input type="hidden" name="confirmed" value="1">`)
	require.Contains(t, r.body, `<input type="hidden" name="tag" value="batch=b1">`)
	rec, err := e.orch.Record(t.Context(), a.ThreadID)
	require.NoError(t, err)
	require.Equal(t, thread.StatusWaiting, rec.Status, "not before the confirmation")

	to, body := s.act("/bulk", url.Values{"action": {"cancel"}, "tag": {"batch=b1"}, "confirmed": {"1"}})
	require.Equal(t, "/?tag=batch%3Db1", to)
	require.Regexp(t, `Operation bulk-\S+: `+m[1]+` runs to be cancelled, under way`, body)
	got := e.wait(a.ThreadID, b.ThreadID)
	require.Equal(t, thread.StatusCancelled, got[a.ThreadID].Status)
	require.Equal(t, thread.StatusCancelled, got[b.ThreadID].Status)
	rec, err = e.orch.Record(t.Context(), other.ThreadID)
	require.NoError(t, err)
	require.Equal(t, thread.StatusWaiting, rec.Status, "a run the filter does not select is left alone")

	// Every run of a and b's trees carries their tag, and the cancel
	// reaches the children after the roots end: once it has, the filter
	// selects nothing to cancel (the dry run sends back to the list).
	again := url.Values{"action": {"cancel"}, "tag": {"batch=b1"}}
	require.True(t, waitFor(t.Context(), time.Minute, func() bool {
		return s.do(http.MethodPost, "/bulk", again).code == http.StatusSeeOther
	}), "a run of a's or b's tree was never cancelled")
	_, body = s.act("/bulk", again)
	require.Contains(t, body, "No run this filter selects can be cancelled.")
}

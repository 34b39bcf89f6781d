package monitor_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

// TestForkFromHere: each model turn of the transcript view links to its
// fork page, whose form forks the thread at that turn and opens the fork;
// a form POSTed from another origin is refused, a turn the thread did not
// record is refused with a message.
func TestForkFromHere(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	rec := e.start("t/echo", map[string]any{"text": "hi"})
	require.Equal(t, thread.StatusCompleted, e.wait(rec.ThreadID)[rec.ThreadID].Status)
	id := rec.ThreadID
	s := e.session()

	forkPage := "/fork/" + id + "?turn=1"
	body := s.get(threadURL(id) + "/transcript").body
	require.Contains(t, body, `<a href="`+strings.ReplaceAll(forkPage, "&", "&amp;")+`">fork from here</a>`)
	r := s.get(forkPage)
	require.Contains(t, r.body, "Fork from turn 1")
	require.Contains(t, r.body, `<input type="hidden" name="turn" value="1">`)

	require.Equal(t, http.StatusForbidden, s.do(http.MethodPost, "/fork/"+id, url.Values{"turn": {"1"}}, crossOrigin).code, "another origin's form")
	_, body = s.act("/fork/"+id, url.Values{"turn": {"7"}})
	require.Contains(t, body, "Not forked: thread "+id+" recorded 1 model turns: there is no turn 7 to fork at")

	to, body := s.act("/fork/"+id, url.Values{"turn": {"1"}, "message": {"once more"}})
	forkID := strings.TrimPrefix(to, "/threads/")
	require.NotEqual(t, id, forkID)
	require.Contains(t, body, "Forked "+id+" at turn 1 as "+forkID)
	require.Contains(t, body, "fork of")
	f, err := e.orch.Record(t.Context(), forkID)
	require.NoError(t, err)
	require.Equal(t, id, f.ForkedFrom)
	require.Equal(t, 1, f.ForkTurn)
	require.Equal(t, "once more", f.ForkMessage)
	require.Equal(t, thread.StatusCompleted, e.wait(forkID)[forkID].Status)
	body = s.get(threadURL(forkID) + "/transcript").body
	require.Contains(t, body, "forked at turn 1")
	require.Contains(t, s.get(threadURL(id)).body, forkID, "the source's tree shows its fork")
}

package monitor

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// "Fork from here": each model turn of the transcript view links to
// GET /fork/ID?turn=N, a form (message optional) that POSTs to /fork/ID,
// a same-origin POST like the thread page's actions; the fork
// (orchestrator.Fork) then opens on the new thread's page. A read-only
// monitor refuses both.

// forkURL is the page that forks thread id at a turn.
func forkURL(id string, turn int) string {
	return "/fork/" + pathOf(id) + "?turn=" + strconv.Itoa(turn)
}

// forkPage is the fork form's template: layout, parts and fork.html.
var forkPage = sync.OnceValues(func() (*template.Template, error) {
	t, err := template.New("base").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/parts.html", "templates/fork.html")
	if err != nil {
		return nil, fmt.Errorf("monitor template fork.html: %w", err)
	}
	return t, nil
})

// forkData is the fork form.
type forkData struct {
	Thread *spooltype.Record
	Turn   int
	Action string
}

func (m *Monitor) serveFork(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("rest")
	if m.cfg.ReadOnly {
		m.errorPage(w, r, http.StatusForbidden, errReadOnly)
		return
	}
	if r.Method == http.MethodPost && !m.postForm(w, r) {
		return
	}
	turn, err := strconv.Atoi(r.FormValue("turn"))
	if err != nil || turn < 1 {
		m.errorPage(w, r, http.StatusBadRequest, "turn: want the turn, from 1, to fork at")
		return
	}
	rec, err := m.cfg.Orch.Record(r.Context(), id)
	if m.lookupFailed(w, r, id, err) {
		return
	}
	back := "/threads/" + pathOf(id) + "/transcript"
	if m.cfg.Orch.Unverified() {
		m.redirect(w, r, back, flash{Text: "A fork starts from a verified transcript, and this monitor has no public key to verify with.", Bad: true})
		return
	}
	if r.Method != http.MethodPost {
		t, err := forkPage()
		if err != nil {
			m.fail(w, r, err)
			return
		}
		m.render(w, r, http.StatusOK, t, page{Title: "Fork " + id, Data: forkData{Thread: rec, Turn: turn,
			Action: "/fork/" + pathOf(id)}})
		return
	}
	res, err := m.cfg.Orch.Fork(r.Context(), orchestrator.ForkRequest{ThreadID: id, AtTurn: turn, Message: strings.TrimSpace(r.PostFormValue("message"))})
	var te *transcript.TurnError
	var le *thread.LimitError
	switch {
	case errors.As(err, &te), errors.As(err, &le), errors.Is(err, transcript.ErrTampered), errors.Is(err, orchestrator.ErrReleased):
		m.redirect(w, r, back, flash{Text: "Not forked: " + err.Error(), Bad: true})
		return
	case err != nil:
		m.fail(w, r, err)
		return
	}
	m.redirect(w, r, "/threads/"+pathOf(res.Thread.ThreadID), flash{Text: fmt.Sprintf("Forked %s at turn %d as %s, with a budget of $%.6f.",
		id, turn, res.Thread.ThreadID, res.Budget)})
}

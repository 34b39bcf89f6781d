package monitor

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// Pause and unpause (orchestrator.Pause, Unpause), from a thread's or a
// graph run's page: the run its chain has reached and its unfinished
// descendants, or with tree=1 the whole tree it belongs to, from its
// root. Each asks for a confirmation first, as cancel does; neither
// signs anything, so a monitor without the signing key offers them too
// (a read-only one offers and takes neither).

// pause pauses (unpause: lets go on) the run rec's chain has reached and
// its descendants, once confirmed.
func (m *Monitor) pause(w http.ResponseWriter, r *http.Request, rec *spooltype.Record, unpause bool) {
	tree := r.PostFormValue("tree") == "1"
	cur, err := m.current(r, rec)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	page := "/threads/" + pathOf(cur.ThreadID)
	if cur.Status.Terminal() {
		m.redirect(w, r, page, flash{Text: fmt.Sprintf("%s is %s: nothing to %s.", cur.ThreadID, cur.Status, pauseVerb(unpause))})
		return
	}
	if r.PostFormValue("confirmed") != "1" {
		m.confirm(w, r, pauseConfirmation(cur, "/threads/"+pathOf(rec.ThreadID), tree, unpause))
		return
	}
	op := m.cfg.Orch.Pause
	if unpause {
		op = m.cfg.Orch.Unpause
	}
	out, err := op(r.Context(), rec.ThreadID, tree)
	if errors.Is(err, orchestrator.ErrRunEnded) {
		m.redirect(w, r, page, flash{Text: fmt.Sprintf("%s has ended: nothing to %s.", cur.ThreadID, pauseVerb(unpause)), Bad: true})
		return
	}
	if err != nil {
		m.fail(w, r, err)
		return
	}
	m.redirect(w, r, page, flash{Text: pauseOutcome(out, unpause)})
}

func pauseVerb(unpause bool) string {
	if unpause {
		return "unpause"
	}
	return "pause"
}

// pauseConfirmation is the confirmation page of a pause or unpause of
// cur (the run the chain has reached), posting to action's page.
func pauseConfirmation(cur *spooltype.Record, page string, tree, unpause bool) confirmData {
	what, of := "thread", "directive"
	boundary := "a running thread before its next turn"
	if cur.IsGraph() {
		what, of, boundary = "graph run", "graph", "a running graph run between steps"
	}
	d := confirmData{Back: page, Action: page + "/" + pauseVerb(unpause), Fields: [][2]string{{"tree", boolField(tree)}},
		Details: [][2]string{{what, cur.ThreadID}, {of, cur.Directive}, {"status", string(cur.Status)}}}
	scope := "it and its unfinished descendants"
	if tree {
		scope = "every unfinished run of its tree, from its root"
		if len(cur.Ancestors) > 0 {
			scope += " " + cur.Ancestors[0]
		}
	}
	if unpause {
		d.Question, d.Button = fmt.Sprintf("Unpause this %s?", what), "Unpause"
		d.Details = append(d.Details, [2]string{"unpauses", scope},
			[2]string{"then", "each goes on where it was: one that waited waits again, woken at once if what it waited for came meanwhile"})
		return d
	}
	d.Question, d.Button = fmt.Sprintf("Pause this %s?", what), "Pause"
	d.Details = append(d.Details, [2]string{"pauses", scope},
		[2]string{"when", "a waiting run at once; " + boundary + "; a child started later is paused too"},
		[2]string{"while paused", "no worker slot is held and the duration limit does not count; unpause lets it go on"})
	return d
}

// pauseOutcome says what a pause or unpause did.
func pauseOutcome(out *orchestrator.PauseResult, unpause bool) string {
	runs := thread.Count(out.Runs, "run", "runs")
	switch {
	case unpause:
		return fmt.Sprintf("Unpaused %s (%s): each goes on where it was.", out.ThreadID, runs)
	case out.Paused == out.Runs:
		return fmt.Sprintf("Paused %s (%s).", out.ThreadID, runs)
	default:
		return fmt.Sprintf("Pause requested for %s (%s, %d paused now): the others pause at their next boundary.", out.ThreadID, runs, out.Paused)
	}
}

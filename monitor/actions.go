package monitor

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// The actions of the thread page: send and interrupt (a message to the
// model), cancel, pause and unpause, and resume with a message. Each is a
// POST of a form, refused unless same-origin (http.CrossOriginProtection,
// see handler); cancel, pause, unpause and resume first answer with a
// confirmation page whose form POSTs again with confirmed=1. Every action
// redirects (303) to a page that shows its outcome once (a flash cookie).

// maxForm bounds a POSTed form.
const maxForm = 256 << 10

// noSigner says why cancel and resume are unavailable.
const noSigner = "Cancel and resume write signed records (thread.json, the transcript's thread_resumed), and this monitor holds no signing key: " +
	"use `spool thread cancel` / `spool thread resume`, or start the monitor with --sign (spool dev's holds it)."

// who is the person an action is recorded as: the basic auth user, else
// the form's "by", else "monitor".
func who(r *http.Request) string {
	if u, _, ok := r.BasicAuth(); ok && u != "" {
		return u
	}
	if b := strings.TrimSpace(r.PostFormValue("by")); b != "" {
		return firstLine(b, 80)
	}
	return "monitor"
}

// errCrossOrigin refuses an unsafe request from another origin (a form
// or script of another site).
const errCrossOrigin = "cross-origin request refused: this monitor takes actions only from its own pages"

// errReadOnly refuses an action on a read-only monitor.
const errReadOnly = "this monitor is read-only: it takes no action (use the CLI, or a monitor without --read-only)"

// postForm reads a POSTed form (which http.CrossOriginProtection let
// through: a same-origin request, or one from no browser); false when it
// answered the request already.
func (m *Monitor) postForm(w http.ResponseWriter, r *http.Request) bool {
	if m.cfg.ReadOnly {
		m.errorPage(w, r, http.StatusForbidden, errReadOnly)
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		m.errorPage(w, r, http.StatusBadRequest, "the form does not read: "+err.Error())
		return false
	}
	return true
}

// back is where an action returns: the form's "return" when it is a path
// of this monitor, else def.
func back(r *http.Request, def string) string {
	ret := r.PostFormValue("return")
	if strings.HasPrefix(ret, "/") && !strings.HasPrefix(ret, "//") && !strings.ContainsAny(ret, "\\\r\n") {
		return ret
	}
	return def
}

// flash is a one-line outcome shown once on the next page; Bad marks a
// refusal.
type flash struct {
	Text string
	Bad  bool
}

func (m *Monitor) redirect(w http.ResponseWriter, r *http.Request, to string, f flash) {
	prefix := "+"
	if f.Bad {
		prefix = "!"
	}
	m.setFlash(w, r, prefix+f.Text)
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// pageFlash takes the flash message for the page being rendered.
func (m *Monitor) pageFlash(w http.ResponseWriter, r *http.Request) *flash {
	s := m.takeFlash(w, r)
	if len(s) < 2 {
		return nil
	}
	return &flash{Text: s[1:], Bad: s[0] == '!'}
}

// confirmData is a confirmation page: the question, what it is about, and
// the form that confirms (the original fields and confirmed=1).
type confirmData struct {
	Question string
	Details  [][2]string
	Action   string
	Fields   [][2]string
	Button   string
	Back     string
}

func (m *Monitor) serveThreadAction(w http.ResponseWriter, r *http.Request) {
	rest := r.PathValue("rest")
	i := strings.LastIndex(rest, "/")
	if i <= 0 {
		m.errorPage(w, r, http.StatusNotFound, "no such action")
		return
	}
	id, action := rest[:i], rest[i+1:]
	switch action {
	case "send", "interrupt", "cancel", "pause", "unpause", "resume", "fork":
	default:
		m.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("no action %q: want send, interrupt, cancel, pause, unpause, resume or fork", action))
		return
	}
	if !m.postForm(w, r) {
		return
	}
	rec, err := m.cfg.Orch.Record(r.Context(), id)
	if m.lookupFailed(w, r, id, err) {
		return
	}
	switch action {
	case "send", "interrupt":
		m.send(w, r, rec, action == "interrupt")
	case "cancel":
		m.cancel(w, r, rec)
	case "pause", "unpause":
		m.pause(w, r, rec, action == "unpause")
	case "resume":
		if rec.IsGraph() {
			m.resumeGraph(w, r, rec)
			return
		}
		m.resume(w, r, rec)
	case "fork":
		m.forkGraph(w, r, rec)
	}
}

// send queues the form's message for rec (interrupt: stopping the work in
// flight).
func (m *Monitor) send(w http.ResponseWriter, r *http.Request, rec *spooltype.Record, interrupt bool) {
	page := "/threads/" + pathOf(rec.ThreadID)
	msg := strings.TrimSpace(r.PostFormValue("message"))
	if msg == "" {
		m.redirect(w, r, page, flash{Text: "Write a message first.", Bad: true})
		return
	}
	res, err := m.cfg.Orch.Send(r.Context(), rec.ThreadID, msg, who(r), interrupt)
	if errors.Is(err, orchestrator.ErrFinished) {
		m.redirect(w, r, page, flash{Text: fmt.Sprintf("%s has finished: it takes no message (resume continues a finished thread).", rec.ThreadID), Bad: true})
		return
	}
	if err != nil {
		m.fail(w, r, err)
		return
	}
	text := fmt.Sprintf("Message %d queued for %s: the model sees it before its next call.", res.Seq, res.ThreadID)
	if res.Interrupt {
		text = fmt.Sprintf("Interrupt sent to %s: the model call or tool in flight stops and the model gets the message now.", res.ThreadID)
	}
	if res.Woken {
		text += " The waiting thread was woken to record it."
	}
	m.redirect(w, r, page, flash{Text: text})
}

// cancel cancels the thread rec's chain has reached, once confirmed
// (cascade=1: its children too, as the project's child policy says).
func (m *Monitor) cancel(w http.ResponseWriter, r *http.Request, rec *spooltype.Record) {
	page := "/threads/" + pathOf(rec.ThreadID)
	if !m.cfg.Orch.CanSign() {
		m.redirect(w, r, page, flash{Text: noSigner, Bad: true})
		return
	}
	cascade := r.PostFormValue("cascade") == "1"
	cur, err := m.current(r, rec)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	if cur.Status.Terminal() {
		m.redirect(w, r, "/threads/"+pathOf(cur.ThreadID), flash{Text: fmt.Sprintf("%s is %s already: nothing to cancel.", cur.ThreadID, cur.Status)})
		return
	}
	if r.PostFormValue("confirmed") != "1" {
		question, button, what, of := "Cancel this thread?", "Cancel the thread", "thread", "directive"
		if cur.IsGraph() {
			question, button, what, of = "Cancel this graph run?", "Cancel the run", "run", "graph"
		}
		d := confirmData{Question: question, Action: page + "/cancel", Button: button, Back: page,
			Details: [][2]string{{what, cur.ThreadID}, {of, cur.Directive}, {"status", string(cur.Status)},
				{"children", "keep running"}},
			Fields: [][2]string{{"cascade", boolField(cascade)}}}
		if cascade {
			d.Details[3][1] = "cancelled too, where the project's child policy cascades a cancel"
		}
		m.confirm(w, r, d)
		return
	}
	out, err := m.cfg.Orch.Cancel(r.Context(), rec.ThreadID, cascade)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	text := fmt.Sprintf("Cancelled %s.", out.ThreadID)
	switch {
	case out.Status.Terminal():
	case rec.IsGraph():
		text = fmt.Sprintf("Cancel requested for %s: its worker stops it inside its step or between steps.", out.ThreadID)
	default:
		text = fmt.Sprintf("Cancel requested for %s: its worker stops it during its model call or tool, or between turns.", out.ThreadID)
	}
	m.redirect(w, r, "/threads/"+pathOf(out.ThreadID), flash{Text: text})
}

// resume resumes the thread rec's chain has reached with the form's
// message, once confirmed.
func (m *Monitor) resume(w http.ResponseWriter, r *http.Request, rec *spooltype.Record) {
	page := "/threads/" + pathOf(rec.ThreadID)
	msg := strings.TrimSpace(r.PostFormValue("message"))
	if !m.cfg.Orch.CanSign() {
		m.redirect(w, r, page, flash{Text: noSigner, Bad: true})
		return
	}
	if msg == "" {
		m.redirect(w, r, page, flash{Text: "Write the message the thread resumes with.", Bad: true})
		return
	}
	cur, err := m.current(r, rec)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	if !cur.Status.Resumable() {
		m.redirect(w, r, page, flash{Text: (&orchestrator.NotResumableError{ThreadID: cur.ThreadID, Status: cur.Status}).Error() + ".", Bad: true})
		return
	}
	if r.PostFormValue("confirmed") != "1" {
		m.confirm(w, r, confirmData{Question: "Resume this thread with a message?", Action: page + "/resume", Button: "Resume", Back: page,
			Details: [][2]string{{"thread", cur.ThreadID}, {"directive", cur.Directive}, {"status", string(cur.Status)},
				{"message", msg}, {"budget", "the new thread carries what the chain has left of its spend limit"}},
			Fields: [][2]string{{"message", msg}}})
		return
	}
	res, err := m.cfg.Orch.Resume(r.Context(), rec.ThreadID, msg)
	var nr *orchestrator.NotResumableError
	if errors.As(err, &nr) {
		m.redirect(w, r, page, flash{Text: nr.Error() + ".", Bad: true})
		return
	}
	if err != nil {
		m.fail(w, r, err)
		return
	}
	m.redirect(w, r, "/threads/"+pathOf(res.NewThreadID), flash{Text: fmt.Sprintf("Resumed %s as %s (%s carried over).",
		res.ResolvedThreadID, res.NewThreadID, thread.Count(res.ReconstructedTurns, "turn", "turns"))})
}

// current is the thread rec's continuation chain has reached (rec itself
// unless it continued).
func (m *Monitor) current(r *http.Request, rec *spooltype.Record) (*spooltype.Record, error) {
	if rec.Status != thread.StatusContinued {
		return rec, nil
	}
	return m.cfg.Orch.Latest(r.Context(), rec.ThreadID)
}

func boolField(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func (m *Monitor) confirm(w http.ResponseWriter, r *http.Request, d confirmData) {
	m.render(w, r, http.StatusOK, m.pages.confirm, page{Title: d.Question, Data: d})
}

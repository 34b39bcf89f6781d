package monitor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
)

// approvalRow is a pending call as the inbox shows it.
type approvalRow struct {
	orchestrator.PendingCall
	Shown string // its input, indented and cut at maxText
	Cut   int    // bytes of the input not shown
}

func approvalRows(calls []orchestrator.PendingCall) []approvalRow {
	out := make([]approvalRow, 0, len(calls))
	for _, c := range calls {
		var v eventView
		v.setText(prettyJSON(c.Input))
		out = append(out, approvalRow{PendingCall: c, Shown: v.Text, Cut: v.Truncated})
	}
	return out
}

// approvalForm is a pending call with its decision form.
type approvalForm struct {
	approvalRow
	Return string // where the decision comes back to
	// Named: the basic auth user decides; otherwise the form asks who.
	Named bool
	// ReadOnly: no form (Config.ReadOnly).
	ReadOnly bool
}

// approvalForms are the forms of calls, which return to ret.
func (m *Monitor) approvalForms(r *http.Request, calls []orchestrator.PendingCall, ret string) []approvalForm {
	_, _, named := r.BasicAuth()
	var out []approvalForm
	for _, row := range approvalRows(calls) {
		out = append(out, approvalForm{approvalRow: row, Return: ret, Named: named, ReadOnly: m.cfg.ReadOnly})
	}
	return out
}

// approvalsData is the inbox.
type approvalsData struct {
	Calls    []approvalForm
	Thread   string // ?thread= filter
	ReadOnly bool
}

func (m *Monitor) serveApprovals(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimSpace(r.URL.Query().Get("thread"))
	if id != "" {
		if _, err := m.cfg.Orch.Record(r.Context(), id); errors.Is(err, registry.ErrNotFound) {
			m.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("thread %q not found", id))
			return
		}
	}
	calls, err := m.cfg.Orch.Approvals(r.Context(), id)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	ret := "/approvals"
	if id != "" {
		ret += "?thread=" + url.QueryEscape(id)
	}
	d := approvalsData{Calls: m.approvalForms(r, calls, ret), Thread: id, ReadOnly: m.cfg.ReadOnly}
	title := "Approvals"
	if len(calls) > 0 {
		title = fmt.Sprintf("Approvals (%d)", len(calls))
	}
	m.render(w, r, http.StatusOK, m.pages.approvals, page{Title: title, Nav: "approvals", Data: d})
}

// serveDecide applies the inbox's (and the thread page's) approve and
// deny buttons: form fields thread, call (empty: every pending call of
// the thread), request (the call's request the form showed: the
// decision lands on that request only), decision, reason (required to
// deny: the model gets it as the call's error), by, return.
func (m *Monitor) serveDecide(w http.ResponseWriter, r *http.Request) {
	if !m.postForm(w, r) {
		return
	}
	id, call, request := r.PostFormValue("thread"), r.PostFormValue("call"), r.PostFormValue("request")
	decision, reason := r.PostFormValue("decision"), strings.TrimSpace(r.PostFormValue("reason"))
	ret := back(r, "/approvals")
	if decision != registry.DecisionApprove && decision != registry.DecisionDeny {
		m.errorPage(w, r, http.StatusBadRequest, fmt.Sprintf("decision %q: want approve or deny", decision))
		return
	}
	if decision == registry.DecisionDeny && reason == "" {
		m.redirect(w, r, ret, flash{Text: "Say why to deny: the model gets the reason as the call's error.", Bad: true})
		return
	}
	var calls []string
	if call != "" {
		calls = []string{call}
	}
	var res *orchestrator.DecideResult
	var err error
	if call != "" && request != "" {
		res, err = m.cfg.Orch.DecideRequest(r.Context(), id, call, request, decision, who(r), reason)
	} else {
		res, err = m.cfg.Orch.Decide(r.Context(), id, calls, decision, who(r), reason)
	}
	switch {
	case errors.Is(err, registry.ErrNotFound):
		m.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("thread %q not found", id))
		return
	case errors.Is(err, registry.ErrNotPending):
		m.redirect(w, r, ret, flash{Text: fmt.Sprintf("Nothing of %s waits for a decision any more (decided already, or the thread moved on).", id), Bad: true})
		return
	case err != nil:
		m.fail(w, r, err)
		return
	}
	m.redirect(w, r, ret, flash{Text: decidedText(res)})
}

// decidedText says what a decision did.
func decidedText(res *orchestrator.DecideResult) string {
	verb := "Approved"
	if res.Decision == registry.DecisionDeny {
		verb = "Denied"
	}
	text := fmt.Sprintf("%s %s of %s (by %s).", verb, strings.Join(res.Calls, ", "), res.ThreadID, res.By)
	if res.Woken {
		text += " The thread continues."
	} else {
		text += " The thread waits for its other calls' decisions."
	}
	return text
}

// decideData is the page of a one-time decision link.
type decideData struct {
	Token    string
	Decision string
	Thread   *registry.Record
	Call     *approvalRow // nil: nothing waits for this link's decision
	Done     string       // what the decision did
	Problem  string
	// Taken: the POST found the call decided already.
	Taken bool
}

// serveDecisionLink serves the one-time approve and deny links of the
// approval webhook (orchestrator.DecisionLinks): GET shows the call and a
// confirmation form (a link preview or a mail scanner that fetches the
// link decides nothing); POST decides with orchestrator.DecideByToken,
// recorded as by "link", and answers JSON to a client that asks for it.
// The signed token is the credential, so this path is outside the
// monitor's authentication; cross-site POSTs are refused all the same.
func (m *Monitor) serveDecisionLink(w http.ResponseWriter, r *http.Request) {
	wantJSON := strings.Contains(r.Header.Get("Accept"), "application/json")
	if m.cfg.ReadOnly {
		m.linkProblem(w, r, wantJSON, http.StatusForbidden, errReadOnly)
		return
	}
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			m.linkProblem(w, r, wantJSON, http.StatusBadRequest, "the form does not read: "+err.Error())
			return
		}
	}
	token := r.FormValue("token")
	ctx := r.Context()
	tok, err := m.cfg.Orch.VerifyDecisionToken(ctx, token)
	if errors.Is(err, orchestrator.ErrBadToken) {
		m.linkProblem(w, r, wantJSON, http.StatusForbidden, err.Error())
		return
	}
	if err != nil {
		m.fail(w, r, err)
		return
	}
	d, err := m.linkData(ctx, token, tok)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	code := http.StatusOK
	if r.Method == http.MethodPost {
		var answered bool
		if code, answered = m.decideByLink(w, r, &d, tok.Decision, wantJSON); answered {
			return
		}
	}
	if wantJSON {
		linkJSON(w, code, d, tok)
		return
	}
	title := "Approve a tool call"
	if tok.Decision == registry.DecisionDeny {
		title = "Deny a tool call"
	}
	m.render(w, r, code, m.pages.decide, page{Title: title, Bare: true, Data: d})
}

// linkData is the page of the decision link of token, tok verified: the
// thread's record, and the call the link decides when it still waits.
func (m *Monitor) linkData(ctx context.Context, token string, tok *orchestrator.DecisionToken) (decideData, error) {
	rec, err := m.cfg.Orch.Record(ctx, tok.ThreadID)
	if err != nil {
		return decideData{}, err
	}
	d := decideData{Token: token, Decision: tok.Decision, Thread: rec}
	call, err := m.cfg.Orch.LinkedCall(ctx, tok)
	if err != nil {
		return decideData{}, err
	}
	if call != nil {
		row := approvalRows([]orchestrator.PendingCall{*call})[0]
		d.Call = &row
	}
	return d, nil
}

// decideByLink decides, on a POST, by d's token (decision is the
// token's) with the form's reason, and returns the status of the page:
// a denial without a reason is d's Problem, a call decided already is
// Taken, a decision made is Done. It reports answered when it has
// answered itself: a failure, or a decision to a client that asked for
// JSON.
func (m *Monitor) decideByLink(w http.ResponseWriter, r *http.Request, d *decideData, decision string, wantJSON bool) (code int, answered bool) {
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if decision == registry.DecisionDeny && reason == "" {
		d.Problem = "Say why to deny: the model gets the reason as the call's error."
		return http.StatusBadRequest, false
	}
	res, err := m.cfg.Orch.DecideByToken(r.Context(), d.Token, reason)
	switch {
	case errors.Is(err, registry.ErrNotPending):
		d.Call, d.Taken = nil, true
		return http.StatusConflict, false
	case err != nil:
		m.fail(w, r, err)
		return 0, true
	case wantJSON:
		writeJSON(w, http.StatusOK, res)
		return 0, true
	}
	d.Done, d.Call = decidedText(res), nil
	return http.StatusOK, false
}

// linkJSON answers a decision link's client that asked for JSON, with
// code the page's status: d's problem, an error when no call waits for
// the link's decision (any more), or the call that does.
func linkJSON(w http.ResponseWriter, code int, d decideData, tok *orchestrator.DecisionToken) {
	switch {
	case d.Problem != "":
		jsonError(w, code, d.Problem)
	case d.Call == nil:
		jsonError(w, http.StatusConflict, fmt.Sprintf("call %s of %s waits for no decision (decided already, or the thread moved on)", tok.CallID, tok.ThreadID))
	default:
		writeJSON(w, http.StatusOK, d.Call.PendingCall)
	}
}

func (m *Monitor) linkProblem(w http.ResponseWriter, r *http.Request, wantJSON bool, code int, msg string) {
	if wantJSON {
		jsonError(w, code, msg)
		return
	}
	m.render(w, r, code, m.pages.decide, page{Title: http.StatusText(code), Bare: true, Data: decideData{Problem: msg}})
}

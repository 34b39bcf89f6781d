package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
)

// approvalRow is a pending call as the inbox shows it.
type approvalRow struct {
	orchestrator.PendingCall
	Shown string // its input, indented and cut at maxText
	Cut   int    // bytes of the input not shown
	// Run: the call is a graph run's (an approval node's request, or a
	// tool call its approvals.yaml gates), not a thread's model's.
	Run bool
	// Request is an approval node's, read from its input; nil for a tool
	// call (or an input that does not read as one).
	Request *nodeRequest
}

// nodeRequest is what a graph run's approval node asks a person: its
// prompt, and its show, key by key.
type nodeRequest struct {
	Node   string // the run's node waiting for it
	Prompt string
	Show   []shownValue
}

// shownValue is one entry of an approval node's show: text as it is,
// anything else as indented JSON (Block).
type shownValue struct {
	Key, Text string
	Block     bool
}

// graphApprovalTool is the tool name of a graph run's approval node's
// pending call.
const graphApprovalTool = orchestrator.GraphApprovalTool

// approvalRows are calls as the pages show them, each read with its
// thread's record (a graph run's calls are worded as the run's).
func (m *Monitor) approvalRows(ctx context.Context, calls []orchestrator.PendingCall) []approvalRow {
	recs := map[string]*spooltype.Record{}
	out := make([]approvalRow, 0, len(calls))
	for _, c := range calls {
		rec, seen := recs[c.ThreadID]
		if !seen {
			rec, _ = m.cfg.Orch.Record(ctx, c.ThreadID) // nil: worded as a thread's
			recs[c.ThreadID] = rec
		}
		out = append(out, approvalRowOf(c, rec))
	}
	return out
}

// approvalRowOf is call c of the thread or run rec (nil when unknown).
func approvalRowOf(c orchestrator.PendingCall, rec *spooltype.Record) approvalRow {
	var v eventView
	v.setText(prettyJSON(c.Input))
	row := approvalRow{PendingCall: c, Shown: v.Text, Cut: v.Truncated, Run: rec != nil && rec.IsGraph()}
	if row.Run && c.Tool == graphApprovalTool {
		row.Request = readRequest(c.Input, rec.CurrentNode)
	}
	return row
}

// readRequest reads an approval node's input ({prompt, show}); nil when
// it does not read so (the page shows the input as JSON then).
func readRequest(input json.RawMessage, node string) *nodeRequest {
	in, ok := orchestrator.ReadNodeRequest(input)
	if !ok {
		return nil
	}
	req := &nodeRequest{Node: node, Prompt: in.Prompt}
	for _, e := range in.Entries() {
		req.Show = append(req.Show, shownOf(e.Key, e.Value))
	}
	return req
}

// shownOf is the entry key of a show holding v.
func shownOf(key string, v any) shownValue {
	switch x := v.(type) {
	case string:
		return shownValue{Key: key, Text: x, Block: strings.Contains(x, "\n")}
	case map[string]any, []any:
		return shownValue{Key: key, Text: pretty(x), Block: true}
	}
	return shownValue{Key: key, Text: pretty(v)}
}

// denial says where the reason of a denial of the call goes: to the
// model (a thread's call), into the run's result (an approval node,
// whose run routes on it) or into the step's error (a tool call of a
// run); short for a form's placeholder.
func (a approvalRow) denial(short bool) string {
	return denialOf(a.Run, a.Tool, short)
}

// ReasonHint is the placeholder of the call's reason field.
func (a approvalRow) ReasonHint() string {
	return "reason (required to deny: " + a.denial(true) + ")"
}

// DenyHint is what a denial's reason is for, for the one-time link's
// form.
func (a approvalRow) DenyHint() string { return a.denial(true) }

func denialOf(run bool, tool string, short bool) string {
	switch {
	case run && tool == graphApprovalTool && short:
		return "the run gets it in result.reason"
	case run && tool == graphApprovalTool:
		return "the run gets the reason in result.reason and routes on the denial"
	case run && short:
		return "the step fails with it"
	case run:
		return "the step fails with approval_denied and the reason"
	case short:
		return "the model gets it"
	}
	return "the model gets the reason as the call's error"
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
	for _, row := range m.approvalRows(r.Context(), calls) {
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
		if _, err := m.cfg.Orch.Record(r.Context(), id); errors.Is(err, orchestrator.ErrNotFound) {
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
	if decision != orchestrator.DecisionApprove && decision != orchestrator.DecisionDeny {
		m.errorPage(w, r, http.StatusBadRequest, fmt.Sprintf("decision %q: want approve or deny", decision))
		return
	}
	rec, err := m.cfg.Orch.Record(r.Context(), id)
	if m.lookupFailed(w, r, id, err) {
		return
	}
	if decision == orchestrator.DecisionDeny && reason == "" {
		m.redirect(w, r, ret, flash{Text: "Say why to deny: " + denialOf(rec.IsGraph(), pendingTool(rec, call), false) + ".", Bad: true})
		return
	}
	var calls []string
	if call != "" {
		calls = []string{call}
	}
	var res *orchestrator.DecideResult
	if call != "" && request != "" {
		res, err = m.cfg.Orch.DecideRequest(r.Context(), id, call, request, decision, who(r), reason)
	} else {
		res, err = m.cfg.Orch.Decide(r.Context(), id, calls, decision, who(r), reason)
	}
	switch {
	case errors.Is(err, orchestrator.ErrNotFound):
		m.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("thread %q not found", id))
		return
	case errors.Is(err, orchestrator.ErrNotPending):
		m.redirect(w, r, ret, flash{Text: fmt.Sprintf("Nothing of %s waits for a decision any more (decided already, or the %s moved on).", id, threadOrRun(rec)), Bad: true})
		return
	case err != nil:
		m.fail(w, r, err)
		return
	}
	m.redirect(w, r, ret, flash{Text: decidedText(res, rec.IsGraph())})
}

// threadOrRun is what rec is, in a sentence.
func threadOrRun(rec *spooltype.Record) string {
	if rec.IsGraph() {
		return "run"
	}
	return "thread"
}

// pendingTool is the tool of rec's pending call call (of its first one
// when call is empty: a decision of them all), "" when none waits.
func pendingTool(rec *spooltype.Record, call string) string {
	for _, p := range rec.PendingApprovals {
		if call == "" || p.CallID == call {
			return p.Tool
		}
	}
	return ""
}

// decidedText says what a decision of a thread's calls (or of a graph
// run's, run) did.
func decidedText(res *orchestrator.DecideResult, run bool) string {
	verb := "Approved"
	if res.Decision == orchestrator.DecisionDeny {
		verb = "Denied"
	}
	text := fmt.Sprintf("%s %s of %s (by %s).", verb, strings.Join(res.Calls, ", "), res.ThreadID, res.By)
	who := map[bool]string{false: "thread", true: "run"}[run]
	if res.Woken {
		return text + " The " + who + " continues."
	}
	return text + " The " + who + " waits for its other calls' decisions."
}

// decideData is the page of a one-time decision link.
type decideData struct {
	Token    string
	Decision string
	Thread   *spooltype.Record
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
	if tok.Decision == orchestrator.DecisionDeny {
		title = "Deny a tool call"
	}
	if d.Call != nil && d.Call.Request != nil {
		title = strings.Replace(title, "a tool call", "a graph run's request", 1)
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
		row := approvalRowOf(*call, rec)
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
	if decision == orchestrator.DecisionDeny && reason == "" {
		tool := ""
		if d.Call != nil {
			tool = d.Call.Tool
		}
		d.Problem = "Say why to deny: " + denialOf(d.Thread.IsGraph(), tool, false) + "."
		return http.StatusBadRequest, false
	}
	res, err := m.cfg.Orch.DecideByToken(r.Context(), d.Token, reason)
	switch {
	case errors.Is(err, orchestrator.ErrNotPending):
		d.Call, d.Taken = nil, true
		return http.StatusConflict, false
	case err != nil:
		m.fail(w, r, err)
		return 0, true
	case wantJSON:
		writeJSON(w, http.StatusOK, res)
		return 0, true
	}
	d.Done, d.Call = decidedText(res, d.Thread.IsGraph()), nil
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

package monitor_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/monitor"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// gatedApprovals gates t/deploy, which only t/gated calls.
const gatedApprovals = "approvals:\n  - tool: t/deploy\n"

// session is a browser-like client of the monitor: it keeps cookies and
// does not follow redirects, so a test sees each action's 303 and the
// page it leads to.
type session struct {
	e      *env
	c      *http.Client
	header http.Header // added to every request
}

func (e *env) session() *session {
	jar, err := cookiejar.New(nil)
	require.NoError(e.t, err)
	c := *e.srv.Client()
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &session{e: e, c: &c, header: http.Header{}}
}

type response struct {
	code     int
	body     string
	location string
}

func (s *session) do(method, path string, form url.Values, tweak ...func(*http.Request)) response {
	s.e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(s.e.t.Context(), method, s.e.srv.URL+path, body)
	require.NoError(s.e.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range s.header {
		req.Header[k] = v
	}
	for _, f := range tweak {
		f(req)
	}
	resp, err := s.c.Do(req)
	require.NoError(s.e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(s.e.t, err)
	return response{code: resp.StatusCode, body: string(b), location: resp.Header.Get("Location")}
}

func (s *session) get(path string) response { return s.do(http.MethodGet, path, nil) }

// crossSite makes a request what a browser sends from another site's
// page; crossOrigin, what an older browser sends (Origin only).
func crossSite(r *http.Request)   { r.Header.Set("Sec-Fetch-Site", "cross-site") }
func crossOrigin(r *http.Request) { r.Header.Set("Origin", "http://evil.example") }

// act POSTs a form and requires a redirect; it returns the page it leads
// to (where the outcome is shown once).
func (s *session) act(path string, form url.Values) (to, page string) {
	s.e.t.Helper()
	r := s.do(http.MethodPost, path, form)
	require.Equal(s.e.t, http.StatusSeeOther, r.code, "POST %s: %s", path, r.body)
	next := s.get(r.location)
	require.Equal(s.e.t, http.StatusOK, next.code, next.body)
	return r.location, next.body
}

// waitFor waits until thread id's record satisfies cond.
func (e *env) waitRecord(id string, what string, cond func(*registry.Record) bool) *registry.Record {
	e.t.Helper()
	var rec *registry.Record
	ok := waitFor(e.t.Context(), time.Minute, func() bool {
		r, err := e.orch.Record(context.Background(), id)
		rec = r
		return err == nil && cond(r)
	})
	require.True(e.t, ok, "%s: %s never %s (%+v)", e.t.Name(), id, what, rec)
	return rec
}

func waitingForApproval(r *registry.Record) bool {
	return r.Status == thread.StatusWaiting && r.WaitingFor == registry.WaitingForApproval
}

// transcriptEvents reads a thread's events of one type.
func (e *env) transcriptEvents(id, typ string) []transcript.Event {
	e.t.Helper()
	evs, err := e.readEvents(id, typ)
	require.NoError(e.t, err)
	return evs
}

func (e *env) readEvents(id, typ string) ([]transcript.Event, error) {
	tr, err := transcript.Read(e.t.Context(), e.store, id, e.keyring, transcript.Strict)
	if err != nil {
		return nil, err
	}
	var out []transcript.Event
	for _, ev := range tr.Events {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out, nil
}

// TestApprovalsInbox: a gated call is listed at /approvals and on its
// thread's page; a decision needs a same-origin request (no token), a
// denial a reason; an approval runs the call once and the
// thread completes; a second decision finds nothing pending.
func TestApprovalsInbox(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{files: map[string]string{".ai/config/agent/approvals.yaml": gatedApprovals}})
	rec := e.start("t/gated", map[string]any{"target": "prod"})
	waiting := e.waitRecord(rec.ThreadID, "waited for approval", waitingForApproval)
	require.Len(t, waiting.PendingApprovals, 1)
	request := waiting.PendingApprovals[0].RequestID
	require.NotEmpty(t, request)
	s := e.session()

	inbox := s.get("/approvals")
	require.Equal(t, http.StatusOK, inbox.code)
	require.Contains(t, inbox.body, `<code class="tool">t/deploy</code>`)
	require.Contains(t, inbox.body, `thread <a class="tid" href="`+threadURL(rec.ThreadID)+`">`)
	require.Contains(t, inbox.body, `placeholder="reason (required to deny: the model gets it)"`)
	require.Contains(t, inbox.body, `&#34;target&#34;: &#34;prod&#34;`, "the call's input, indented")
	require.Contains(t, inbox.body, `href="/threads/`+rec.ThreadID+`"`)
	require.Contains(t, inbox.body, `name="decision" value="approve"`)
	require.Contains(t, inbox.body, `<title>Approvals (1) · spool monitor</title>`)
	require.Contains(t, s.get("/approvals?thread="+url.QueryEscape(rec.ThreadID)).body, "call_1_1")
	require.Equal(t, http.StatusNotFound, s.get("/approvals?thread=t/nope-1-abc").code)
	page := s.get(threadURL(rec.ThreadID)).body
	require.Contains(t, page, "Waiting for approval")
	require.Contains(t, page, `<input type="hidden" name="call" value="call_1_1">`)
	require.Contains(t, page, `<input type="hidden" name="request" value="`+request+`">`, "the form decides the request it shows")

	require.NotContains(t, inbox.body, `name="csrf"`, "the forms carry no token: the cross-origin check is the protection")
	form := func(decision, reason string) url.Values {
		return url.Values{"thread": {rec.ThreadID}, "call": {"call_1_1"}, "request": {request}, "decision": {decision},
			"reason": {reason}, "by": {"ada"}, "return": {"/approvals"}}
	}
	// Refused: a cross-site request (Sec-Fetch-Site), one from another
	// origin (Origin only), a denial without a reason.
	for _, tweak := range []func(*http.Request){crossSite, crossOrigin} {
		cross := s.do(http.MethodPost, "/approvals/decide", form("approve", ""), tweak)
		require.Equal(t, http.StatusForbidden, cross.code, cross.body)
		require.Contains(t, cross.body, "cross-origin request refused")
	}
	same := s.do(http.MethodPost, "/approvals/decide", form("deny", "  "), func(r *http.Request) {
		r.Header.Set("Sec-Fetch-Site", "same-origin")
		r.Header.Set("Origin", s.e.srv.URL)
	})
	require.Equal(t, http.StatusSeeOther, same.code, "a same-origin form passes the check (%s)", same.body)
	_, body := s.act("/approvals/decide", form("deny", "  "))
	require.Contains(t, body, `<p class="flash bad" role="status">Say why to deny`)
	require.True(t, waitingForApproval(e.waitRecord(rec.ThreadID, "still waits", waitingForApproval)), "nothing was decided")

	// Approved: the call runs and the thread completes.
	to, body := s.act("/approvals/decide", form("approve", "looks right"))
	require.Equal(t, "/approvals", to)
	require.Contains(t, body, "Approved call_1_1 of "+rec.ThreadID+" (by ada). The thread continues.")
	final := e.wait(rec.ThreadID)[rec.ThreadID]
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	require.Equal(t, "after deploy: deployed to prod", final.Result)
	decided := e.transcriptEvents(rec.ThreadID, transcript.TypeApprovalDecided)
	require.Len(t, decided, 1)
	var d transcript.ApprovalDecided
	require.NoError(t, decided[0].Decode(&d))
	require.Equal(t, transcript.ApprovalDecided{CallID: "call_1_1", RequestID: request, Tool: "t/deploy", Decision: "approve", By: "ada", Reason: "looks right"}, d)
	require.Len(t, e.transcriptEvents(rec.ThreadID, transcript.TypeToolCallStart), 1, "the call ran once")

	// Decided already.
	_, body = s.act("/approvals/decide", form("approve", ""))
	require.Contains(t, body, "Nothing of "+rec.ThreadID+" waits for a decision any more")
	require.Contains(t, body, "Nothing waits for a decision")
}

// TestGraphApprovalInbox: a graph run's approval node is listed at
// /approvals and on the run's page as the run's request, not as a
// model's tool call of a thread: its prompt as text and its show key by
// key (no JSON), the node that asks, a denial's reason going into the
// run's result, on the inbox, the run's page and the one-time decision
// link's page; the decision routes the run.
func TestGraphApprovalInbox(t *testing.T) {
	t.Parallel()
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(receiver.Close)
	const secret = "test-secret-0123456789"
	files := maps.Clone(graphFiles)
	files[".ai/config/agent/approvals.yaml"] = "notify:\n  url: " + receiver.URL + "\n  secret: " + secret + "\n"
	e := setup(t, envOptions{files: files})
	run := e.startGraph("g/signoff", nil)
	waiting := e.waitRecord(run.ThreadID, "waited for approval", waitingForApproval)
	require.Len(t, waiting.PendingApprovals, 1)
	call := waiting.PendingApprovals[0].CallID
	s := e.session()

	for _, path := range []string{"/approvals", threadURL(run.ThreadID)} {
		body := s.get(path).body
		require.Contains(t, body, `<strong class="what">Approval node <b class="nodename">sign_off</b></strong>`, path)
		require.Contains(t, body, `<span class="kind">graph</span> run <a class="tid" href="`+threadURL(run.ThreadID)+`">`, path)
		require.Contains(t, body, `<p class="prompt">Deploy 1.4.2 to production?</p>`, path)
		require.Contains(t, body, `<tr><th>notes</th><td>release.md</td></tr>`, path)
		require.Contains(t, body, `<tr><th>version</th><td>1.4.2</td></tr>`, path)
		require.Contains(t, body, `placeholder="reason (required to deny: the run gets it in result.reason)"`, path)
		require.NotContains(t, body, "&#34;prompt&#34;", "%s: the request is not shown as JSON", path)
		require.NotContains(t, body, "the model", path)
	}
	require.Contains(t, s.get(threadURL(run.ThreadID)).body, `Waiting for approval <span class="muted">1 request</span>`)

	form := url.Values{"thread": {run.ThreadID}, "call": {call}, "decision": {"deny"}, "reason": {""}, "by": {"ada"}, "return": {"/approvals"}}
	_, body := s.act("/approvals/decide", form)
	require.Contains(t, body, "Say why to deny: the run gets the reason in result.reason and routes on the denial.")

	// The one-time deny link's page words it as the run's request too.
	_, deny := orchestrator.DecisionLinks(e.srv.URL, run.ThreadID, waiting.PendingApprovals[0], secret, time.Now().Add(time.Hour))
	link := strings.TrimPrefix(deny, e.srv.URL)
	page := s.get(link)
	require.Equal(t, http.StatusOK, page.code, page.body)
	for _, want := range []string{"<h1>Deny this request?</h1>", "<tr><th>run</th>", "<tr><th>graph</th><td>g/signoff</td></tr>",
		"<b>sign_off</b>", `<p class="prompt">Deploy 1.4.2 to production?</p>`, "<tr><th>version</th><td>1.4.2</td></tr>",
		`placeholder="why (required: the run gets it in result.reason)"`, "the run's signed transcript"} {
		require.Contains(t, page.body, want)
	}
	require.NotContains(t, page.body, "the model")
	tok := strings.TrimPrefix(link, "/v1/approvals/decide?token=")
	page = s.do(http.MethodPost, "/v1/approvals/decide", url.Values{"token": {tok}})
	require.Contains(t, page.body, "Say why to deny: the run gets the reason in result.reason and routes on the denial.")
	page = s.do(http.MethodPost, "/v1/approvals/decide", url.Values{"token": {tok}, "reason": {"not this week"}})
	require.Contains(t, page.body, "Denied "+call+" of "+run.ThreadID+" (by link). The run continues.")
	done := e.wait(run.ThreadID)[run.ThreadID]
	require.Equal(t, thread.StatusCompleted, done.Status, "%+v", done.Error)
	require.Equal(t, map[string]any{"shipped": false}, done.Outputs)
}

// TestDecisionLink: the approval webhook's one-time links work on the
// monitor without its credentials: GET shows the call and decides
// nothing, POST decides (a denial needs a reason, which the model gets),
// a second use finds nothing to decide, an altered token is refused, and
// a client that asks for JSON gets the decision as JSON.
func TestDecisionLink(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	hooks := map[string]map[string]string{} // thread id → approve_url, deny_url
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var msg struct {
			ThreadID   string `json:"thread_id"`
			ApproveURL string `json:"approve_url"`
			DenyURL    string `json:"deny_url"`
		}
		if json.NewDecoder(r.Body).Decode(&msg) == nil {
			mu.Lock()
			hooks[msg.ThreadID] = map[string]string{"approve": msg.ApproveURL, "deny": msg.DenyURL}
			mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)
	approvals := gatedApprovals + "notify:\n  url: " + receiver.URL + "\n  secret: test-secret-0123456789\n  links: https://spool.example/\n"
	const token = "monitor-token-0123"
	e := setup(t, envOptions{auth: monitor.Auth{Token: token}, files: map[string]string{".ai/config/agent/approvals.yaml": approvals}})
	denied := e.start("t/gated", map[string]any{"target": "prod"})
	approved := e.start("t/gated", map[string]any{"target": "staging"})
	link := func(id, decision string) string {
		var u string
		require.True(t, waitFor(t.Context(), time.Minute, func() bool {
			mu.Lock()
			defer mu.Unlock()
			u = hooks[id][decision]
			return u != ""
		}), "no webhook for %s", id)
		p, err := url.Parse(u)
		require.NoError(t, err)
		require.Equal(t, "/v1/approvals/decide", p.Path)
		return p.Path + "?" + p.RawQuery // on this monitor
	}
	s := e.session() // holds no credential of the monitor
	require.Equal(t, http.StatusUnauthorized, s.get("/approvals").code)

	deny := link(denied.ThreadID, "deny")
	// The webhook may come before the thread has suspended for the call.
	e.waitRecord(denied.ThreadID, "waits for approval", waitingForApproval)
	r := s.get(deny)
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.Contains(t, r.body, "Deny this tool call?")
	require.Contains(t, r.body, `<code class="tool">t/deploy</code>`)
	require.Contains(t, r.body, `&#34;target&#34;: &#34;prod&#34;`)
	require.NotContains(t, r.body, `<nav>`, "no navigation for people outside the monitor")
	require.True(t, waitingForApproval(e.waitRecord(denied.ThreadID, "", func(*registry.Record) bool { return true })), "a GET decides nothing")

	bad := s.get(strings.Replace(deny, "token=", "token=x", 1))
	require.Equal(t, http.StatusForbidden, bad.code)
	require.Contains(t, bad.body, "This link does not work")
	require.Contains(t, bad.body, "not valid")

	p, err := url.Parse(deny)
	require.NoError(t, err)
	tok := p.Query().Get("token")
	r = s.do(http.MethodPost, "/v1/approvals/decide", url.Values{"token": {tok}})
	require.Equal(t, http.StatusBadRequest, r.code)
	require.Contains(t, r.body, "Say why to deny")
	r = s.do(http.MethodPost, "/v1/approvals/decide", url.Values{"token": {tok}, "reason": {"not on a Friday"}},
		crossSite)
	require.Equal(t, http.StatusForbidden, r.code, "cross-site POSTs are refused here too")
	require.Contains(t, r.body, "cross-origin request refused")
	require.NotContains(t, r.body, `<nav>`, "the link's own page, for people outside the monitor")
	r = s.do(http.MethodPost, "/v1/approvals/decide", url.Values{"token": {tok}, "reason": {"not on a Friday"}})
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.Contains(t, r.body, "Denied call_1_1 of "+denied.ThreadID+" (by link). The thread continues.")
	final := e.wait(denied.ThreadID)[denied.ThreadID]
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	require.Contains(t, final.Result, "not on a Friday", "the model got the reason")
	results := e.transcriptEvents(denied.ThreadID, transcript.TypeToolCallResult)
	require.Len(t, results, 1)
	var res0 transcript.ToolCallResult
	require.NoError(t, results[0].Decode(&res0))
	require.True(t, res0.IsError)
	require.Contains(t, res0.Output, "not on a Friday")
	require.NotContains(t, res0.Output, "deployed", "a denied call never runs")
	again := s.do(http.MethodPost, "/v1/approvals/decide", url.Values{"token": {tok}, "reason": {"again"}})
	require.Equal(t, http.StatusConflict, again.code)
	require.Contains(t, again.body, "Nothing to decide")

	// JSON, for a client that is not a browser.
	approve := link(approved.ThreadID, "approve")
	e.waitRecord(approved.ThreadID, "waits for approval", waitingForApproval)
	r = s.do(http.MethodPost, approve, url.Values{}, func(r *http.Request) { r.Header.Set("Accept", "application/json") })
	require.Equal(t, http.StatusOK, r.code, r.body)
	var res orchestrator.DecideResult
	require.NoError(t, json.Unmarshal([]byte(r.body), &res))
	require.Equal(t, orchestrator.DecideResult{ThreadID: approved.ThreadID, Decision: "approve", Calls: []string{"call_1_1"}, By: "link", Woken: true}, res)
	require.Equal(t, "after deploy: deployed to staging", e.wait(approved.ThreadID)[approved.ThreadID].Result)
	r = s.do(http.MethodPost, approve, url.Values{}, func(r *http.Request) { r.Header.Set("Accept", "application/json") })
	require.Equal(t, http.StatusConflict, r.code, r.body)
}

// TestThreadActions: send and interrupt reach a running tree; cancel and
// resume ask for a confirmation first; what cannot be done is refused
// with a message on the thread page.
func TestThreadActions(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	root := e.startTree()
	tr := e.waitTreeHeld(root.ThreadID)
	s := e.session()
	page := threadURL(root.ThreadID)
	body := s.get(page).body
	require.Contains(t, body, `action="/threads/`+root.ThreadID+`/send"`)
	require.Contains(t, body, `formaction="/threads/`+root.ThreadID+`/interrupt"`)
	require.Contains(t, body, `action="/threads/`+root.ThreadID+`/cancel"`)
	require.NotContains(t, body, "/resume", "a running thread is not resumed")

	// Send to the waiting root: woken to record it, it waits on.
	_, body = s.act(page+"/send", url.Values{"message": {"hello root"}, "by": {"ada"}})
	require.Contains(t, body, "Message 1 queued for "+root.ThreadID)
	require.Contains(t, body, "The waiting thread was woken to record it.")
	require.True(t, waitFor(t.Context(), time.Minute, func() bool {
		tr, err := transcript.Read(t.Context(), e.store, root.ThreadID, e.keyring, transcript.Strict)
		return err == nil && strings.Contains(transcript.RenderText(tr.Events), "hello root")
	}), "the message is in the root's transcript")
	_, body = s.act(page+"/send", url.Values{"message": {"  "}})
	require.Contains(t, body, "Write a message first.")

	// Interrupt a leaf at its gate: the tool stops, the model gets the
	// message.
	leaf := tr.leaves[0].ThreadID
	_, body = s.act(threadURL(leaf)+"/interrupt", url.Values{"message": {"stop waiting"}})
	require.Contains(t, body, "Interrupt sent to "+leaf)
	require.True(t, waitFor(t.Context(), time.Minute, func() bool {
		evs, _ := e.readEvents(leaf, transcript.TypeUserMessage) // none while it does not read
		for _, ev := range evs {
			var m transcript.UserMessage
			if ev.Decode(&m) == nil && m.Interrupted && m.Content == "stop waiting" {
				return true
			}
		}
		return false
	}), "the interrupt is in the leaf's transcript")

	// Cancel: a confirmation first, then the tree is cancelled.
	r := s.do(http.MethodPost, page+"/cancel", url.Values{"cascade": {"1"}})
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.Contains(t, r.body, "Cancel this thread?")
	require.Contains(t, r.body, `<input type="hidden" name="confirmed" value="1">`)
	require.Contains(t, r.body, `<input type="hidden" name="cascade" value="1">`)
	require.Equal(t, thread.StatusWaiting, e.waitRecord(root.ThreadID, "", func(*registry.Record) bool { return true }).Status, "not before the confirmation")
	_, body = s.act(page+"/cancel", url.Values{"cascade": {"1"}, "confirmed": {"1"}})
	require.Regexp(t, `Cancel(led| requested for) `+regexp.QuoteMeta(root.ThreadID), body)
	require.Equal(t, thread.StatusCancelled, e.wait(root.ThreadID)[root.ThreadID].Status)
	// The branch of the leaf not interrupted was still waiting: the cancel
	// reaches it and its leaf (the other may have finished meanwhile).
	for _, id := range []string{tr.branches[1].ThreadID, tr.leaves[1].ThreadID} {
		require.Equal(t, thread.StatusCancelled, e.wait(id)[id].Status, "the cancel cascades to %s", id)
	}
	_, body = s.act(page+"/send", url.Values{"message": {"too late"}})
	require.Contains(t, body, root.ThreadID+" has finished: it takes no message")
	_, body = s.act(page+"/cancel", url.Values{"confirmed": {"1"}})
	require.Contains(t, body, "is cancelled already: nothing to cancel.")

	// Resume the cancelled root: a message, a confirmation, a new thread.
	body = s.get(page).body
	require.Contains(t, body, `action="/threads/`+root.ThreadID+`/resume"`)
	_, body = s.act(page+"/resume", url.Values{"message": {""}})
	require.Contains(t, body, "Write the message the thread resumes with.")
	r = s.do(http.MethodPost, page+"/resume", url.Values{"message": {"once more"}})
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.Contains(t, r.body, "Resume this thread with a message?")
	require.Contains(t, r.body, `<input type="hidden" name="message" value="once more">`)
	to, body := s.act(page+"/resume", url.Values{"message": {"once more"}, "confirmed": {"1"}})
	newID := strings.TrimPrefix(to, "/threads/")
	require.NotEqual(t, root.ThreadID, newID)
	require.Contains(t, body, "Resumed "+root.ThreadID+" as "+newID)
	next, err := e.orch.Record(t.Context(), newID)
	require.NoError(t, err)
	require.Equal(t, "resume", next.ContinuationKind)
	require.Equal(t, root.ThreadID, next.PreviousThreadID)

	require.Equal(t, http.StatusNotFound, s.do(http.MethodPost, page+"/explode", url.Values{}).code)
	require.Equal(t, http.StatusNotFound, s.do(http.MethodPost, "/threads/t/nope-1-abc/send", url.Values{"message": {"x"}}).code)
	require.Equal(t, http.StatusForbidden, s.do(http.MethodPost, page+"/send", url.Values{"message": {"x"}}, crossSite).code)
}

// TestActionsWithoutSigningKey: a monitor that holds no signing key (as
// `spool monitor` runs) offers no cancel or resume, and refuses them,
// while send works.
func TestActionsWithoutSigningKey(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	reader, err := orchestrator.New(orchestrator.Config{Namespace: e.orch.Namespace(), Logger: slog.New(slog.DiscardHandler)},
		e.rdb, e.store, e.enq, nil, e.keyring)
	require.NoError(t, err)
	e2 := e.withMonitor(monitor.Config{Orch: reader, CountsTTL: -1})
	root := e.startTree()
	e.waitTreeHeld(root.ThreadID)
	s := e2.session()
	page := threadURL(root.ThreadID)
	body := s.get(page).body
	require.NotContains(t, body, "/cancel\"")
	require.Contains(t, body, "this monitor holds no signing key")
	_, body = s.act(page+"/cancel", url.Values{"confirmed": {"1"}})
	require.Contains(t, body, "this monitor holds no signing key")
	require.Equal(t, thread.StatusWaiting, e.waitRecord(root.ThreadID, "", func(*registry.Record) bool { return true }).Status)
	_, body = s.act(page+"/send", url.Values{"message": {"hi"}})
	require.Contains(t, body, "Message 1 queued")
}

// TestReadOnlyMonitor: a read-only monitor shows the pending calls and
// the threads but offers no action, and refuses every one.
func TestReadOnlyMonitor(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{files: map[string]string{".ai/config/agent/approvals.yaml": gatedApprovals}})
	ro := e.withMonitor(monitor.Config{Orch: e.orch, ReadOnly: true, CountsTTL: -1})
	rec := e.start("t/gated", map[string]any{"target": "prod"})
	e.waitRecord(rec.ThreadID, "waited for approval", waitingForApproval)
	s := ro.session()

	inbox := s.get("/approvals")
	require.Contains(t, inbox.body, `<code class="tool">t/deploy</code>`)
	require.Contains(t, inbox.body, "This monitor is read-only")
	require.NotContains(t, inbox.body, "<form")
	page := s.get(threadURL(rec.ThreadID))
	require.Contains(t, page.body, "Waiting for approval")
	require.NotContains(t, page.body, `id="actions"`)
	require.NotContains(t, page.body, "<form method=\"post\"")

	// Even same-origin forms.
	for path, form := range map[string]url.Values{
		"/approvals/decide":                   {"thread": {rec.ThreadID}, "decision": {"approve"}},
		threadURL(rec.ThreadID) + "/send":     {"message": {"x"}},
		threadURL(rec.ThreadID) + "/cancel":   {"confirmed": {"1"}},
		threadURL(rec.ThreadID) + "/pause":    {"confirmed": {"1"}},
		threadURL(rec.ThreadID) + "/unpause":  {"confirmed": {"1"}},
		"/v1/approvals/decide?token=anything": {},
	} {
		r := s.do(http.MethodPost, path, form)
		require.Equal(t, http.StatusForbidden, r.code, path)
		require.Contains(t, r.body, "read-only", path)
	}
	final := e.waitRecord(rec.ThreadID, "", func(*registry.Record) bool { return true })
	require.True(t, waitingForApproval(final))
	require.False(t, final.PauseRequested)
}

// TestPauseActions: a running tree's pages offer Pause; it asks for a
// confirmation (nothing is paused before it, a cross-site POST is
// refused), then pauses the run and its descendants, the waiting ones at
// once and the running leaves at their next boundary (pause requested);
// the paused root offers Unpause, shows paused and is listed under
// status paused. Unpause with tree=1 from a leaf lets the whole tree go
// on, which then completes; an ended run has nothing to pause.
func TestPauseActions(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	root := e.startTree()
	tr := e.waitTreeHeld(root.ThreadID)
	s := e.session()
	page := threadURL(root.ThreadID)
	body := s.get(page).body
	require.Contains(t, body, `action="/threads/`+root.ThreadID+`/pause"`)
	require.Contains(t, body, `<button id="pause" class="pause">Pause…</button>`)
	require.NotContains(t, body, "/unpause", "a run that is not paused is not unpaused")

	// A confirmation first; nothing is paused before it.
	r := s.do(http.MethodPost, page+"/pause", url.Values{})
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.Contains(t, r.body, "Pause this thread?")
	require.Contains(t, r.body, `<input type="hidden" name="confirmed" value="1">`)
	require.Contains(t, r.body, `<input type="hidden" name="tree" value="0">`)
	require.Contains(t, r.body, "it and its unfinished descendants")
	require.Contains(t, r.body, `action="/threads/`+root.ThreadID+`/pause"`)
	cross := s.do(http.MethodPost, page+"/pause", url.Values{"confirmed": {"1"}}, crossSite)
	require.Equal(t, http.StatusForbidden, cross.code, cross.body)
	now := e.waitRecord(root.ThreadID, "", func(*registry.Record) bool { return true })
	require.Equal(t, thread.StatusWaiting, now.Status, "not before the confirmation")
	require.False(t, now.PauseRequested)

	to, body := s.act(page+"/pause", url.Values{"confirmed": {"1"}, "tree": {"0"}})
	require.Equal(t, page, to)
	require.Regexp(t, `Pause requested for `+regexp.QuoteMeta(root.ThreadID)+` \(5 runs, [345] paused now\): the others pause at their next boundary\.|`+
		`Paused `+regexp.QuoteMeta(root.ThreadID)+` \(5 runs\)\.`, body)
	require.Contains(t, body, `<span class="badge st-paused">paused</span>`)
	require.Contains(t, body, `<button id="unpause" class="pause">Unpause…</button>`)
	require.NotContains(t, body, `id="pause"`)
	require.Contains(t, body, "paused while waiting for <b>children</b>")
	for _, b := range tr.branches {
		require.Equal(t, thread.StatusPaused, e.waitRecord(b.ThreadID, "paused", func(r *registry.Record) bool { return r.Status == thread.StatusPaused }).Status)
	}
	leaf := tr.leaves[0].ThreadID
	rec := e.waitRecord(leaf, "pause requested", func(r *registry.Record) bool { return r.PauseRequested })
	leafPage := s.get(threadURL(leaf)).body
	if rec.Status == thread.StatusRunning {
		require.Contains(t, leafPage, `<span class="badge st-paused">pause requested</span>`, "held by its gate: it pauses at its next boundary")
		require.Contains(t, leafPage, "Its pause is requested")
	}
	require.Contains(t, leafPage, `action="/threads/`+leaf+`/unpause"`)

	// Listed under paused, with paused among the status filter's choices.
	list := s.get("/?status=paused").body
	require.Contains(t, list, `href="/threads/`+root.ThreadID+`"`)
	require.Contains(t, list, `<option selected>paused</option>`)
	require.Contains(t, list, `class="count c-paused on" href="/?status=paused"`)

	// Unpause the whole tree from a leaf: a confirmation, then it goes on.
	r = s.do(http.MethodPost, threadURL(leaf)+"/unpause", url.Values{"tree": {"1"}})
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.Contains(t, r.body, "Unpause this thread?")
	require.Contains(t, r.body, "every unfinished run of its tree, from its root "+root.ThreadID)
	require.Contains(t, r.body, `<input type="hidden" name="tree" value="1">`)
	_, body = s.act(threadURL(leaf)+"/unpause", url.Values{"tree": {"1"}, "confirmed": {"1"}})
	require.Contains(t, body, "Unpaused "+root.ThreadID+" (5 runs): each goes on where it was.")
	for _, id := range []string{root.ThreadID, tr.branches[0].ThreadID, tr.branches[1].ThreadID, leaf, tr.leaves[1].ThreadID} {
		got := e.waitRecord(id, "unpaused", func(r *registry.Record) bool { return !r.PauseRequested && r.Status != thread.StatusPaused })
		require.NotEqual(t, thread.StatusPaused, got.Status, id)
	}
	body = s.get(page).body
	require.Contains(t, body, `id="pause"`)
	require.NotContains(t, body, "pause requested")

	e.release()
	final := e.wait(root.ThreadID)[root.ThreadID]
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	require.Positive(t, final.PausedMS, "the time it was paused")
	require.Contains(t, s.get(page).body, "<tr><th>paused</th>")
	_, body = s.act(page+"/pause", url.Values{"confirmed": {"1"}})
	require.Contains(t, body, root.ThreadID+" is completed: nothing to pause.")
	require.NotContains(t, body, `id="pause"`, "a run that has ended offers no pause")
}

// TestPauseGraphRunAction: a graph run waiting for a person is paused at
// once from its page, which then shows it paused (its node waiting, its
// detail saying paused) and offers Unpause; unpaused, it waits for the
// decision again, and goes on once it is made. A monitor without the
// signing key (which offers no cancel) offers pause too.
func TestPauseGraphRunAction(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{files: graphFiles})
	reader, err := orchestrator.New(orchestrator.Config{Namespace: e.orch.Namespace(), Logger: slog.New(slog.DiscardHandler)},
		e.rdb, e.store, e.enq, nil, e.keyring)
	require.NoError(t, err)
	unsigned := e.withMonitor(monitor.Config{Orch: reader, CountsTTL: -1})
	run := e.startGraph("g/signoff", nil)
	e.waitRecord(run.ThreadID, "waited for approval", waitingForApproval)
	s := unsigned.session()
	page := threadURL(run.ThreadID)
	body := s.get(page).body
	require.NotContains(t, body, `id="cancel"`, "no signing key: no cancel")
	require.Contains(t, body, `<button id="pause" class="pause">Pause…</button>`)

	r := s.do(http.MethodPost, page+"/pause", url.Values{})
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.Contains(t, r.body, "Pause this graph run?")
	require.Contains(t, r.body, "<tr><th>graph</th><td>g/signoff</td></tr>")
	_, body = s.act(page+"/pause", url.Values{"confirmed": {"1"}})
	require.Contains(t, body, "Paused "+run.ThreadID+" (1 run).")
	require.Contains(t, body, `<span class="badge st-paused">paused</span>`)
	require.Contains(t, body, `<button id="unpause" class="pause">Unpause…</button>`)
	require.Regexp(t, `data-node="sign_off">(?s:.*?)<span class="nstat n-waiting">waiting</span>(?s:.*?)paused`, body)
	require.Equal(t, thread.StatusPaused, e.waitRecord(run.ThreadID, "", func(*registry.Record) bool { return true }).Status)

	_, body = s.act(page+"/unpause", url.Values{"confirmed": {"1"}})
	require.Contains(t, body, "Unpaused "+run.ThreadID+" (1 run)")
	waiting := e.waitRecord(run.ThreadID, "waits for approval again", waitingForApproval)
	require.False(t, waiting.PauseRequested)
	_, err = e.orch.Decide(t.Context(), run.ThreadID, nil, orchestrator.DecisionApprove, "test", "")
	require.NoError(t, err)
	done := e.wait(run.ThreadID)[run.ThreadID]
	require.Equal(t, thread.StatusCompleted, done.Status, "%+v", done.Error)
	require.Equal(t, map[string]any{"shipped": "1.4.2"}, done.Outputs)
}

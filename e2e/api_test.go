package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/api"
	"github.com/spool-run/spool/client"
	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

func apiProject() map[string]string {
	return map[string]string{
		".ai/directives/t/greet.md": directiveWithInputs("greet", `turns="6" spend="0.5"`, fsPerms,
			`<input name="name" type="string" required="true">who</input>`),
		".ai/directives/t/slow.md":        directive("slow", `turns="10" spend="0.5"`, fsPerms, `<success>done</success>`),
		".ai/directives/t/gated.md":       directive("gated", `turns="4" spend="0.5"`, fsPerms, `<success>done</success>`),
		".ai/directives/t/tooling.md":     directive("tooling", `turns="3"`, fsPerms+`<execute><tool>t/sleep</tool></execute>`, `<success>done</success>`),
		".ai/tools/t/sleep.sh":            sleepTool,
		".ai/config/agent/approvals.yaml": "approvals:\n  - tool: rye/file-system/fs_list\n",
		"scripts/api.yaml":                script("api"),
	}
}

// apiProc is a running `spool api`.
type apiProc struct {
	proc *spooltest.Proc
	addr string // host:port it listens on
	base string // http://addr
}

var apiListening = regexp.MustCompile(`spool api: http://(\S+)/v1/`)

// startAPI starts `spool api` with flags (an --addr of 127.0.0.1:0 unless
// given) and waits until it listens.
func startAPI(t *testing.T, e *spooltest.Env, flags ...string) *apiProc {
	t.Helper()
	args := append([]string{"api"}, flags...)
	if !strings.Contains(strings.Join(flags, " "), "--addr") {
		args = append(args, "--addr", "127.0.0.1:0")
	}
	p := e.Start(nil, args...)
	var addr string
	require.Eventually(t, func() bool {
		m := apiListening.FindStringSubmatch(p.Log())
		if m != nil {
			addr = m[1]
		}
		return m != nil || p.Exited()
	}, time.Minute, 20*time.Millisecond)
	require.NotEmpty(t, addr, "spool api did not start:\n%s", p.Log())
	return &apiProc{proc: p, addr: addr, base: "http://" + addr}
}

// checkHeader says how much of an exchange openAPITransport checks:
// "response" for a request that is bad on purpose (only the response is
// held to the document), "none" for one the document does not describe
// (an unescaped id, a route that is not there).
const checkHeader = "X-Test-Check"

// responseOnly and unchecked set checkHeader.
func responseOnly(r *http.Request) { r.Header.Set(checkHeader, "response") }
func unchecked(r *http.Request)    { r.Header.Set(checkHeader, "none") }

// openAPITransport holds every request and response that passes through
// it to the OpenAPI document (libopenapi-validator): the request's
// parameters and body (unless marked bad on purpose) and the response's
// status, media type and body, for every documented route. Event streams
// pass unread.
type openAPITransport struct {
	t *testing.T
	v validator.Validator
}

func newOpenAPITransport(t *testing.T) *openAPITransport {
	doc, err := libopenapi.NewDocument(api.OpenAPI)
	require.NoError(t, err)
	v, errs := validator.NewValidator(doc)
	require.Empty(t, errs)
	return &openAPITransport{t: t, v: v}
}

func (o *openAPITransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		reqBody, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	mode := req.Header.Get(checkHeader)
	req.Header.Del(checkHeader)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	check := func() *http.Response {
		c := *resp
		c.Body = io.NopCloser(bytes.NewReader(body))
		return &c
	}
	vreq := req.Clone(context.Background())
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	// A 405 is a method the document does not have for the path.
	if mode != "none" && resp.StatusCode != http.StatusMethodNotAllowed {
		var ok bool
		var errs []*validationError
		if mode == "response" {
			ok, errs = wrap(o.v.ValidateHttpResponse(vreq, check()))
		} else {
			ok, errs = wrap(o.v.ValidateHttpRequestResponse(vreq, check()))
		}
		if !ok {
			for _, e := range errs {
				o.t.Errorf("OpenAPI: %s %s → %d: %s", req.Method, req.URL.EscapedPath(), resp.StatusCode, e)
			}
			o.t.Logf("body: %s", body)
		}
	}
	return check(), nil
}

type validationError struct{ msg string }

func (v *validationError) String() string { return v.msg }

// wrap turns the validator's errors into lines naming each schema error.
func wrap[E interface{ Error() string }](ok bool, errs []E) (bool, []*validationError) {
	var out []*validationError
	for _, e := range errs {
		out = append(out, &validationError{msg: e.Error()})
	}
	return ok, out
}

// apiCall is a raw request through the checking transport.
type apiCall struct {
	t    *testing.T
	hc   *http.Client
	base string
}

// do sends method path (escaped) with a raw body; edit may change the
// request. It returns the status, the headers and the body.
func (a apiCall) do(method, path, body string, edit ...func(*http.Request)) (int, http.Header, []byte) {
	a.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, a.base+path, rd)
	require.NoError(a.t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, f := range edit {
		f(req)
	}
	resp, err := a.hc.Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(a.t, err)
	return resp.StatusCode, resp.Header, b
}

// problem sends a request that must fail with status and code, as RFC
// 9457 problem details; only its response is held to the document,
// unless an edit says otherwise.
func (a apiCall) problem(status int, code, method, path, body string, edit ...func(*http.Request)) *api.Problem {
	a.t.Helper()
	edit = append([]func(*http.Request){responseOnly}, edit...)
	got, h, b := a.do(method, path, body, edit...)
	require.Equal(a.t, status, got, "%s %s: %s", method, path, b)
	require.Equal(a.t, api.ProblemType, h.Get("Content-Type"))
	var p api.Problem
	require.NoError(a.t, json.Unmarshal(b, &p), string(b))
	require.Equal(a.t, status, p.Status)
	require.Equal(a.t, code, p.Code, "%s %s: %s", method, path, p.Detail)
	require.Equal(a.t, "about:blank", p.Type)
	require.Equal(a.t, http.StatusText(status), p.Title)
	require.NotEmpty(a.t, p.Detail)
	return &p
}

func esc(id string) string { return url.PathEscape(id) }

// TestAPIRoutes exercises every route of `spool api` on a real server and
// workers, with good and bad input, holding every request and response to
// the OpenAPI document.
func TestAPIRoutes(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, apiProject(), "4")
	srv := startAPI(t, e)
	tr := newOpenAPITransport(t)
	hc := &http.Client{Transport: tr}
	c, err := client.New(srv.base, client.WithHTTPClient(hc))
	require.NoError(t, err)
	raw := apiCall{t: t, hc: hc, base: srv.base}
	ctx := t.Context()
	const model = "script:scripts/api.yaml"
	missing := "no/such-1-a"

	// run
	rec, err := c.Run(ctx, api.RunRequest{Directive: "t/greet", Inputs: map[string]any{"name": "ada"}, Model: model,
		Limits: &thread.Limits{Turns: ptr(5)}})
	require.NoError(t, err)
	require.Equal(t, thread.StatusCreated, rec.Status)
	require.Equal(t, "t/greet", rec.Directive)
	require.Equal(t, 5, rec.Limits.Turns, "the limit override")
	require.Equal(t, 0.5, rec.Limits.Spend, "the directive's limit")
	done := rec.ThreadID
	require.Contains(t, done, "/", "ids have slashes: the routes below take them escaped")
	status, h, _ := raw.do(http.MethodPost, "/v1/threads", `{"directive": "t/greet.md", "inputs": {"name": "bo"}, "model": "`+model+`", "limits": {"spend": "0.25"}}`)
	require.Equal(t, http.StatusCreated, status)
	require.Regexp(t, `^/v1/threads/t%2Fgreet-\d+-\w+$`, h.Get("Location"))
	final := e.Wait([]string{done}, 2*time.Minute)[done]
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	require.Equal(t, "done for ada", final.Result)

	raw.problem(400, "bad_request", "POST", "/v1/threads", "")
	raw.problem(400, "bad_request", "POST", "/v1/threads", `{"directive": "t/greet",`)
	raw.problem(400, "bad_request", "POST", "/v1/threads", `["t/greet"]`)
	raw.problem(400, "bad_request", "POST", "/v1/threads", `{"directive": "t/greet"} {}`)
	p := raw.problem(400, "bad_request", "POST", "/v1/threads", `{"directive": "t/greet", "input": {"name": "x"}}`)
	require.Equal(t, `the body is not the JSON object wanted: json: unknown field "input" (did you mean "inputs"?)`, p.Detail)
	p = raw.problem(400, "bad_request", "POST", "/v1/threads", `{"directive": "t/greet", "zzzzzz": 1}`)
	require.Equal(t, `the body is not the JSON object wanted: json: unknown field "zzzzzz"`, p.Detail)
	raw.problem(400, "bad_request", "POST", "/v1/threads", `{"inputs": {"name": "x"}}`)
	raw.problem(400, "bad_request", "POST", "/v1/threads", `{"directive": "../x"}`)
	p = raw.problem(400, "bad_request", "POST", "/v1/threads", `{"directive": "t/greet", "limits": {"turns": -1}}`)
	require.Contains(t, p.Detail, "limit turns")
	raw.problem(400, "bad_request", "POST", "/v1/threads", `{"directive": "t/greet", "limits": {"bogus": 1}}`)
	raw.problem(400, "bad_request", "POST", "/v1/threads", `{"directive": "t/greet", "limits": {"turns": 1.5}}`)
	raw.problem(415, "unsupported_media_type", "POST", "/v1/threads", `{"directive": "t/greet"}`,
		func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") })
	raw.problem(413, "body_too_large", "POST", "/v1/threads", `{"directive": "t/greet", "inputs": {"name": "`+strings.Repeat("a", 9<<20)+`"}}`)
	// Refused as `thread run` refuses them (exit 2 there), before anything starts.
	p = raw.problem(422, "refused", "POST", "/v1/threads", `{"directive": "t/greet", "inputs": {"name": "x"}, "model": "gpt-9-ultra"}`)
	require.Equal(t, `unknown model "gpt-9-ultra": add it to .ai/config/agent/pricing.yaml`, p.Detail)
	p = raw.problem(422, "refused", "POST", "/v1/threads", `{"directive": "t/greet", "inputs": {"nmae": "x"}, "model": "`+model+`"}`)
	require.Equal(t, `directive t/greet: input "nmae" is not declared (declared: name)`, p.Detail)
	p = raw.problem(422, "refused", "POST", "/v1/threads", `{"directive": "t/greet", "inputs": {}, "model": "`+model+`"}`)
	require.Contains(t, p.Detail, "required input missing")
	require.Contains(t, docText(t, "directives.md"), "the API answers 422 with the problem code `refused`", "docs/directives.md says what the API answers")
	p = raw.problem(422, "refused", "POST", "/v1/threads", `{"directive": "t/greet", "model": "script:nosuch.yaml"}`)
	require.Contains(t, p.Detail, "model script:nosuch.yaml: stat ")
	raw.problem(422, "refused", "POST", "/v1/threads", `{"directive": "t/greet", "model": "script:/etc/passwd"}`)
	raw.problem(422, "refused", "POST", "/v1/threads", `{"directive": "t/greet", "inputs": {"name": "x"}, "model": "`+model+`", "limits": {"spend": 1e308}}`)
	p = raw.problem(422, "directive_not_found", "POST", "/v1/threads", `{"directive": "no/such", "model": "`+model+`"}`)
	require.Equal(t, `directive "no/such" not found`, p.Detail)
	p = raw.problem(422, "directive_not_found", "POST", "/v1/threads", `{"directive": "t/greed", "model": "`+model+`"}`)
	require.Equal(t, `directive "t/greed" not found; did you mean t/greet?`, p.Detail)
	p = raw.problem(422, "parent_not_found", "POST", "/v1/threads", `{"directive": "t/greet", "parent": "`+missing+`", "model": "`+model+`"}`)
	require.Equal(t, `parent thread "`+missing+`" does not exist`, p.Detail)
	n, err := e.Orch.Threads(ctx, registry.Filter{})
	require.NoError(t, err)
	require.Len(t, n, 2, "no refused run registered a thread")

	// list
	e.Wait([]string{n[0].ThreadID, n[1].ThreadID}, 2*time.Minute)
	recs, err := c.List(ctx, client.ListOptions{Status: "completed", Directive: "t/greet"})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.ElementsMatch(t, []string{n[0].ThreadID, n[1].ThreadID}, []string{recs[0].ThreadID, recs[1].ThreadID})
	require.Contains(t, []string{recs[0].ThreadID, recs[1].ThreadID}, done)
	recs, err = c.List(ctx, client.ListOptions{Status: "running"})
	require.NoError(t, err)
	require.Empty(t, recs)
	recs, err = c.List(ctx, client.ListOptions{Limit: 1})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	recs, err = c.List(ctx, client.ListOptions{Directive: "no/such"})
	require.NoError(t, err)
	require.Empty(t, recs)
	status, _, b := raw.do("GET", "/v1/threads?directive=no/such", "")
	require.Equal(t, 200, status)
	require.JSONEq(t, `[]`, string(b), "an empty list is [], not null")
	raw.problem(400, "bad_request", "GET", "/v1/threads?status=bogus", "")
	for _, l := range []string{"0", "x", "1001"} {
		raw.problem(400, "bad_request", "GET", "/v1/threads?limit="+l, "")
	}

	// show: the id escaped, and as it is
	got, err := c.Show(ctx, done)
	require.NoError(t, err)
	require.Equal(t, final.ThreadID, got.ThreadID)
	require.Equal(t, final.Result, got.Result)
	status, _, b = raw.do("GET", "/v1/threads/"+done, "", unchecked)
	require.Equal(t, 200, status, "an unescaped id: %s", b)
	require.Contains(t, string(b), `"thread_id": "`+done+`"`)
	p = raw.problem(404, "not_found", "GET", "/v1/threads/"+esc(missing), "")
	require.Equal(t, `thread "`+missing+`" not found`, p.Detail)
	_, err = c.Show(ctx, missing)
	require.True(t, client.IsStatus(err, 404), "%v", err)

	// tree, chain, budget
	tree, err := c.Tree(ctx, done)
	require.NoError(t, err)
	require.Equal(t, done, tree.ThreadID)
	require.Equal(t, thread.StatusCompleted, tree.Status)
	require.Empty(t, tree.Children)
	require.NotNil(t, tree.Subtree)
	ch, err := c.Chain(ctx, done)
	require.NoError(t, err)
	require.Equal(t, 1, ch.ChainLength)
	require.Equal(t, done, ch.Chain[0].ThreadID)
	bud, err := c.Budget(ctx, done)
	require.NoError(t, err)
	require.Equal(t, 0.5, bud.Max)
	require.InDelta(t, final.Cost.Spend, bud.Actual, 1e-9)
	for _, route := range []string{"tree", "chain", "budget", "events"} {
		raw.problem(404, "not_found", "GET", "/v1/threads/"+esc(missing)+"/"+route, "")
	}

	// resume: a finished thread, with a message
	res, err := c.Resume(ctx, done, "one more thing")
	require.NoError(t, err)
	require.True(t, res.Resumed)
	require.Equal(t, done, res.ResolvedThreadID)
	require.Equal(t, res.NewThreadID, res.NewThreadResult.ThreadID)
	raw.problem(400, "bad_request", "POST", "/v1/threads/"+esc(done)+"/resume", `{"message": "  "}`)
	raw.problem(400, "bad_request", "POST", "/v1/threads/"+esc(done)+"/resume", "")
	raw.problem(404, "not_found", "POST", "/v1/threads/"+esc(missing)+"/resume", `{"message": "x"}`)
	e.Wait([]string{done}, 2*time.Minute)
	chain, err := c.Chain(ctx, done)
	require.NoError(t, err)
	require.Equal(t, 2, chain.ChainLength, "the resume continues the chain")

	// people in the loop: a gated call waits for a decision
	runGated := func() *registry.Record {
		gated, err := c.Run(ctx, api.RunRequest{Directive: "t/gated", Model: model})
		require.NoError(t, err)
		waitStatus(t, e, gated.ThreadID, thread.StatusWaiting)
		require.Eventually(t, func() bool {
			calls, err := e.Orch.Approvals(ctx, gated.ThreadID)
			return err == nil && len(calls) == 1
		}, time.Minute, 20*time.Millisecond)
		return gated
	}
	gated := runGated()
	var calls []orchestrator.PendingCall
	status, _, b = raw.do("GET", "/v1/approvals", "")
	require.Equal(t, 200, status)
	require.NoError(t, json.Unmarshal(b, &calls))
	require.Len(t, calls, 1)
	require.Equal(t, gated.ThreadID, calls[0].ThreadID)
	require.Equal(t, "rye/file-system/fs_list", calls[0].Tool)
	status, _, b = raw.do("GET", "/v1/approvals?thread="+url.QueryEscape(done), "")
	require.Equal(t, 200, status)
	require.JSONEq(t, `[]`, string(b))
	raw.problem(404, "not_found", "GET", "/v1/approvals?thread="+url.QueryEscape(missing), "")

	// send and interrupt reach a waiting thread; a finished one takes none
	var sent orchestrator.SendResult
	status, _, b = raw.do("POST", "/v1/threads/"+esc(gated.ThreadID)+"/send", `{"message": "while you wait", "by": "ada"}`)
	require.Equal(t, 200, status, string(b))
	require.NoError(t, json.Unmarshal(b, &sent))
	require.Equal(t, gated.ThreadID, sent.ThreadID)
	require.EqualValues(t, 1, sent.Seq)
	status, _, b = raw.do("POST", "/v1/threads/"+esc(gated.ThreadID)+"/interrupt", `{"message": "and now"}`)
	require.Equal(t, 200, status, string(b))
	require.NoError(t, json.Unmarshal(b, &sent))
	require.True(t, sent.Interrupt)
	require.EqualValues(t, 2, sent.Seq)
	for _, route := range []string{"send", "interrupt"} {
		raw.problem(409, "finished", "POST", "/v1/threads/"+esc(final.ThreadID)+"/"+route, `{"message": "late"}`)
		raw.problem(400, "bad_request", "POST", "/v1/threads/"+esc(gated.ThreadID)+"/"+route, `{"message": ""}`)
		raw.problem(400, "bad_request", "POST", "/v1/threads/"+esc(gated.ThreadID)+"/"+route, `{"text": "x"}`)
		raw.problem(404, "not_found", "POST", "/v1/threads/"+esc(missing)+"/"+route, `{"message": "x"}`)
	}

	// deny needs a reason; approve decides, once
	waitStatus(t, e, gated.ThreadID, thread.StatusWaiting)
	raw.problem(400, "bad_request", "POST", "/v1/threads/"+esc(gated.ThreadID)+"/deny", `{}`)
	raw.problem(400, "bad_request", "POST", "/v1/threads/"+esc(gated.ThreadID)+"/approve", `{"call": "x"}`)
	raw.problem(404, "not_found", "POST", "/v1/threads/"+esc(missing)+"/approve", "")
	raw.problem(409, "not_pending", "POST", "/v1/threads/"+esc(gated.ThreadID)+"/approve", `{"call_id": "no-such-call"}`)
	require.NoError(t, c.Approve(ctx, gated.ThreadID, api.ApproveRequest{Reason: "fine"}))
	raw.problem(409, "not_pending", "POST", "/v1/threads/"+esc(gated.ThreadID)+"/deny", `{"reason": "too late"}`)
	gatedFinal := e.Wait([]string{gated.ThreadID}, 2*time.Minute)[gated.ThreadID]
	require.Equal(t, thread.StatusCompleted, gatedFinal.Status, "%+v", gatedFinal.Error)
	decided := false
	for _, ev := range events(t, e, gated.ThreadID) {
		if ev.Type == transcript.TypeApprovalDecided {
			decided = true
			require.Contains(t, string(ev.Payload), `"by":"api"`, "no --by and no basic auth user: the API decided")
		}
	}
	require.True(t, decided)

	// a deny's reason reaches the model
	gated2 := runGated()
	require.NoError(t, c.Deny(ctx, gated2.ThreadID, api.DenyRequest{Reason: "not today", By: "ops"}))
	denied := e.Wait([]string{gated2.ThreadID}, 2*time.Minute)[gated2.ThreadID]
	require.Equal(t, thread.StatusCompleted, denied.Status)
	require.Contains(t, denied.Result, "not today")

	// cancel: a running thread, then a finished one (nothing to do)
	long, err := c.Run(ctx, api.RunRequest{Directive: "t/tooling", Model: model})
	require.NoError(t, err)
	waitStatus(t, e, long.ThreadID, thread.StatusRunning)
	raw.problem(400, "bad_request", "POST", "/v1/threads/"+esc(long.ThreadID)+"/cancel", `{"cascade": "yes"}`)
	cr, err := c.Cancel(ctx, long.ThreadID, true)
	require.NoError(t, err)
	require.True(t, cr.CancelRequested)
	require.Equal(t, long.ThreadID, cr.ThreadID)
	require.Equal(t, thread.StatusCancelled, e.Wait([]string{long.ThreadID}, time.Minute)[long.ThreadID].Status)
	status, _, b = raw.do("POST", "/v1/threads/"+esc(long.ThreadID)+"/cancel", "")
	require.Equal(t, 200, status, "a cancel without a body cascades")
	require.JSONEq(t, `{"success": true, "thread_id": "`+long.ThreadID+`", "status": "cancelled", "cancel_requested": false}`, string(b))
	raw.problem(404, "not_found", "POST", "/v1/threads/"+esc(missing)+"/cancel", "")
	slow, err := c.Run(ctx, api.RunRequest{Directive: "t/slow", Model: model})
	require.NoError(t, err)
	raw.problem(409, "not_resumable", "POST", "/v1/threads/"+esc(slow.ThreadID)+"/resume", `{"message": "x"}`)

	// fork: a new thread from the verified prefix of a thread
	fk, err := c.Fork(ctx, done, api.ForkRequest{AtTurn: 1, Message: "write another file"})
	require.NoError(t, err)
	require.Equal(t, done, fk.ForkedFrom)
	require.Equal(t, 1, fk.ForkTurn)
	require.NotEqual(t, done, fk.ThreadID)
	raw.problem(422, "turn_not_recorded", "POST", "/v1/threads/"+esc(done)+"/fork", `{"at_turn": 9}`)
	raw.problem(400, "bad_request", "POST", "/v1/threads/"+esc(done)+"/fork", `{"message": "no turn"}`)
	raw.problem(404, "not_found", "POST", "/v1/threads/"+esc(missing)+"/fork", `{"at_turn": 1}`)
	e.Wait([]string{fk.ThreadID}, 2*time.Minute)

	// the routes themselves
	raw.problem(405, "method_not_allowed", "DELETE", "/v1/threads/"+esc(done), "")
	status, h, _ = raw.do("GET", "/v1/threads/"+esc(done)+"/cancel", "")
	require.Equal(t, 405, status)
	require.Equal(t, "POST", h.Get("Allow"))
	status, h, _ = raw.do("PUT", "/v1/threads", "")
	require.Equal(t, 405, status)
	require.Equal(t, "POST, GET", h.Get("Allow"))
	raw.problem(404, "not_found", "GET", "/v1/nothing", "", unchecked)
	raw.problem(404, "not_found", "GET", "/v1/threads/"+esc(done)+"/nothing", "", unchecked)
	status, _, b = raw.do("GET", "/v1/threads/"+done+"/tree", "", unchecked)
	require.Equal(t, 200, status, "an unescaped id before a route: %s", b)
	status, h, b = raw.do("GET", "/v1/openapi.json", "")
	require.Equal(t, 200, status)
	require.Equal(t, "application/json", h.Get("Content-Type"))
	require.Equal(t, api.OpenAPI, b)
	status, _, b = raw.do("GET", "/healthz", "")
	require.Equal(t, 200, status)
	require.Equal(t, "ok\n", string(b))
	// DNS rebinding and cross-origin browser requests
	raw.problem(421, "host_not_allowed", "GET", "/v1/threads", "", func(r *http.Request) { r.Host = "evil.example:8081" })
	raw.problem(403, "forbidden", "POST", "/v1/threads/"+esc(done)+"/cancel", "", func(r *http.Request) {
		r.Header.Set("Sec-Fetch-Site", "cross-site")
		r.Header.Set("Origin", "http://evil.example")
	})
	e.Wait([]string{slow.ThreadID}, 2*time.Minute)
}

func ptr[T any](v T) *T { return &v }

// TestAPIAuth: a token or basic auth guards every route but /healthz and
// the document; a server off loopback must have one.
func TestAPIAuth(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: apiProject()})
	tr := newOpenAPITransport(t)
	hc := &http.Client{Transport: tr}
	const token = "tok-0123456789abcdef"

	for _, tc := range []struct {
		args []string
		code int
		like string
	}{
		{[]string{"api", "--addr", "0.0.0.0:0"}, 2, `^--addr 0\.0\.0\.0:0 is not a loopback address: set --basic-auth or --token$`},
		{[]string{"api", "--token", "short"}, 2, `^--token: use at least 8 characters$`},
		{[]string{"api", "--basic-auth", "nopass"}, 2, `^--basic-auth: want USER:PASS, both non-empty$`},
		{[]string{"api", "--addr", "nope"}, 2, `^--addr "nope": want HOST:PORT$`},
		{[]string{"api", "extra"}, 2, `^api takes no arguments`},
		{[]string{"api", "--bogus"}, 2, `^flag provided but not defined: -bogus \(spool [a-z ]*--help lists the flags\)$`},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		res := e.SpoolContext(ctx, quietEnv(), tc.args...)
		cancel()
		require.Equal(t, tc.code, res.Code, "%v: %s", tc.args, res.Stderr)
		require.Equal(t, 1, strings.Count(res.Stderr, "\n"), res.Stderr)
		require.Regexp(t, tc.like, strings.TrimSuffix(strings.TrimPrefix(res.Stderr, "spool: "), "\n"))
	}

	// Off loopback with a token: every route needs it.
	open := startAPI(t, e, "--addr", "0.0.0.0:0", "--token", token)
	_, port, _ := strings.Cut(open.addr, "]:")
	if port == "" {
		_, port, _ = strings.Cut(open.addr, ":")
	}
	raw := apiCall{t: t, hc: hc, base: "http://127.0.0.1:" + port}
	id := "t/greet-1-abc"
	for _, r := range api.Routes() {
		method, path, _ := strings.Cut(r, " ")
		path = strings.ReplaceAll(path, "{id}", esc(id))
		if path == "/healthz" || path == "/v1/openapi.json" {
			status, _, _ := raw.do(method, path, "")
			require.Equal(t, 200, status, "%s needs no credential", r)
			continue
		}
		if path == "/v1/approvals/decide" {
			// The link's signed token is its credential: without one,
			// refused as a bad link, not for want of authentication.
			raw.problem(403, "forbidden", method, path+"?token=x.y", "")
			continue
		}
		p := raw.problem(401, "unauthorized", method, path, "")
		require.Equal(t, "spool api: authentication required", p.Detail)
		raw.problem(401, "unauthorized", method, path, "", func(r *http.Request) { r.Header.Set("Authorization", "Bearer wrong-token-xyz") })
		raw.problem(401, "unauthorized", method, path, "", func(r *http.Request) { r.URL.RawQuery = "token=" + token })
	}
	status, h, _ := raw.do("GET", "/v1/threads", "")
	require.Equal(t, 401, status)
	require.Equal(t, `Bearer realm="spool api"`, h.Get("WWW-Authenticate"))
	c, err := client.New(raw.base, client.WithHTTPClient(hc), client.WithToken(token))
	require.NoError(t, err)
	recs, err := c.List(t.Context(), client.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, recs)
	noToken, err := client.New(raw.base, client.WithHTTPClient(hc))
	require.NoError(t, err)
	_, err = noToken.List(t.Context(), client.ListOptions{})
	var p *api.Problem
	require.ErrorAs(t, err, &p)
	require.Equal(t, "unauthorized", p.Code)

	// Basic auth on loopback: the user is who decides.
	e.StartWorker("--concurrency", "2")
	basic := startAPI(t, e, "--basic-auth", "ops:s3cret:x")
	raw = apiCall{t: t, hc: hc, base: basic.base}
	status, h, _ = raw.do("GET", "/v1/threads", "")
	require.Equal(t, 401, status)
	require.Equal(t, `Basic realm="spool api", charset="UTF-8"`, h.Get("WWW-Authenticate"))
	raw.problem(401, "unauthorized", "GET", "/v1/threads", "", func(r *http.Request) { r.SetBasicAuth("ops", "wrong") })
	c, err = client.New(basic.base, client.WithHTTPClient(hc), client.WithBasicAuth("ops", "s3cret:x"))
	require.NoError(t, err)
	rec, err := c.Run(t.Context(), api.RunRequest{Directive: "t/gated", Model: "script:scripts/api.yaml"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		calls, err := e.Orch.Approvals(t.Context(), rec.ThreadID)
		return err == nil && len(calls) == 1
	}, 2*time.Minute, 20*time.Millisecond)
	require.NoError(t, c.Deny(t.Context(), rec.ThreadID, api.DenyRequest{Reason: "no"}))
	e.Wait([]string{rec.ThreadID}, 2*time.Minute)
	by := ""
	for _, ev := range events(t, e, rec.ThreadID) {
		if ev.Type == transcript.TypeApprovalDecided {
			var d struct {
				By string `json:"by"`
			}
			require.NoError(t, json.Unmarshal(ev.Payload, &d))
			by = d.By
		}
	}
	require.Equal(t, "ops", by)
}

// sseMessage is one message of a raw event stream.
type sseMessage struct{ event, id, data string }

// readSSE reads messages from a raw stream until n transcript events have
// come, or the stream ends.
func readSSE(t *testing.T, body io.Reader, n int) []sseMessage {
	t.Helper()
	var out []sseMessage
	var m sseMessage
	events := 0
	sc := bufio.NewScanner(body)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if m.data != "" {
				out = append(out, m)
				if m.event == "" {
					events++
				}
				if events == n || m.event == api.EventEnd {
					return out
				}
			}
			m = sseMessage{}
		case strings.HasPrefix(line, ":"), strings.HasPrefix(line, "retry:"):
		case strings.HasPrefix(line, "event: "):
			m.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			m.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			m.data += strings.TrimPrefix(line, "data: ")
		}
	}
	return out
}

// requireEndsWith checks that the terminal event typ is among the last
// readToEnd appends to got every event s reads until the stream ends.
func readToEnd(t *testing.T, s *client.Stream, got []transcript.Event) []transcript.Event {
	t.Helper()
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			return got
		}
		require.NoError(t, err)
		got = append(got, ev)
	}
}

// events, followed by nothing but its checkpoint.
func requireEndsWith(t *testing.T, got []transcript.Event, typ string) {
	t.Helper()
	i := len(got) - 1
	for i > 0 && got[i].Type == transcript.TypeCheckpoint {
		i--
	}
	require.Equal(t, typ, got[i].Type, "the stream ends after the terminal event")
}

// requireTranscript checks that got is the thread's whole transcript, each
// event once, in order, as the segments hold it.
func requireTranscript(t *testing.T, e *spooltest.Env, id string, got []transcript.Event) {
	t.Helper()
	final := events(t, e, id)
	require.Len(t, got, len(final), "every event once")
	for i, ev := range final {
		require.EqualValues(t, i+1, got[i].Seq, "no gap, no repeat")
		want, _ := json.Marshal(ev)
		have, _ := json.Marshal(got[i])
		require.JSONEq(t, string(want), string(have), "event %d", i)
	}
}

// TestAPIEventStream reads a thread's events as server-sent events while
// it runs: a live event (a tool call whose turn is not durable yet) comes
// at once; a stream dropped mid-thread and opened again with
// Last-Event-ID goes on after the last event, and the whole is the
// transcript, each event once; the stream ends with the thread. A stream
// whose server is restarted mid-thread resumes by itself (the client's
// reader), losing and repeating nothing.
func TestAPIEventStream(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, apiProject(), "2")
	port, err := testenv.FreePort()
	require.NoError(t, err)
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", port)
	srv := startAPI(t, e, "--metrics-addr", metricsAddr)
	hc := &http.Client{Transport: newOpenAPITransport(t)}
	c, err := client.New(srv.base, client.WithHTTPClient(hc))
	require.NoError(t, err)
	ctx := t.Context()
	const model = "script:scripts/api.yaml"

	t.Run("live, dropped, resumed with Last-Event-ID; counted by route", func(t *testing.T) {
		rec, err := c.Run(ctx, api.RunRequest{Directive: "t/tooling", Model: model})
		require.NoError(t, err)
		id := rec.ThreadID

		// The first connection: until the tool call, which runs for a
		// minute (its turn has no checkpoint yet), then dropped.
		first, cancel := context.WithCancel(ctx)
		s := c.Events(first, id, 0)
		var got []transcript.Event
		for {
			ev, err := s.Next()
			require.NoError(t, err)
			got = append(got, ev)
			if ev.Type == transcript.TypeToolCallStart {
				break
			}
		}
		durable, err := transcript.Read(ctx, e.Store, id, e.Keyring, transcript.Lenient)
		require.NoError(t, err)
		require.Less(t, len(durable.Events), len(got), "the tool call is durable already: the stream shows nothing live")
		r, err := e.Orch.Record(ctx, id)
		require.NoError(t, err)
		require.Equal(t, thread.StatusRunning, r.Status, "read while the thread runs")
		cancel()
		_, err = s.Next()
		require.ErrorIs(t, err, context.Canceled)
		require.NoError(t, s.Close())

		last := got[len(got)-1].Seq
		// Resumed after the last event got; the thread is cancelled
		// meanwhile, and the stream ends with it.
		s = c.Events(ctx, id, last)
		defer s.Close()
		cr, err := c.Cancel(ctx, id, true)
		require.NoError(t, err)
		require.True(t, cr.CancelRequested)
		got = readToEnd(t, s, got)
		require.Equal(t, thread.StatusCancelled, s.End().Status)
		require.Equal(t, got[len(got)-1].Seq, s.End().LastEventID)
		requireEndsWith(t, got, transcript.TypeThreadCancelled)
		requireTranscript(t, e, id, got)

		// A raw stream of the finished thread with Last-Event-ID: the
		// events after it, each with its seq as the id, then the end; a bad
		// id is refused.
		raw := apiCall{t: t, hc: hc, base: srv.base}
		raw.problem(400, "bad_request", "GET", "/v1/threads/"+esc(id)+"/events", "", func(r *http.Request) { r.Header.Set("Last-Event-ID", "x") })
		raw.problem(400, "bad_request", "GET", "/v1/threads/"+esc(id)+"/events?after=-1", "")
		for _, from := range []int64{0, last - 1} {
			req, err := http.NewRequestWithContext(ctx, "GET", srv.base+"/v1/threads/"+esc(id)+"/events", nil)
			require.NoError(t, err)
			req.Header.Set("Last-Event-ID", fmt.Sprint(from))
			resp, err := hc.Do(req)
			require.NoError(t, err)
			require.Equal(t, 200, resp.StatusCode)
			require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
			ms := readSSE(t, resp.Body, -1)
			resp.Body.Close()
			require.Len(t, ms, len(got)-int(from)+1)
			for i, m := range ms[:len(ms)-1] {
				require.Equal(t, fmt.Sprint(from+int64(i)+1), m.id)
				var ev transcript.Event
				require.NoError(t, json.Unmarshal([]byte(m.data), &ev))
				require.Equal(t, got[from+int64(i)].Seq, ev.Seq)
			}
			end := ms[len(ms)-1]
			require.Equal(t, api.EventEnd, end.event)
			require.Empty(t, end.id)
			require.JSONEq(t, fmt.Sprintf(`{"thread_id": %q, "status": "cancelled", "last_event_id": %d}`, id, got[len(got)-1].Seq), end.data)
		}
		// Resumed after an id past the end (?after=): no event, and the
		// end names the last event there is, not the id asked for.
		resp, err := hc.Get(srv.base + "/v1/threads/" + esc(id) + "/events?after=" + fmt.Sprint(last+1000))
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		ms := readSSE(t, resp.Body, -1)
		resp.Body.Close()
		require.Len(t, ms, 1, "the end only")
		require.Equal(t, api.EventEnd, ms[0].event)
		require.JSONEq(t, fmt.Sprintf(`{"thread_id": %q, "status": "cancelled", "last_event_id": %d}`, id, got[len(got)-1].Seq), ms[0].data)

		// --metrics-addr serves the requests by route (the id is no label).
		// A stream is counted when its handler returns, which can be just
		// after the client read its end: the page is read until it has
		// counted them, the counts themselves exact.
		wants := []string{
			`spool_api_requests_total{code="200",method="GET",route="/v1/threads/{id}/events"} 5`,
			`spool_api_requests_total{code="400",method="GET",route="/v1/threads/{id}/events"} 2`,
			`spool_api_requests_total{code="200",method="POST",route="/v1/threads/{id}/cancel"} 1`,
			`spool_api_request_seconds_count{method="POST",route="/v1/threads"} 1`,
		}
		var b []byte
		require.Eventually(t, func() bool {
			resp, err := http.Get("http://" + metricsAddr + "/metrics")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			if b, err = io.ReadAll(resp.Body); err != nil {
				return false
			}
			for _, want := range wants {
				if !strings.Contains(string(b), want) {
					return false
				}
			}
			return true
		}, 10*time.Second, 50*time.Millisecond, "metrics: %s", b)
		require.NotContains(t, string(b), id)
	})

	t.Run("the server restarts mid-stream", func(t *testing.T) {
		rec, err := c.Run(ctx, api.RunRequest{Directive: "t/slow", Model: model})
		require.NoError(t, err)
		id := rec.ThreadID
		s := c.Events(ctx, id, 0)
		defer s.Close()
		var got []transcript.Event
		for len(got) < 3 {
			ev, err := s.Next()
			require.NoError(t, err)
			got = append(got, ev)
		}
		r, err := e.Orch.Record(ctx, id)
		require.NoError(t, err)
		require.False(t, r.Status.Terminal(), "read while the thread runs")
		// The server goes away mid-stream, and another comes up on its
		// address: the reader connects again and resumes.
		require.NoError(t, srv.proc.Stop(30*time.Second))
		again := startAPI(t, e, "--addr", srv.addr)
		require.Equal(t, srv.addr, again.addr)
		got = readToEnd(t, s, got)
		require.GreaterOrEqual(t, s.Reconnects(), 1)
		require.Equal(t, thread.StatusCompleted, s.End().Status)
		requireEndsWith(t, got, transcript.TypeThreadCompleted)
		requireTranscript(t, e, id, got)
	})
}

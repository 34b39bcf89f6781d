package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/thread"
)

// TestMonitorActions runs `spool monitor` three ways over a thread that
// waits for approval: by default it offers the decision and messages but
// not cancel or resume (it holds no signing key); with --sign it offers
// them too, and a cancel through its confirmation ends the thread; with
// --read-only it offers nothing and refuses an action.
func TestMonitorActions(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, peopleProject(), "1")
	id := startThread(t, e, "p/write", "--model", "script:scripts/p.yaml")
	waitForApproval(t, e, id)

	do := browser(t)
	page := "/threads/" + id
	for _, tc := range []struct {
		flags           []string
		decide, cancel  bool
		cancelThroughIt bool
	}{
		{flags: nil, decide: true},
		{flags: []string{"--read-only"}},
		{flags: []string{"--sign"}, decide: true, cancel: true, cancelThroughIt: true},
	} {
		base, p := startMonitor(t, e, nil, tc.flags...)

		code, body := do(http.MethodGet, base+page, nil)
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, "Waiting for approval", tc.flags)
		require.Equal(t, tc.decide, strings.Contains(body, `name="decision" value="approve"`), "decide %v", tc.flags)
		require.Equal(t, tc.decide, strings.Contains(body, `action="`+page+`/send"`), "send %v", tc.flags)
		require.Equal(t, tc.cancel, strings.Contains(body, `action="`+page+`/cancel"`), "cancel %v", tc.flags)
		if !tc.decide {
			require.NotContains(t, body, `method="post"`, "no form at all")
			code, body = do(http.MethodPost, base+page+"/send", url.Values{"message": {"x"}})
			require.Equal(t, http.StatusForbidden, code)
			require.Contains(t, body, "read-only")
		}
		if tc.cancelThroughIt {
			code, body = do(http.MethodPost, base+page+"/cancel", url.Values{"cascade": {"1"}})
			require.Equal(t, http.StatusOK, code, body)
			require.Contains(t, body, "Cancel this thread?")
			code, body = do(http.MethodPost, base+page+"/cancel", url.Values{"cascade": {"1"}, "confirmed": {"1"}})
			require.Equal(t, http.StatusSeeOther, code, body)
			rec := e.Wait([]string{id}, time.Minute)[id]
			require.Equal(t, thread.StatusCancelled, rec.Status)
			res := e.Spool("thread", "verify", id)
			require.Equal(t, 0, res.Code, "the monitor signed what it wrote: %s%s", res.Stdout, res.Stderr)
		}
		require.NoError(t, p.Stop(30*time.Second), p.Log())
	}
}

// TestMonitorSessionKey: monitors given one --session-key (as replicas
// behind a load balancer are) show the outcome of an action one of them
// took (the flash the other signed); a monitor with a key of its own takes
// the action all the same (the forms carry no token) but shows no
// outcome it did not sign. A form POSTed from another origin is refused
// by every one.
func TestMonitorSessionKey(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, peopleProject(), "1")
	id := startThread(t, e, "p/write", "--model", "script:scripts/p.yaml")
	waitForApproval(t, e, id)
	shared := []string{"SPOOL_MONITOR_SESSION_KEY=one key for every replica"}
	a, _ := startMonitor(t, e, shared)
	b, _ := startMonitor(t, e, shared)
	other, _ := startMonitor(t, e, nil)

	do := browser(t) // one cookie jar: cookies do not tell ports apart
	page := "/threads/" + id
	code, body := do(http.MethodGet, a+page, nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `action="`+page+`/send"`, "the page offers a form")
	require.NotContains(t, body, `name="csrf"`, "with no token in it")

	code, body = do(http.MethodPost, b+page+"/send", url.Values{"message": {"from a replica"}})
	require.Equal(t, http.StatusSeeOther, code, body)
	code, body = do(http.MethodGet, a+page, nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "Message 1 queued", "a replica shows the outcome the other signed")

	code, body = do(http.MethodPost, other+page+"/send", url.Values{"message": {"from elsewhere"}})
	require.Equal(t, http.StatusSeeOther, code, body)
	code, body = do(http.MethodGet, a+page, nil)
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, "Message 2 queued", "an outcome signed with another key is not shown")

	for _, base := range []string{a, other} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+page+"/send",
			strings.NewReader(url.Values{"message": {"from another site"}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "http://evil.example")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode, string(got))
		require.Contains(t, string(got), "cross-origin request refused")
	}

	require.Equal(t, []string{"from a replica", "from elsewhere"}, messagesSent(t, e, id),
		"both same-origin messages reached the thread, the cross-origin ones did not")
}

// messagesSent returns the contents of the messages sent to thread id, in
// order: those its worker delivered (in its transcript; a message wakes a
// thread that waits for approval) and those still queued. A message
// delivered but not yet trimmed from the inbox is counted once. The inbox
// is read first: a worker trims it only once the messages are durable in
// the transcript, so a message is in one or the other by the second read
// (read the other way round, one delivered between the reads was in
// neither, as CI once saw).
func messagesSent(t *testing.T, e *spooltest.Env, id string) []string {
	t.Helper()
	msgs, err := e.Orch.Runtime().Services().Registry.Inbox(context.Background(), id, 0)
	require.NoError(t, err)
	var out []string
	seen := map[string]bool{}
	for _, ev := range eventsOf(transcriptEvents(t, e, id), "user_message") {
		c, _ := payload(ev)["content"].(string)
		out, seen[c] = append(out, c), true
	}
	for _, m := range msgs {
		if !seen[m.Content] {
			out, seen[m.Content] = append(out, m.Content), true
		}
	}
	return out
}

// startMonitor starts `spool monitor` on a free loopback port with env and
// flags, and returns its base URL once it serves.
func startMonitor(t *testing.T, e *spooltest.Env, env []string, flags ...string) (string, *spooltest.Proc) {
	t.Helper()
	port, err := testenv.FreePort()
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p := e.Start(env, append([]string{"monitor", "--addr", addr}, flags...)...)
	require.Eventually(t, func() bool { return strings.Contains(p.Log(), "spool monitor: http://") || p.Exited() }, time.Minute, 50*time.Millisecond)
	require.False(t, p.Exited(), p.Log())
	return "http://" + addr, p
}

// browser returns a client that keeps cookies and follows no redirect:
// do sends a request (a form when form is not nil) and returns the
// status and body.
func browser(t *testing.T) func(method, u string, form url.Values) (int, string) {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	client := &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return func(method, u string, form url.Values) (int, string) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequestWithContext(context.Background(), method, u, body)
		require.NoError(t, err)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
}

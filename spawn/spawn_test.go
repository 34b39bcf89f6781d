package spawn

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spool-run/spool/internal/testing/testenv"
)

func TestMain(m *testing.M) { testenv.MainLeakFree(m) }

type fakeHandler struct {
	started []Request
}

func (f *fakeHandler) Start(_ context.Context, req Request) (any, error) {
	if req.Directive == "bad" {
		return nil, errors.New("directive bad: not found")
	}
	f.started = append(f.started, req)
	return map[string]string{"thread_id": req.Directive + "-1-x", "parent_id": "caller"}, nil
}

func (f *fakeHandler) Wait(_ context.Context, ids []string, timeout time.Duration) (any, error) {
	out := map[string]map[string]string{}
	for _, id := range ids {
		if !strings.HasSuffix(id, "-1-x") {
			return nil, errors.New("thread " + id + " is not a child of caller")
		}
		out[id] = map[string]string{"thread_id": id, "status": "completed", "timeout": timeout.String()}
	}
	return out, nil
}

func TestServeStartsAndWaitsWithTheCallsToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := &fakeHandler{}
	env, stop, err := Serve(t.TempDir(), h, nil)
	if err != nil {
		t.Fatal(err)
	}
	sock, token := env[SocketEnv], env[TokenEnv]
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: %v %v, want mode 0600", sock, fi, err)
	}
	if len(token) != 64 {
		t.Fatalf("token %q: want 256 random bits in hex", token)
	}
	c := NewClient(sock, token)
	rec, err := c.Start(ctx, Request{Directive: "t/child", Inputs: map[string]any{"level": 1}, Limits: []string{"turns=3"}})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal(rec, &got); err != nil || got["thread_id"] != "t/child-1-x" {
		t.Fatalf("Start = %s, %v", rec, err)
	}
	if len(h.started) != 1 || h.started[0].Limits[0] != "turns=3" || h.started[0].Inputs["level"] != float64(1) {
		t.Fatalf("the handler got %+v", h.started)
	}
	recs, err := c.Wait(ctx, []string{"t/child-1-x"}, 90*time.Second)
	if err != nil || !strings.Contains(string(recs), `"timeout":"1m30s"`) {
		t.Fatalf("Wait = %s, %v", recs, err)
	}
	if _, err := c.Wait(ctx, []string{"other-2-y"}, time.Second); err == nil || err.Error() != "thread other-2-y is not a child of caller" {
		t.Fatalf("Wait on a non-child = %v", err)
	}
	if _, err := c.Start(ctx, Request{Directive: "bad"}); err == nil || err.Error() != "directive bad: not found" {
		t.Fatalf("a handler error = %v, want its message", err)
	}

	for _, bad := range []string{"", "x", token[:63], strings.ToUpper(token)} {
		if _, err := NewClient(sock, bad).Start(ctx, Request{Directive: "t/child"}); err == nil || !strings.Contains(err.Error(), "bad or expired token") {
			t.Fatalf("token %q: %v, want refused", bad, err)
		}
	}
	if len(h.started) != 1 {
		t.Fatalf("a refused request reached the handler: %+v", h.started)
	}

	stop()
	if _, err := c.Start(ctx, Request{Directive: "t/child"}); err == nil {
		t.Fatal("the grant outlived its call")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv(SocketEnv, "")
	t.Setenv(TokenEnv, "")
	if FromEnv() != nil {
		t.Fatal("a client outside a tool call")
	}
	t.Setenv(SocketEnv, "/tmp/x.sock")
	t.Setenv(TokenEnv, "t")
	if c := FromEnv(); c == nil || c.socket != "/tmp/x.sock" || c.token != "t" {
		t.Fatalf("FromEnv = %+v", c)
	}
}

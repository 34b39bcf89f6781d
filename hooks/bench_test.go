package hooks

import (
	"context"
	"testing"
	"time"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/thread"
)

func TestEventContexts(t *testing.T) {
	hs := Builtin(config.DefaultRetryPolicy())
	if d := Decide(hs, EventError, ErrorContext("t", "429", ClassRateLimited, 1, 5*time.Second)); d.Action != Retry || d.Delay != 5*time.Second {
		t.Errorf("rate limited: %+v", d)
	}
	if d := Decide(hs, EventError, ErrorContext("t", "boom", ClassTransient, 2, 0)); d.Action != Retry || d.Delay != 4*time.Second {
		t.Errorf("transient: %+v", d)
	}
	le := &thread.LimitError{Code: thread.CodeTurnsExceeded, Current: 6, Max: 6}
	if d := Decide(hs, EventLimit, LimitContext("t", le)); d.Action != Fail || d.Code != thread.CodeTurnsExceeded {
		t.Errorf("limit: %+v", d)
	}
}

func BenchmarkDecide(b *testing.B) {
	hs := Merge(nil, nil, Builtin(config.DefaultRetryPolicy()), nil, nil)
	ctx := ErrorContext("t", "x", ClassTransient, 1, 0)
	for b.Loop() {
		Decide(hs, EventError, ctx)
	}
}

type nopRunner struct{}

func (nopRunner) Load(context.Context, string, string) (string, error) { return "x", nil }
func (nopRunner) Execute(context.Context, string, string, map[string]any) (string, error) {
	return "", nil
}
func (nopRunner) Search(context.Context, string, string) (string, error) { return "", nil }

func BenchmarkRun(b *testing.B) {
	hs, err := ParseYAML("h.yaml", []byte(projectYAML), LayerProject)
	if err != nil {
		b.Fatal(err)
	}
	d := NewDispatcher(Merge(nil, nil, Builtin(config.DefaultRetryPolicy()), hs, nil))
	evctx := map[string]any{"directive": "agency/api", "thread_id": "t", "cost": thread.Cost{Turns: 4}}
	for b.Loop() {
		if _, err := d.Run(context.Background(), EventThreadStarted, evctx, nopRunner{}); err != nil {
			b.Fatal(err)
		}
	}
}

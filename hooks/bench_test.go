package hooks

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/thread"
)

func TestEventContexts(t *testing.T) {
	hs := Builtin(config.DefaultRetryPolicy())
	d := Decide(hs, EventError, ErrorContext("t", "429", ClassRateLimited, 1, 5*time.Second))
	require.Equal(t, Retry, d.Action, "rate limited: %+v", d)
	require.EqualValues(t, 5*time.Second, d.Delay, "rate limited: %+v", d)
	d = Decide(hs, EventError, ErrorContext("t", "boom", ClassTransient, 2, 0))
	require.Equal(t, Retry, d.Action, "transient: %+v", d)
	require.EqualValues(t, 4*time.Second, d.Delay, "transient: %+v", d)
	le := &thread.LimitError{Code: thread.CodeTurnsExceeded, Current: 6, Max: 6}
	d = Decide(hs, EventLimit, LimitContext("t", le))
	require.Equal(t, Fail, d.Action, "limit: %+v", d)
	require.Equal(t, thread.CodeTurnsExceeded, d.Code, "limit: %+v", d)
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
	require.NoError(b, err)
	d := NewDispatcher(Merge(nil, nil, Builtin(config.DefaultRetryPolicy()), hs, nil))
	evctx := map[string]any{"directive": "agency/api", "thread_id": "t", "cost": thread.Cost{Turns: 4}}
	for b.Loop() {
		_, err := d.Run(context.Background(), EventThreadStarted, evctx, nopRunner{})
		require.NoError(b, err)
	}
}

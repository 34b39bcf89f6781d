package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// workerEnv is a spooltest environment on files with one worker of the
// given concurrency.
func workerEnv(t *testing.T, files map[string]string, concurrency string) *spooltest.Env {
	t.Helper()
	e := spooltest.New(t, spooltest.Options{Files: files})
	e.StartWorker("--concurrency", concurrency)
	return e
}

// runJSON runs `spool thread run ... --wait --json` and decodes the record.
func runJSON(t *testing.T, e *spooltest.Env, args ...string) (*registry.Record, spooltest.Result) {
	t.Helper()
	return runJSONEnv(t, e, nil, args...)
}

// runJSONEnv is runJSON with extra environment.
func runJSONEnv(t *testing.T, e *spooltest.Env, env []string, args ...string) (*registry.Record, spooltest.Result) {
	t.Helper()
	res := e.SpoolContext(context.Background(), env, append([]string{"thread", "run"}, append(args, "--wait", "--json", "--timeout", "3m")...)...)
	var rec registry.Record
	res.JSON(t, &rec)
	return &rec, res
}

// runCompleted is runJSON for a run that must exit 0 with the thread
// completed.
func runCompleted(t *testing.T, e *spooltest.Env, args ...string) *registry.Record {
	t.Helper()
	rec, res := runJSON(t, e, args...)
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, thread.StatusCompleted, rec.Status)
	return rec
}

// startThread runs `thread run` without waiting and returns the id.
func startThread(t *testing.T, e *spooltest.Env, args ...string) string {
	t.Helper()
	return spoolJSON[registry.Record](t, e, append([]string{"thread", "run"}, append(args, "--json")...)...).ThreadID
}

// spoolJSON runs the CLI with args (which ask for --json), requires it to
// exit 0 and decodes its stdout into a T.
func spoolJSON[T any](t *testing.T, e *spooltest.Env, args ...string) T {
	t.Helper()
	v, _ := spoolEnvJSON[T](t, e, nil, args...)
	return v
}

// spoolEnvJSON is spoolJSON with extra environment; it returns the
// command's result too, for what it wrote to stderr.
func spoolEnvJSON[T any](t *testing.T, e *spooltest.Env, env []string, args ...string) (T, spooltest.Result) {
	t.Helper()
	res := e.SpoolContext(context.Background(), env, args...)
	require.Equal(t, 0, res.Code, res.Stderr)
	var v T
	res.JSON(t, &v)
	return v, res
}

// waitStatus waits until thread id's status is one of want.
func waitStatus(t *testing.T, e *spooltest.Env, id string, want ...thread.Status) *registry.Record {
	t.Helper()
	var rec *registry.Record
	require.Eventually(t, func() bool {
		r, err := e.Orch.Record(context.Background(), id)
		if err != nil {
			return false
		}
		rec = r
		for _, s := range want {
			if r.Status == s {
				return true
			}
		}
		return false
	}, 2*time.Minute, 20*time.Millisecond, "thread %s never reached %v", id, want)
	return rec
}

// children are the child threads of id.
func children(t *testing.T, e *spooltest.Env, id string) []*registry.Record {
	t.Helper()
	kids, err := e.Orch.Children(t.Context(), id)
	require.NoError(t, err)
	return kids
}

// threadIDs are the ids of recs, in order.
func threadIDs(recs []*registry.Record) []string {
	ids := make([]string, 0, len(recs))
	for _, r := range recs {
		ids = append(ids, r.ThreadID)
	}
	return ids
}

// startBoss starts coordProject's t/boss on the slow script and waits
// until its three children run (each past its first turn).
func startBoss(t *testing.T, e *spooltest.Env) (boss string, kids []*registry.Record) {
	t.Helper()
	boss = startThread(t, e, "t/boss", "--model", "script:scripts/slow.yaml")
	require.Eventually(t, func() bool {
		kids = children(t, e, boss)
		running := 0
		for _, k := range kids {
			if k.Status == thread.StatusRunning && k.Cost.Turns >= 1 {
				running++
			}
		}
		return running == 3
	}, time.Minute, 100*time.Millisecond)
	return boss, kids
}

// readTranscript reads thread id's transcript, which must verify.
func readTranscript(t *testing.T, e *spooltest.Env, id string) *transcript.Transcript {
	t.Helper()
	tr, err := transcript.Read(context.Background(), e.Store, id, e.Keyring, transcript.Strict)
	require.NoError(t, err, id)
	return tr
}

// events are the events of thread id's transcript, which must verify.
func events(t *testing.T, e *spooltest.Env, id string) []transcript.Event {
	t.Helper()
	return readTranscript(t, e, id).Events
}

// payloads decodes the payload of each event of type typ.
func payloads[T any](t *testing.T, events []transcript.Event, typ string) []T {
	t.Helper()
	var out []T
	for _, ev := range events {
		if ev.Type == typ {
			var p T
			require.NoError(t, ev.Decode(&p))
			out = append(out, p)
		}
	}
	return out
}

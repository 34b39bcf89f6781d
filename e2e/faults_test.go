package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

func faultProject() map[string]string {
	return map[string]string{
		".ai/directives/f/parent.md":   directive("parent", `turns="4"`, spawnPerms, `<success>done</success>`),
		".ai/directives/f/kid.md":      strings.Replace(directive("kid", `turns="2"`, fsPerms, `<success>done</success>`), "<limits", `<model id="script:scripts/slowkid.yaml" /><limits`, 1),
		".ai/directives/f/think.md":    directive("think", `turns="3" duration="2"`, fsPerms, `<success>done</success>`),
		".ai/directives/f/tooling.md":  directive("tooling", `turns="3" duration="2"`, fsPerms+`<execute><tool>t/sleep</tool></execute>`, `<success>done</success>`),
		".ai/config/agent/models.yaml": "tiers:\n  slow: script:scripts/slowkid.yaml\n",
		".ai/tools/t/sleep.sh":         sleepTool,
		"scripts/f.yaml":               script("fault"),
		"scripts/slowkid.yaml":         script("slow_fault"),
		"scripts/stuck.yaml":           script("stuck"),
	}
}

// tamper flips one byte in the middle of a thread's first transcript
// segment.
func tamper(t *testing.T, e *spooltest.Env, id string) string {
	t.Helper()
	ctx := context.Background()
	key := blobkey.Segment(id, 1)
	data, err := e.Store.Get(ctx, key)
	require.NoError(t, err)
	i := len(data) / 2
	data[i] ^= 0x01
	require.NoError(t, e.Store.Put(ctx, key, data))
	return key
}

// waitingParent starts f/parent and returns its id once it waits on its
// slow child.
func waitingParent(t *testing.T, e *spooltest.Env) string {
	t.Helper()
	id := startThread(t, e, "f/parent", "--model", "script:scripts/f.yaml")
	waitStatus(t, e, id, thread.StatusWaiting)
	return id
}

// onlyChild waits for the one child of id to end and returns its record.
func onlyChild(t *testing.T, e *spooltest.Env, id string) *registry.Record {
	t.Helper()
	kids := children(t, e, id)
	require.Len(t, kids, 1)
	return e.Wait([]string{kids[0].ThreadID}, time.Minute)[kids[0].ThreadID]
}

// TestIntegrityFailureEndsTheThread: a thread whose transcript was
// tampered with while it waited ends in error integrity_failed when it
// wakes, naming the segment, and is not retried; a cancel of such a
// thread ends it cancelled.
func TestIntegrityFailureEndsTheThread(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: faultProject()})
	w := e.StartWorker("--concurrency", "3")

	t.Run("wakes to a tampered transcript", func(t *testing.T) {
		id := waitingParent(t, e)
		key := tamper(t, e, id)
		rec := e.Wait([]string{id}, time.Minute)[id]
		require.Equal(t, thread.StatusError, rec.Status)
		require.Equal(t, "integrity_failed", rec.Error.Code)
		require.Contains(t, rec.Error.Message, key, "names the segment")
		require.Equal(t, int64(2), rec.Activation, "started, woken once: never retried")
		require.NotContains(t, w.Log(), "activation failed")
		kid := onlyChild(t, e, id)
		require.Equal(t, thread.StatusCompleted, kid.Status, "the parent woke because its slow kid finished: %+v", kid.Error)
	})

	t.Run("cancel ends it whatever its transcript", func(t *testing.T) {
		id := waitingParent(t, e)
		tamper(t, e, id)
		res := e.Spool("thread", "cancel", id, "--json")
		require.Equal(t, 0, res.Code, res.Stderr)
		rec := e.Wait([]string{id}, time.Minute)[id]
		require.Equal(t, thread.StatusCancelled, rec.Status, "%+v", rec.Error)
		kid := onlyChild(t, e, id)
		require.Equal(t, thread.StatusCancelled, kid.Status, "the cancel reached the kid in its 3s model call: %+v", kid.Error)
	})
}

// TestDurationStopsWorkInFlight: the duration limit cancels the model call
// or the tool in flight, not only the next turn: a thread with duration
// 2s ends with duration_exceeded within seconds of it, not when a 60s
// call or tool returns.
func TestDurationStopsWorkInFlight(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: faultProject()})
	w := e.StartWorker("--concurrency", "2")

	for _, tc := range []struct{ name, directive, script, where string }{
		{"model call", "f/think", "scripts/stuck.yaml", "during the model call"},
		{"tool", "f/tooling", "scripts/f.yaml", "during tool t/sleep"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			began := time.Now()
			rec, res := runJSON(t, e, tc.directive, "--model", "script:"+tc.script)
			took := time.Since(began)
			require.Equal(t, 1, res.Code, res.Stderr)
			require.Equal(t, thread.StatusError, rec.Status)
			require.Equal(t, thread.CodeDurationExceeded, rec.Error.Code)
			require.Contains(t, rec.Error.Message, tc.where)
			require.Less(t, took, 15*time.Second, "stopped at the limit, not when the 60s work returned")
			require.GreaterOrEqual(t, rec.Cost.ElapsedSeconds, 2.0)
			require.Less(t, rec.Cost.ElapsedSeconds, 6.0)
		})
	}
	require.NotContains(t, w.Log(), "activation failed")
}

// TestStorageOutageLosesNothing stops the S3 server for ten seconds while
// 20 threads write files: the workers ride the outage out (their store
// retries), no storage failure reaches a model as a tool error, every
// thread completes and every write is there.
func TestStorageOutageLosesNothing(t *testing.T) {
	t.Parallel()
	s3 := testenv.NewPrivateS3(t)
	files := faultProject()
	files[".ai/directives/f/writer.md"] = directive("writer", `turns="8"`, fsPerms, `<success>done</success>`)
	files["scripts/outage.yaml"] = script("outage")
	e := spooltest.New(t, spooltest.Options{Files: files, S3: s3.S3})

	// Every thread is queued before the worker starts, so the outage finds
	// work in flight (about 8s of it: 20 threads of five 300ms turns, four
	// at a time).
	var ids []string
	for range 20 {
		ids = append(ids, startThread(t, e, "f/writer", "--model", "script:scripts/outage.yaml"))
	}
	w := e.StartWorker("--concurrency", "4")
	time.Sleep(time.Second)
	s3.Stop()
	time.Sleep(10 * time.Second)
	require.NoError(t, s3.Start())

	final := e.Wait(ids, 3*time.Minute)
	for _, id := range ids {
		rec := final[id]
		require.Equal(t, thread.StatusCompleted, rec.Status, "%s: %+v", id, rec.Error)
		for _, part := range []string{"part1.txt", "part2.txt", "part3.txt"} {
			require.Contains(t, rec.Result, part, "%s: every write is there", id)
		}
		for _, ev := range transcriptEvents(t, e, id) {
			if ev["event_type"] == "tool_call_result" {
				require.NotEqual(t, true, payload(ev)["is_error"], "%s: no tool saw the outage: %v", id, payload(ev)["output"])
			}
		}
	}
	require.Contains(t, w.Log(), "blob store failed; trying again", "the outage hit the workers")
}

// TestGrowthIsBounded: a model answer of 2 MB, a tool call with a 2 MB
// input and a chain whose context fills on every turn stay bounded: the
// answer is cut in the conversation, transcript and record (stored whole
// as an artifact), the oversized call is refused unrun, and the chain
// stops at coordination.yaml's max_continuations.
func TestGrowthIsBounded(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("spool ", 2<<20/6)
	files := faultProject()
	files[".ai/directives/f/huge.md"] = directive("huge", `turns="3" tokens="10000000"`, fsPerms, `<success>done</success>`)
	files[".ai/directives/f/bigwrite.md"] = directive("bigwrite", `turns="3" tokens="10000000"`, fsPerms, `<success>done</success>`)
	files[".ai/directives/f/runaway.md"] = directive("runaway", `turns="5"`, fsPerms, `<success>done</success>`)
	files[".ai/config/agent/coordination.yaml"] = "coordination:\n  continuation:\n    max_continuations: 2\n"
	// The 2 MB comes from the template (repeat): a script holds at most 1 MiB.
	bigTmpl := fmt.Sprintf(`{{repeat "spool " %d}}`, 2<<20/6)
	files["scripts/big.yaml"] = "directives:\n  \"f/huge\":\n    - text: '" + bigTmpl + "'\n" +
		"  \"f/bigwrite\":\n    - tool_calls: [{tool: rye/file-system/fs_write, input: {path: big.txt, content: '" + bigTmpl + "'}}]\n" +
		"      usage: {input: 10, output: 10}\n    - text: \"after: {{.last_tool_result}}\"\n      usage: {input: 10, output: 10}\n"
	files["scripts/runaway.yaml"] = "context_window: 1000\ndirectives:\n  \"f/runaway\":\n" +
		"    - tool_calls: [{tool: rye/file-system/fs_read, input: {path: nothing}}]\n      usage: {input: 990, output: 5}\n" +
		"    - text: never\n"
	e := workerEnv(t, files, "2")
	ctx := context.Background()

	t.Run("a huge answer", func(t *testing.T) {
		rec := runCompleted(t, e, "f/huge", "--model", "script:scripts/big.yaml")
		require.Less(t, len(rec.Result), 300<<10, "the record holds a cut result")
		require.Contains(t, rec.Result, "output cut")
		art := "threads/" + rec.ThreadID + "/artifacts/turn-1-response.txt"
		whole, err := e.Store.Get(ctx, art)
		require.NoError(t, err)
		require.Equal(t, big, string(whole), "the whole answer is kept")
		segs, err := e.Store.List(ctx, "threads/"+rec.ThreadID+"/transcript/")
		require.NoError(t, err)
		for _, s := range segs {
			require.Less(t, s.Size, int64(1<<20), "%s", s.Key)
		}
		_, err = e.Store.Get(ctx, blobkey.ThreadJSON(rec.ThreadID))
		require.NoError(t, err, "thread.json is written")
	})

	t.Run("a huge tool input", func(t *testing.T) {
		rec, res := runJSON(t, e, "f/bigwrite", "--model", "script:scripts/big.yaml")
		require.Equal(t, 0, res.Code, res.Stderr)
		require.Contains(t, rec.Result, "over the limit")
		_, err := e.Store.Get(ctx, blobkey.WorkspaceFile(rec.ThreadID, "big.txt"))
		require.ErrorIs(t, err, blobstore.ErrNotFound, "the call did not run")
	})

	t.Run("a runaway chain", func(t *testing.T) {
		rec, res := runJSON(t, e, "f/runaway", "--model", "script:scripts/runaway.yaml")
		require.Equal(t, 1, res.Code, res.Stderr)
		require.Equal(t, "continuations_exceeded", rec.Error.Code)
		require.Equal(t, 2, rec.ChainIndex, "two continuations, then it stops")
	})
}

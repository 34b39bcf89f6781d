package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/tools"
	"github.com/spool-run/spool/transcript"
)

func historyProject() map[string]string {
	return map[string]string{
		".ai/directives/h/steps.md": directive("steps", `turns="8" spend="0.5"`, fsPerms, `<success>done</success>`),
		".ai/directives/h/boss.md":  directive("boss", `turns="8" spend="1.0"`, spawnPerms, `<success>done</success>`),
		".ai/directives/h/kid.md":   directive("kid", `turns="4"`, fsPerms, `<output name="answer" required="true">the answer</output>`),
		"scripts/steps.yaml":        script("steps"),
		"scripts/fork.yaml":         script("fork"),
		"scripts/tree.yaml":         script("tree"),
	}
}

// finished waits until thread id's thread.json says it is terminal, so
// that strict verification finds Finalize's view.
func finished(t *testing.T, e *spooltest.Env, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		data, err := e.Store.Get(context.Background(), blobkey.ThreadJSON(id))
		return err == nil && strings.Contains(string(data), `"status":"completed"`)
	}, time.Minute, 50*time.Millisecond)
}

// runSteps runs h/steps to completion: four turns, three appends.
func runSteps(t *testing.T, e *spooltest.Env) *registry.Record {
	t.Helper()
	rec := runCompleted(t, e, "h/steps", "--model", "script:scripts/steps.yaml")
	require.Equal(t, 4, rec.Cost.Turns)
	finished(t, e, rec.ThreadID)
	return rec
}

// TestForkAtTurn forks a 4-turn thread at turn 2: the fork's transcript
// verifies, opens with turns 1-2 as recorded (the appends of those turns
// ran once: the fork's workspace holds each line once, and the fork ran
// no fs_write of its own), has the message and completes; the original
// is unchanged and still verifies; the fork carries what the original's
// chain had left at turn 2, and shows in tree and chain; a tampered
// transcript is not forked.
func TestForkAtTurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := workerEnv(t, historyProject(), "2")
	orig := runSteps(t, e)
	id := orig.ThreadID
	before, err := e.Orch.Record(ctx, id)
	require.NoError(t, err)
	origEvents := events(t, e, id)

	type forkOutput struct {
		ThreadID string `json:"thread_id"`
		orchestrator.ForkResult
	}
	fr := spoolJSON[forkOutput](t, e, "thread", "fork", id, "--at-turn", "2", "--message", "read the log instead", "--model", "script:scripts/fork.yaml", "--json")
	require.Equal(t, fr.Thread.ThreadID, fr.ThreadID, "the new thread's id on top, as thread run --json has it")
	require.Equal(t, id, fr.ForkedFrom)
	require.Equal(t, 2, fr.ForkTurn)
	require.Equal(t, 4, fr.Turns)
	fork := fr.Thread.ThreadID
	require.NotEqual(t, id, fork)
	require.Equal(t, id, fr.Thread.ForkedFrom)
	require.Equal(t, 2, fr.Thread.ForkTurn)
	require.Empty(t, fr.Thread.ParentID, "a sibling of a root is a root")
	require.Equal(t, fork, fr.Thread.ChainRootID, "the first thread of a chain of its own")

	// Budget: the chain's 0.5 less turns 1-2 (300 in, 20 out tokens).
	spentAt2 := (300*1.0 + 20*5.0) / 1e6
	require.InDelta(t, 0.5-spentAt2, fr.Budget, 1e-9)
	entry, err := e.Orch.LedgerEntry(ctx, fork)
	require.NoError(t, err)
	require.InDelta(t, 0.5-spentAt2, entry.Max, 1e-9, "the fork's own ledger entry, with what the chain had left at turn 2")

	done := e.Wait([]string{fork}, 2*time.Minute)[fork]
	require.Equal(t, thread.StatusCompleted, done.Status, "%+v", done.Error)
	require.Equal(t, "fork read: one\ntwo\n", done.Result, "the fork's workspace is the original's after turn 2, each append once")
	finished(t, e, fork)

	v := e.Spool("thread", "verify", fork)
	require.Equal(t, 0, v.Code, v.Stderr)

	// The fork's transcript: thread_forked first, then the carried turns
	// 1-2 as recorded (results included), the message, its own turns.
	evs := events(t, e, fork)
	require.Equal(t, transcript.TypeThreadForked, evs[0].Type)
	var tf transcript.ThreadForked
	require.NoError(t, evs[0].Decode(&tf))
	pt := forkPoint(t, e, id, 2)
	require.Equal(t, transcript.ThreadForked{ForkedFrom: id, ForkTurn: 2, SourceSegment: pt.Segment, SourceChainHash: pt.ChainHash,
		ReconstructedTurns: 2, Message: "read the log instead"}, tf)
	msgs, err := transcript.Reconstruct(evs)
	require.NoError(t, err)
	origMsgs, err := transcript.Reconstruct(origEvents)
	require.NoError(t, err)
	require.Equal(t, origMsgs[:5], msgs[:5], "prompt, turn 1 call and result, turn 2 call and result")
	require.Equal(t, thread.Message{Role: thread.RoleUser, Content: "read the log instead"}, msgs[5])
	var writes, starts []string
	for _, p := range payloads[transcript.ToolCallStart](t, evs, transcript.TypeToolCallStart) {
		starts = append(starts, p.Tool)
		if p.Tool == tools.FSWriteID {
			writes = append(writes, string(p.Input))
		}
	}
	require.Equal(t, []string{tools.FSReadID}, starts, "the fork ran only its own call: no carried tool ran again")
	require.Empty(t, writes)

	// The original is unchanged: its registry record, its transcript and
	// its workspace (each append once), and it still verifies.
	after, err := e.Orch.Record(ctx, id)
	require.NoError(t, err)
	require.Equal(t, before.Transcript, after.Transcript)
	require.Equal(t, before.Version, after.Version)
	require.Equal(t, origEvents, events(t, e, id))
	data, err := e.Store.Get(ctx, blobkey.WorkspaceFile(after.WorkspaceID(), "log.txt"))
	require.NoError(t, err)
	require.Equal(t, "one\ntwo\nthree\n", string(data))
	require.Equal(t, 0, e.Spool("thread", "verify", id).Code)

	// tree and chain show the fork.
	node := spoolJSON[orchestrator.TreeNode](t, e, "thread", "tree", id, "--json")
	require.Len(t, node.Forks, 1)
	require.Equal(t, fork, node.Forks[0].ThreadID)
	require.Equal(t, id, node.Forks[0].ForkedFrom)
	require.Equal(t, 2, node.Forks[0].ForkTurn)
	txt := e.Spool("thread", "tree", id)
	require.Contains(t, txt.Stdout, fork+"  completed")
	require.Contains(t, txt.Stdout, "fork of "+id+" at turn 2")
	chain := spoolJSON[orchestrator.Chain](t, e, "thread", "chain", id, "--json")
	require.Len(t, chain.Forks, 1)
	require.Equal(t, fork, chain.Forks[0].ThreadID)

	// A turn the thread does not have is bad usage.
	bad := e.Spool("thread", "fork", id, "--at-turn", "5")
	require.Equal(t, 2, bad.Code, bad.Stderr)
	require.Contains(t, bad.Stderr, "recorded 4 model turns")

	// A tampered transcript is not forked.
	other := runSteps(t, e).ThreadID
	key := blobkey.Segment(other, 1)
	seg, err := e.Store.Get(ctx, key)
	require.NoError(t, err)
	edited := strings.Replace(string(seg), `one\n`, `uno\n`, 1)
	require.NotEqual(t, string(seg), edited)
	require.NoError(t, e.Store.Put(ctx, key, []byte(edited)))
	ref := e.Spool("thread", "fork", other, "--at-turn", "2", "--message", "x")
	require.Equal(t, 1, ref.Code, "stdout:\n%s\nstderr:\n%s", ref.Stdout, ref.Stderr)
	require.Contains(t, ref.Stderr, key)
	forks, err := e.Orch.Housekeeper().Forks(ctx, other)
	require.NoError(t, err)
	require.Empty(t, forks, "nothing was started")
}

func forkPoint(t *testing.T, e *spooltest.Env, id string, turn int) transcript.ForkPoint {
	t.Helper()
	pt, err := readTranscript(t, e, id).ForkAt(turn)
	require.NoError(t, err)
	return pt
}

// replayJSON runs `spool thread replay ID ARGS --json`, requires its exit
// code, and decodes its report.
func replayJSON(t *testing.T, e *spooltest.Env, code int, id string, args ...string) (replayReport, spooltest.Result) {
	t.Helper()
	res := e.Spool(append(append([]string{"thread", "replay", id}, args...), "--json")...)
	require.Equal(t, code, res.Code, "stdout:\n%s\nstderr:\n%s", res.Stdout, res.Stderr)
	var rep replayReport
	res.JSON(t, &rep)
	return rep, res
}

type replayReport struct {
	Match           bool   `json:"match"`
	ThreadID        string `json:"thread_id"`
	Threads         int    `json:"threads"`
	Turns           int    `json:"turns"`
	RecordedThreads int    `json:"recorded_threads"`
	RecordedTurns   int    `json:"recorded_turns"`
	ResumedThreads  int    `json:"resumed_threads"`
	Status          string `json:"status"`
	Divergence      *struct {
		ThreadID string `json:"thread_id"`
		Turn     int    `json:"turn"`
		Kind     string `json:"kind"`
		Call     int    `json:"call"`
		Path     string `json:"path"`
		Recorded string `json:"recorded"`
		Replayed string `json:"replayed"`
	} `json:"divergence"`
}

// TestExportAndReplay: a thread exported as a script and replayed against
// it matches (exit 0); replayed against a script that changes turn 2's
// tool input it does not (exit 1, naming turn 2 and the input); a tree
// with spawns and waits replays with its children.
func TestExportAndReplay(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, historyProject(), "4")
	id := runSteps(t, e).ThreadID

	ex := e.Spool("thread", "export-script", id)
	require.Equal(t, 0, ex.Code, ex.Stderr)
	require.Contains(t, ex.Stdout, "h/steps:")
	require.Contains(t, ex.Stdout, "rye/file-system/fs_write")
	require.Equal(t, 4, strings.Count(ex.Stdout, "usage:"), "one entry per recorded model turn:\n%s", ex.Stdout)

	rep, _ := replayJSON(t, e, 0, id)
	require.True(t, rep.Match)
	require.Equal(t, 4, rep.Turns)
	require.Equal(t, "completed", rep.Status)

	// The exported script runs as a fixture too, and replays alike.
	changed := strings.Replace(ex.Stdout, "  two\n", "  TWO\n", 1)
	require.NotEqual(t, ex.Stdout, changed, "the script holds turn 2's input:\n%s", ex.Stdout)
	require.NoError(t, os.WriteFile(filepath.Join(e.Project, "scripts/exported.yaml"), []byte(ex.Stdout), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(e.Project, "scripts/changed.yaml"), []byte(changed), 0o644))
	same := e.Spool("thread", "replay", id, "--model", "script:scripts/exported.yaml")
	require.Equal(t, 0, same.Code, "stdout:\n%s\nstderr:\n%s", same.Stdout, same.Stderr)
	require.Contains(t, same.Stdout, "4 of 4 turns matched")

	rep, diff := replayJSON(t, e, 1, id, "--model", "script:scripts/changed.yaml")
	require.False(t, rep.Match)
	require.NotNil(t, rep.Divergence)
	require.Equal(t, id, rep.Divergence.ThreadID)
	require.Equal(t, 2, rep.Divergence.Turn)
	require.Equal(t, "input", rep.Divergence.Kind)
	require.Equal(t, 1, rep.Divergence.Call)
	require.Equal(t, ".content", rep.Divergence.Path)
	require.Equal(t, `"two\n"`, rep.Divergence.Recorded)
	require.Equal(t, `"TWO\n"`, rep.Divergence.Replayed)
	require.Contains(t, diff.Stderr, "turn 2 of "+id)
	require.Contains(t, diff.Stderr, "the input differs at .content")

	t.Run("a resume is not compared, and the summary says so", func(t *testing.T) {
		res := e.Spool("thread", "resume", id, "--message", "one more thing")
		require.Equal(t, 0, res.Code, res.Stderr)
		end := e.Wait([]string{id}, time.Minute)[id]
		t.Logf("the resumed thread %s ended %s", end.ThreadID, end.Status)
		rep, _ := replayJSON(t, e, 0, id)
		require.True(t, rep.Match)
		require.Equal(t, 1, rep.ResumedThreads)
		require.Equal(t, 2, rep.RecordedThreads)
		text := e.Spool("thread", "replay", id)
		require.Equal(t, 0, text.Code, text.Stderr)
		require.Contains(t, text.Stdout, "1 of 1 thread, 4 of 4 turns matched (not compared, after a resume: 1 thread, ")
	})

	t.Run("spawns and waits", func(t *testing.T) {
		rec := runCompleted(t, e, "h/boss", "--model", "script:scripts/tree.yaml")
		kids := children(t, e, rec.ThreadID)
		require.Len(t, kids, 3)
		finished(t, e, rec.ThreadID)
		for _, k := range kids {
			finished(t, e, k.ThreadID)
		}

		ex := e.Spool("thread", "export-script", rec.ThreadID)
		require.Equal(t, 0, ex.Code, ex.Stderr)
		require.Contains(t, ex.Stdout, "h/kid:", "the children's directive is exported too")
		require.Contains(t, ex.Stdout, "{{index .children 0}}", "the waited-on children are named by their place, not their recorded ids")
		require.Equal(t, 4+3*3, strings.Count(ex.Stdout, "usage:"), ex.Stdout)

		rep, _ := replayJSON(t, e, 0, rec.ThreadID)
		require.True(t, rep.Match)
		require.Equal(t, 4, rep.Threads, "the boss and its three children")
		require.Equal(t, 4, rep.RecordedThreads)
		require.Equal(t, 13, rep.Turns)

		// As a fixture the export runs where ids are new: the same tree.
		require.NoError(t, os.WriteFile(filepath.Join(e.Project, "scripts/boss.yaml"), []byte(ex.Stdout), 0o644))
		again := runCompleted(t, e, "h/boss", "--model", "script:scripts/boss.yaml")
		require.Equal(t, rec.Cost.Turns, again.Cost.Turns)
		var kidsAgain []*registry.Record
		require.Eventually(t, func() bool {
			var err error
			kidsAgain, err = e.Orch.Children(t.Context(), again.ThreadID)
			return err == nil && len(kidsAgain) == 3
		}, time.Minute, 50*time.Millisecond)
		for _, k := range kidsAgain {
			b, _ := json.Marshal(k.Outputs)
			require.Contains(t, string(b), again.ThreadID, "each child wrote its own parent's id: %s", b)
		}
	})
}

package e2e

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/registry"
)

// fanProject is a root that starts eight children at once and waits for
// them (script "fan").
func fanProject() map[string]string {
	return map[string]string{
		".ai/directives/f/root.md":  directive("root", `turns="6" spend="0.5" spawns="10"`, spawnPerms, `<success>done</success>`),
		".ai/directives/f/leaf.md":  directiveWithInputs("leaf", `turns="6" spend="0.5"`, fsPerms, `<input name="n" type="integer" required="true">n</input>`),
		".ai/directives/f/quick.md": directive("quick", `turns="2" spend="0.5"`, fsPerms, `<success>done</success>`),
		"scripts/fan.yaml":          script("fan"),
	}
}

// writeFiles writes files (path → content) into dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for path, content := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, path)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, path), []byte(content), 0o644))
	}
}

// TestEmbeddedRunsItsOwnTree: an --embedded run on a data dir where an
// interrupted run left a fan-out unfinished runs its own thread only,
// says what it leaves and why, and leaves it untouched (not a turn of it);
// `spool dev` then finishes what was left.
func TestEmbeddedRunsItsOwnTree(t *testing.T) {
	t.Parallel()
	s := newOrphanSetup(t)
	writeFiles(t, s.project, fanProject())
	model := []string{"--model", "script:scripts/fan.yaml"}

	// A fan-out interrupted once its children are queued, one of them
	// running: they stay in the data dir.
	fan := s.command(context.Background(), append([]string{"thread", "run", "f/root", "--embedded", "--wait", "--follow", "--concurrency", "1"}, model...)...)
	var log syncBuffer
	fan.Stdout, fan.Stderr = &log, &log
	require.NoError(t, fan.Start())
	require.Eventually(t, func() bool { return strings.Contains(log.String(), "] waiting ") }, time.Minute, 20*time.Millisecond, "%s", &log)
	time.Sleep(500 * time.Millisecond) // a child mid-turn, the others queued
	require.NoError(t, fan.Process.Signal(syscall.SIGINT))
	_ = fan.Wait()
	m := regexp.MustCompile(`interrupted: thread (f/root-\S+) `).FindStringSubmatch(log.String())
	require.NotNil(t, m, log.String())
	root := m[1]
	left := func() map[string]registry.Record {
		code, out, errs := s.spool("thread", "list", "--json")
		require.Equal(t, 0, code, errs)
		var page struct{ Threads []registry.Record }
		require.NoError(t, json.Unmarshal([]byte(out), &page), out)
		recs := page.Threads
		open := map[string]registry.Record{}
		for _, r := range recs {
			if !r.Status.Terminal() {
				open[r.ThreadID] = r
			}
		}
		return open
	}
	before := left()
	require.Contains(t, before, root)
	require.Greater(t, len(before), 2, "children were left unfinished")

	code, out, errs := s.spool(append([]string{"thread", "run", "f/quick", "--embedded", "--wait", "--json"}, model...)...)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, `"status": "completed"`)
	require.Contains(t, errs, "spool: this run runs its own thread's tree only: "+
		strconv.Itoa(len(before))+" unfinished threads of earlier runs in "+filepath.Join(s.project, ".spool")+" wait for `spool dev` there\n")
	after := left()
	for id, r := range before {
		require.Contains(t, after, id, "the run finished %s, which it was not asked to run", id)
		require.Equal(t, r.Cost.Turns, after[id].Cost.Turns, "the run ran a turn of %s", id)
	}

	// What was left resumes on the dev, handed back tasks and all.
	dev, exited := s.startDev(io.Pipe())
	defer func() { _ = dev.Process.Signal(syscall.SIGTERM); <-exited }()
	code, out, errs = s.spool("thread", "wait", root, "--timeout", "2m", "--json")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, `"status": "completed"`)
}

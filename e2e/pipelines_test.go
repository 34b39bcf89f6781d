package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/thread"
)

// pipelinesEnv is the project of testdata/pipelines: two graphs in the
// reference system's form and placement (.ai/tools/pipelines/*.yaml,
// tool_type: graph) that call rye/bash.
func pipelinesEnv(t *testing.T) *spooltest.Env {
	e := spooltest.New(t, spooltest.Options{})
	require.NoError(t, os.CopyFS(e.Project, os.DirFS(filepath.Join("testdata", "pipelines"))))
	return e
}

// TestReferencePipelines: the built-in rye/bash runs in the run tree's
// workspace: what it writes, child threads read with the file tools and
// later steps read with rye/bash; a project tool runs there too (it
// counts the children's files and writes the count for the next step); a worker not started with
// --allow-shell refuses it (shell_not_allowed), and graph validate warns
// that it needs such workers.
func TestReferencePipelines(t *testing.T) {
	t.Parallel()
	t.Run("with --allow-shell", func(t *testing.T) {
		t.Parallel()
		e := pipelinesEnv(t)
		e.StartWorker("--concurrency", "4", "--allow-shell")
		rec, res := runGraph(t, e, "pipelines/notes", "--inputs-json", `{"topics": ["alpha", "beta"]}`)
		require.Equal(t, 0, res.Code, res.Stderr)
		require.Equal(t, thread.StatusCompleted, rec.Status)
		require.Equal(t, "alpha.txt\nbeta.txt\n", rec.Outputs["listing"], "bash wrote the topic files")
		digest, _ := rec.Outputs["digest"].(string)
		require.Contains(t, digest, "summary of alpha: read ", "a child read bash's file and wrote a summary; bash read it back")
		require.Contains(t, digest, "summary of beta: read ")
		require.Equal(t, 2, strings.Count(digest, "\n"), digest)
		require.Equal(t, float64(2), rec.Outputs["tallied"], "a project tool read the children's files in the workspace")
		require.Equal(t, "2 summaries\n", rec.Outputs["counted"], "and the file it wrote was there for the next step")

		rec, res = runGraph(t, e, "pipelines/disk")
		require.Equal(t, 0, res.Code, res.Stderr)
		require.Equal(t, "1", rec.Outputs["entries"])
		require.Equal(t, "start\ntidy\n", rec.Outputs["log"], "a later step read the file an earlier one wrote")

		v := e.Spool("graph", "validate", "pipelines/notes")
		require.Equal(t, 0, v.Code, v.Stdout+v.Stderr)
		require.Contains(t, v.Stdout, "warning: node prepare: action.tool: rye/bash runs only on workers started with --allow-shell")
	})
	t.Run("without", func(t *testing.T) {
		t.Parallel()
		e := pipelinesEnv(t)
		e.StartWorker("--concurrency", "2")
		rec, res := runGraph(t, e, "pipelines/disk")
		require.Equal(t, 0, res.Code, "on_error continue: %s", res.Stderr)
		require.Equal(t, 2, rec.SuppressedErrors, "each rye/bash step failed (measure, then tidy)")
		show := e.Spool("graph", "show", rec.ThreadID, "--json")
		require.Contains(t, show.Stdout, "shell_not_allowed")
	})
}

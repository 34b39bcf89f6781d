package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
)

// TestTypeScriptClient builds the TypeScript client (clients/typescript:
// tsc), checks its generated types current with the OpenAPI document
// (openapi-typescript made again) and runs its tests with node's test
// runner against a real `spool api`, Redis and worker: the same cases as
// TestPythonClient, deltas included. Its dev dependencies are installed with npm once into
// the test cache (testenv.NodePackages). Without node and npm it skips, or
// fails under SPOOL_TEST_REQUIRE_REAL=1.
func TestTypeScriptClient(t *testing.T) {
	t.Parallel()
	root := tsClientCopy(t)
	api := clientAPI(t)
	out, err := runClient(t, filepath.Join(root, "clients", "typescript"), api.base, "npm", "test", "--silent")
	if err != nil {
		t.Fatalf("the TypeScript client's tests failed: %v\n%s", err, out)
	}
	t.Logf("npm test:\n%s", out)
}

// TestClientExamples runs the examples a user starts from,
// examples/clients/review.py and review.mjs, on the example project
// through a real `spool api`: each starts demo/review, prints its events
// and its children's words (as deltas, or whole when written before it
// came), and ends with the graph's outputs.
func TestClientExamples(t *testing.T) {
	t.Parallel()
	py := python(t)
	root := tsClientCopy(t)
	e := spooltest.New(t, spooltest.Options{})
	exampleProject(t, e.Project)
	e.StartWorker("--concurrency", "4")
	api := startAPI(t, e)

	examples, err := filepath.Abs("../examples/clients")
	require.NoError(t, err)
	out, err := runClient(t, examples, api.base, py, "review.py", "queues", "leases")
	require.NoError(t, err, "%s", out)
	for _, want := range []string{"run demo/review-", "graph_started", "foreach_completed", "ended completed", "status  completed", "'reviewed': 2", "'ok': True",
		"Reviewing queues: I write", "Reviewing leases: I write"} {
		require.Contains(t, out, want)
	}

	out, err = runClient(t, filepath.Join(root, "clients", "typescript"), api.base, "npm", "run", "build", "--silent")
	require.NoError(t, err, "%s", out)
	require.NoError(t, os.MkdirAll(filepath.Join(root, "examples", "clients"), 0o755))
	cp(t, filepath.Join(examples, "review.mjs"), filepath.Join(root, "examples", "clients"))
	out, err = runClient(t, filepath.Join(root, "examples", "clients"), api.base, "node", "review.mjs", "queues", "leases", "budgets")
	require.NoError(t, err, "%s", out)
	for _, want := range []string{"run demo/review-", "ended completed", "status  completed", `"reviewed":3`, "Reviewing budgets: I write"} {
		require.Contains(t, out, want)
	}
}

// tsClientCopy copies the TypeScript client and the OpenAPI document into
// a temporary tree laid out as the checkout (its scripts read
// ../../api/openapi.json), its node_modules the installed dev
// dependencies, and returns the tree's root: the checkout gets no
// node_modules or dist.
func tsClientCopy(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../clients/typescript")
	require.NoError(t, err)
	modules := testenv.NodePackages(t, "ts-client", filepath.Join(dir, "package.json"))
	root := t.TempDir()
	work := filepath.Join(root, "clients", "typescript")
	for _, d := range []string{work, filepath.Join(root, "api")} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	cp(t, filepath.Join(dir, "..", "..", "api", "openapi.json"), filepath.Join(root, "api"))
	for _, f := range []string{"package.json", "tsconfig.json", "src", "test", "scripts"} {
		cp(t, filepath.Join(dir, f), work)
	}
	require.NoError(t, os.Symlink(modules, filepath.Join(work, "node_modules")))
	return root
}

// cp copies from (a file or a tree) into the directory to.
func cp(t *testing.T, from, to string) {
	t.Helper()
	out, err := exec.Command("cp", "-r", from, to).CombinedOutput()
	require.NoError(t, err, "copy %s: %s", from, out)
}

// runClient runs a client's command in dir against the API at base.
func runClient(t *testing.T, dir, base, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SPOOL_API_URL="+base, "SPOOL_TEST_MODEL=script:scripts/api.yaml", "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

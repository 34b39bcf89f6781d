package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
)

// TestTypeScriptClient builds the TypeScript client (clients/typescript:
// tsc), checks its generated types current with the OpenAPI document
// (openapi-typescript made again) and runs its tests with node's test
// runner against a real `spool api`, Redis and worker: the same cases as
// TestPythonClient. Its dev dependencies are installed with npm once into
// the test cache (testenv.NodePackages). Without node and npm it skips, or
// fails under SPOOL_TEST_REQUIRE_REAL=1.
func TestTypeScriptClient(t *testing.T) {
	t.Parallel()
	dir, err := filepath.Abs("../clients/typescript")
	if err != nil {
		t.Fatal(err)
	}
	modules := testenv.NodePackages(t, "ts-client", filepath.Join(dir, "package.json"))
	files := apiProject()
	for k, v := range graphProject() {
		files[k] = v
	}
	e := spooltest.New(t, spooltest.Options{Files: files})
	e.StartWorker("--concurrency", "4")
	api := startAPI(t, e)

	// A copy of the client beside the installed modules: the checkout
	// gets no node_modules or dist.
	// The layout is the checkout's (the scripts read ../../api/openapi.json).
	root := t.TempDir()
	work := filepath.Join(root, "clients", "typescript")
	for _, d := range []string{work, filepath.Join(root, "api")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copies := map[string]string{filepath.Join(dir, "..", "..", "api", "openapi.json"): filepath.Join(root, "api")}
	for _, f := range []string{"package.json", "tsconfig.json", "src", "test", "scripts"} {
		copies[filepath.Join(dir, f)] = work
	}
	for from, to := range copies {
		if out, err := exec.Command("cp", "-r", from, to).CombinedOutput(); err != nil {
			t.Fatalf("copy %s: %v\n%s", from, err, out)
		}
	}
	if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "test", "--silent")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "SPOOL_API_URL="+api.base, "SPOOL_TEST_MODEL=script:scripts/api.yaml")
	out, err := cmd.CombinedOutput()
	t.Logf("npm test:\n%s", out)
	if err != nil {
		t.Fatalf("the TypeScript client's tests failed: %v", err)
	}
}

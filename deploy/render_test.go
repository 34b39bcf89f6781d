package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKustomizeRender renders the base with kubectl's built-in kustomize
// (or a standalone kustomize), the way `kubectl apply -k` would, with the
// secret templates standing in for the real secrets, and runs every check on
// the rendered objects, the schemas included. With neither on PATH it skips, or fails under
// SPOOL_TEST_REQUIRE_REAL=1 (.ci/run installs kustomize where kubectl is
// missing).
func TestKustomizeRender(t *testing.T) {
	t.Parallel()
	render := []string{"kustomize", "build"}
	kubectl, err := exec.LookPath("kubectl")
	if err == nil {
		render = []string{kubectl, "kustomize"}
	} else if _, err := exec.LookPath("kustomize"); err != nil {
		require.NotEqual(t, "1", os.Getenv("SPOOL_TEST_REQUIRE_REAL"), "neither kubectl nor kustomize on PATH, and SPOOL_TEST_REQUIRE_REAL=1")
		t.Skip("neither kubectl nor kustomize on PATH")
	}
	dir := copyTree(t, k8sDir)
	for _, f := range []string{"signing.key", "signing.pub", "credentials.env"} {
		p := filepath.Join(dir, "secrets", f)
		data, err := os.ReadFile(p + ".example")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p, data, 0o600))
	}
	var stderr bytes.Buffer
	cmd := exec.Command(render[0], append(render[1:], dir)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s: %v: %s", strings.Join(render, " "), err, stderr.String())
	docs, err := parseDocs("rendered", out)
	require.NoError(t, err)
	rendered := &kbase{Dir: dir, Docs: docs, Secrets: map[string]map[string]bool{}}
	for _, d := range byKind(docs, "Secret") {
		keys := map[string]bool{}
		for k := range mapping(d.Obj, "data") {
			keys[k] = true
		}
		rendered.Secrets[d.name()] = keys
	}
	require.NotEmpty(t, rendered.Secrets["spool-secrets"], "rendered output has no spool-secrets Secret (generator name changed or hashed?)")
	requireNoProblems(t, checkSchemas(docs))
	requireNoProblems(t, checkWorkloads(rendered))
	requireNoProblems(t, checkGracePeriod(docs))
	requireNoProblems(t, checkKEDA(rendered))
	for _, d := range docs {
		if str(d.Obj, "metadata", "labels", "app.kubernetes.io/part-of") != "spool" {
			t.Errorf("%s lacks the app.kubernetes.io/part-of=spool label", d)
		}
	}
}

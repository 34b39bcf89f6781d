package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/spool-run/spool/internal/testing/testenv"
)

// TestScriptFileStaysInProject: a script path, relative or absolute, is
// accepted only when it resolves inside the project root with every
// symlink followed (the root reached through a symlink too).
func TestScriptFileStaysInProject(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	project := filepath.Join(base, "project")
	outside := filepath.Join(base, "secret.txt")
	testenv.WriteFile(t, outside, "root:x:0:0\n")
	testenv.WriteFile(t, filepath.Join(project, "scripts", "ok.yaml"), "directives: {}\n")
	mustSymlink(t, outside, filepath.Join(project, "scripts", "file-link.yaml"))
	mustSymlink(t, base, filepath.Join(project, "dir-link"))
	mustSymlink(t, filepath.Join(project, "scripts", "ok.yaml"), filepath.Join(project, "scripts", "inner-link.yaml"))
	viaLink := filepath.Join(base, "project-link")
	mustSymlink(t, project, viaLink)

	for _, c := range []struct {
		project, model string
		outside        bool
	}{
		{project, "script:scripts/ok.yaml", false},
		{project, "script:./scripts/../scripts/ok.yaml", false},
		{project, "script:" + filepath.Join(project, "scripts", "ok.yaml"), false},
		{project, "script:scripts/inner-link.yaml", false},
		{project, "script:scripts/missing.yaml", false}, // the read reports it
		{viaLink, "script:scripts/ok.yaml", false},
		{viaLink, "script:" + filepath.Join(project, "scripts", "ok.yaml"), false},
		{project, "script:/etc/passwd", true},
		{project, "script:" + outside, true},
		{project, "script:../secret.txt", true},
		{project, "script:scripts/../../secret.txt", true},
		{project, "script:../../../../../../etc/passwd", true},
		{project, "script:scripts/file-link.yaml", true},
		{project, "script:dir-link/secret.txt", true},
		{project, "script:dir-link/project/scripts/ok.yaml", false}, // back inside
		{project, "script:../missing.yaml", true},
		{viaLink, "script:../secret.txt", true},
	} {
		file, ok, err := ScriptFile(c.project, c.model)
		if !ok {
			t.Errorf("%s: not seen as a script", c.model)
		}
		if got := errors.Is(err, ErrScriptOutside); got != c.outside {
			t.Errorf("ScriptFile(%s, %s) = %q, %v; want outside=%v", c.project, c.model, file, err, c.outside)
		}
	}
	if _, ok, err := ScriptFile(project, "claude-sonnet-4-5"); ok || err != nil {
		t.Errorf("a model id is not a script: %v %v", ok, err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

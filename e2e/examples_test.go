package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// exampleDirs are what a test takes of the example project: its .ai/ and
// its scripts, never a data dir (.spool) that running the examples left
// there, whose redis.url would lead the test to the user's Redis.
var exampleDirs = []string{".ai", "scripts"}

// copyProject copies exampleDirs of the project src into dst.
func copyProject(t *testing.T, src, dst string) {
	t.Helper()
	for _, dir := range exampleDirs {
		require.NoError(t, os.CopyFS(filepath.Join(dst, dir), os.DirFS(filepath.Join(src, dir))))
	}
}

// exampleProject copies the example project (examples/) into dst.
func exampleProject(t *testing.T, dst string) {
	t.Helper()
	copyProject(t, filepath.Join("..", "examples"), dst)
}

// TestExampleCopyLeavesTheDataDir: a copy of a project where `spool dev`
// runs has its .ai/ and scripts, and none of its data dir: no redis.url,
// no keys, no blobs.
func TestExampleCopyLeavesTheDataDir(t *testing.T) {
	t.Parallel()
	src, dst := t.TempDir(), t.TempDir()
	for path, content := range map[string]string{
		".ai/directives/demo/hello.md": "# hello",
		"scripts/demo.yaml":            "directives: {}",
		".spool/redis.url":             "redis://127.0.0.1:6379/0\npid 1\n",
		".spool/keys/signing.key":      "secret",
	} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(src, path)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(src, path), []byte(content), 0o600))
	}
	copyProject(t, src, dst)
	require.FileExists(t, filepath.Join(dst, ".ai/directives/demo/hello.md"))
	require.FileExists(t, filepath.Join(dst, "scripts/demo.yaml"))
	require.NoDirExists(t, filepath.Join(dst, ".spool"))
}

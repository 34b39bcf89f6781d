package testenv

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// WriteFile writes content to path, making the directories on the way;
// content that starts with "#!" is written executable, whatever the umask.
func WriteFile(t testing.TB, path, content string) {
	t.Helper()
	mode := fs.FileMode(0o644)
	if strings.HasPrefix(content, "#!") {
		mode = 0o755
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// WriteFiles writes files (a slash-separated path relative to dir →
// content) under dir with WriteFile.
func WriteFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		WriteFile(t, filepath.Join(dir, filepath.FromSlash(rel)), content)
	}
}

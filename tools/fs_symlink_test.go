package tools

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
)

// TestFSToolsRefuseSymlinks: a symlink planted in a workspace on the local
// store (at the workspace itself, a directory in it, or a file) makes the
// file tools answer with an error result; nothing outside the store is
// read, listed or changed.
func TestFSToolsRefuseSymlinks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, link, target, path string }{
		{"workspaces dir", "workspaces", "", "notes/secret"},
		{"workspace", "workspaces/tree-1/files", "dir", "secret"},
		{"directory in it", "workspaces/tree-1/files/notes", "dir", "notes/secret"},
		{"file", "workspaces/tree-1/files/pw.txt", "dir/secret", "pw.txt"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			outside := filepath.Join(base, "outside")
			secrets := []string{"dir/secret", "dir/notes/secret", "tree-1/files/notes/secret"}
			for _, p := range secrets {
				require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(outside, p)), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(outside, p), []byte("SECRET\n"), 0o644))
			}
			store, err := blobstore.NewLocal(filepath.Join(base, "store"))
			require.NoError(t, err)
			s := setupFS(t, FSConfig{})
			env := &Env{ThreadID: "th-1", TreeID: "tree-1", Store: store}
			link := filepath.Join(store.Root(), filepath.FromSlash(c.link))
			require.NoError(t, os.MkdirAll(filepath.Dir(link), 0o755))
			require.NoError(t, os.Symlink(filepath.Join(outside, c.target), link))

			r := s.run(t, env, FSReadID, map[string]any{"path": c.path})
			require.True(t, r.IsError, r.Output)
			require.Contains(t, r.Output, "symlink")
			require.NotContains(t, r.Output, "SECRET")

			for _, mode := range []string{"append", "create", "overwrite"} {
				r = s.run(t, env, FSWriteID, map[string]any{"path": c.path, "content": "PWNED", "mode": mode})
				if c.name == "file" && mode == "overwrite" {
					continue // replaces the link itself (checked below)
				}
				require.True(t, r.IsError, "%s: %s", mode, r.Output)
				require.Contains(t, r.Output, "symlink")
			}

			if c.name == "file" {
				r = s.run(t, env, FSWriteID, map[string]any{"path": c.path, "content": "mine"})
				require.False(t, r.IsError, r.Output)
				r = s.run(t, env, FSReadID, map[string]any{"path": c.path})
				require.Equal(t, "mine", r.Output)
			}

			r = s.run(t, env, FSListID, map[string]any{"path": filepath.Dir(c.path), "recursive": true})
			require.NotContains(t, r.Output, "secret")

			for _, p := range secrets {
				b, err := os.ReadFile(filepath.Join(outside, p))
				require.NoError(t, err)
				require.Equal(t, "SECRET\n", string(b), "%s outside the store was changed", p)
			}
		})
	}
}

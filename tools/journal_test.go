package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
)

// crashed is the panic of a fault point in TestWriteBackIsOneCommit.
type crashed struct{}

// TestWriteBackIsOneCommit: a command's write-back of several files cut
// off at each crash point (before the journal: nothing; after it, with
// no file or one file stored) is all or nothing as the next fs_* call or
// command sees it: the first thing either does is roll the journal
// forward, and then every file is there with what the command wrote, and
// no journal or staged content is left. A write-back with one file it
// cannot store stores none. (Not parallel: it sets the package's Fault.)
func TestWriteBackIsOneCommit(t *testing.T) {
	ctx := context.Background()
	sh := Shell(ShellConfig{Allowed: true})
	fsys := setupFS(t, FSConfig{})
	t.Cleanup(func() { Fault = func(string) {} })
	for i, c := range []struct {
		point  string
		stored int // files in the workspace right after the crash
		first  string
	}{{"workspace:journaled", 0, "fs_read"}, {"workspace:after_file", 1, "fs_read"}, {"workspace:after_file", 1, "rye/bash"}} {
		t.Run(fmt.Sprintf("%s then %s", c.point, c.first), func(t *testing.T) {
			store := blobstore.NewMemory()
			tree := fmt.Sprintf("tree-%d", i)
			env := &Env{ThreadID: "th-1", TreeID: tree, Store: store}
			Fault = func(p string) {
				if p == c.point {
					panic(crashed{})
				}
			}
			func() {
				defer func() { require.Equal(t, crashed{}, recover(), "the crash point was reached") }()
				_, _ = sh.Run(ctx, env, json.RawMessage(`{"command": "echo 1 > a.txt; echo 2 > b.txt; mkdir d; echo 3 > d/c.txt"}`))
			}()
			Fault = func(string) {}
			files, err := store.List(ctx, blobkey.WorkspaceFiles(tree))
			require.NoError(t, err)
			require.Len(t, files, c.stored, "what the crash left in place")
			journals, err := store.List(ctx, blobkey.WorkspaceJournals(tree))
			require.NoError(t, err)
			require.Len(t, journals, 1, "the journal is durable")

			if c.first == "fs_read" {
				r := fsys.run(t, env, FSReadID, map[string]any{"path": "d/c.txt"})
				require.False(t, r.IsError, r.Output)
				require.Contains(t, r.Output, "3")
			} else {
				res, err := sh.Run(ctx, env, json.RawMessage(`{"command": "cat a.txt b.txt d/c.txt"}`))
				require.NoError(t, err)
				require.Contains(t, res.Output, `"stdout":"1\n2\n3\n"`)
			}
			for p, want := range map[string]string{"a.txt": "1\n", "b.txt": "2\n", "d/c.txt": "3\n"} {
				b, err := store.Get(ctx, blobkey.WorkspaceFile(tree, p))
				require.NoError(t, err, p)
				require.Equal(t, want, string(b), p)
			}
			for _, prefix := range []string{blobkey.WorkspaceJournals(tree), blobkey.Workspace(tree) + "staged/"} {
				left, err := store.List(ctx, prefix)
				require.NoError(t, err)
				require.Empty(t, left, prefix)
			}
		})
	}

	t.Run("one file it cannot store", func(t *testing.T) {
		store := blobstore.NewMemory()
		env := &Env{ThreadID: "th-1", TreeID: "tree-big", Store: store}
		small := Shell(ShellConfig{Allowed: true, FS: FSConfig{MaxFileBytes: 100}})
		res, err := small.Run(ctx, env, json.RawMessage(`{"command": "echo a > a.txt; head -c 500 /dev/zero | tr '\\0' x > big.txt; echo z > z.txt"}`))
		require.NoError(t, err)
		require.True(t, res.IsError)
		require.True(t, strings.Contains(res.Output, "nothing the command wrote was stored"), res.Output)
		files, err := store.List(ctx, blobkey.Workspace("tree-big"))
		require.NoError(t, err)
		require.Empty(t, files)
	})
}

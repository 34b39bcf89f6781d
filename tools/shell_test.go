package tools

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
)

// TestShell: rye/bash runs in a copy of the tree's workspace and stores
// back what it wrote or changed, nothing else; a non-zero exit and a
// timeout are error results; a worker without --allow-shell refuses.
func TestShell(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := blobstore.NewMemory()
	env := &Env{ThreadID: "th-1", TreeID: "tree-1", Store: store}
	require.NoError(t, store.Put(ctx, blobkey.WorkspaceFile("tree-1", "in/a.txt"), []byte("alpha\n")))
	require.NoError(t, store.Put(ctx, blobkey.WorkspaceFile("tree-1", "keep.txt"), []byte("same\n")))
	sh := Shell(ShellConfig{Allowed: true})
	call := func(input string) (Result, map[string]any) {
		t.Helper()
		res, err := sh.Run(ctx, env, json.RawMessage(input))
		require.NoError(t, err)
		var out map[string]any
		_ = json.Unmarshal([]byte(res.Output), &out)
		return res, out
	}

	res, out := call(`{"command": "cat in/a.txt; mkdir -p out && tr a-z A-Z < in/a.txt > out/b.txt; echo same > keep.txt; echo oops >&2"}`)
	require.False(t, res.IsError, res.Output)
	require.Equal(t, "alpha\n", out["stdout"])
	require.Equal(t, "oops\n", out["stderr"])
	require.Equal(t, float64(0), out["exit_code"])
	require.Equal(t, []any{"out/b.txt"}, out["written"], "an unchanged file is not written back")
	b, err := store.Get(ctx, blobkey.WorkspaceFile("tree-1", "out/b.txt"))
	require.NoError(t, err)
	require.Equal(t, "ALPHA\n", string(b))

	res, out = call(`{"command": "cat out/b.txt; exit 3"}`)
	require.True(t, res.IsError, "a non-zero exit is an error")
	require.Equal(t, float64(3), out["exit_code"])
	require.Equal(t, "ALPHA\n", out["stdout"], "what an earlier call wrote is there")

	res, _ = call(`{"command": "sleep 5", "timeout_seconds": 0.2}`)
	require.True(t, res.IsError)
	require.Contains(t, res.Output, "timed out after 200ms")

	env2 := &Env{ThreadID: "th-2", TreeID: "tree-2", Store: store}
	res, err = Shell(ShellConfig{}).Run(ctx, env2, json.RawMessage(`{"command": "touch x"}`))
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.Contains(t, res.Output, "shell_not_allowed")
	_, err = store.Get(ctx, blobkey.WorkspaceFile("tree-2", "x"))
	require.ErrorIs(t, err, blobstore.ErrNotFound)
	require.Equal(t, ShellID, sh.Def().Name)
}

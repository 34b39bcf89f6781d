package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/thread"
)

// echoTool returns its input's "text" field.
type echoTool struct{ id string }

func (e echoTool) Def() thread.ToolDef {
	return thread.ToolDef{Name: e.id, Description: "echo", InputSchema: json.RawMessage(defaultSchema)}
}

func (e echoTool) Run(ctx context.Context, env *Env, input json.RawMessage) (Result, error) {
	var in struct{ Text string }
	_ = json.Unmarshal(input, &in)
	return Result{Output: in.Text}, nil
}

func TestRegistrySpellings(t *testing.T) {
	t.Parallel()
	reg, err := NewRegistry(Builtins(FSConfig{})...)
	require.NoError(t, err)
	for _, name := range []string{"rye/file-system/fs_write", "rye.file-system.fs_write", "rye__file-system__fs_write", WireName(FSWriteID)} {
		tool, ok := reg.Lookup(name)
		require.True(t, ok, name)
		require.Equal(t, FSWriteID, tool.Def().Name)
	}
	for _, name := range []string{"fs_write", "rye/file-system", "rye/file-system/fs_write/", "RYE/file-system/fs_write"} {
		_, ok := reg.Lookup(name)
		require.False(t, ok, name)
	}
	require.Equal(t, []string{FSListID, FSReadID, FSWriteID}, reg.IDs())
}

func TestRegistryRegisterErrors(t *testing.T) {
	t.Parallel()
	reg, err := NewRegistry(echoTool{"a/b"})
	require.NoError(t, err)
	tests := []struct {
		id   string
		want error
	}{
		{id: "a/b", want: ErrDuplicate},
		{id: "a__b", want: ErrDuplicate}, // the wire name of a/b
		{id: "", want: ErrBadID},
		{id: "a.b", want: ErrBadID},
		{id: "a//b", want: ErrBadID},
		{id: "/a", want: ErrBadID},
		{id: "a b", want: ErrBadID},
	}
	for _, tt := range tests {
		require.ErrorIs(t, reg.Register(echoTool{tt.id}), tt.want, tt.id)
	}
	require.Equal(t, []string{"a/b"}, reg.IDs())
}

func TestWireName(t *testing.T) {
	t.Parallel()
	require.Equal(t, "rye__agent__threads__directive_return", WireName("rye/agent/threads/directive_return"))
	long := strings.Repeat("segment/", 12) + "tool"
	w := WireName(long)
	require.Len(t, w, 64)
	require.NotEqual(t, w, WireName(long+"2"))
	reg, err := NewRegistry(echoTool{long})
	require.NoError(t, err)
	_, ok := reg.Lookup(w)
	require.True(t, ok)
}

func TestRegistryDefs(t *testing.T) {
	t.Parallel()
	reg, err := NewRegistry(append(Builtins(FSConfig{}), echoTool{"acme/echo"})...)
	require.NoError(t, err)
	defs := reg.Defs(func(id string) bool { return strings.HasPrefix(id, "rye/") })
	var names []string
	for _, d := range defs {
		names = append(names, d.Name)
		var schema map[string]any
		require.NoError(t, json.Unmarshal(d.InputSchema, &schema), d.Name)
		require.Equal(t, "object", schema["type"], d.Name)
		require.NotEmpty(t, d.Description)
	}
	require.Equal(t, []string{FSListID, FSReadID, FSWriteID}, names)
	require.Len(t, reg.Defs(nil), 4)
}

func TestRegistryCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := blobstore.NewMemory()
	reg, err := NewRegistry(echoTool{"acme/echo"})
	require.NoError(t, err)
	env := &Env{ThreadID: "th-1", TreeID: "th-1", Store: store}

	r, err := reg.Call(ctx, env, thread.ToolCall{ID: "c1", Name: "acme/nope"}, 0)
	require.NoError(t, err)
	require.True(t, r.IsError)
	require.Contains(t, r.Output, `unknown tool "acme/nope"`)

	r, err = reg.Call(ctx, env, thread.ToolCall{ID: "c2", Name: "acme.echo", Input: json.RawMessage(`{"text":"hi"}`)}, 0)
	require.NoError(t, err)
	require.Equal(t, Result{Output: "hi"}, r)

	big := strings.Repeat("z", 2000)
	in, _ := json.Marshal(map[string]string{"text": big})
	r, err = reg.Call(ctx, env, thread.ToolCall{ID: "c3", Name: "acme__echo", Input: in}, 1000)
	require.NoError(t, err)
	require.Equal(t, "threads/th-1/artifacts/c3.txt", r.Artifact)
	require.LessOrEqual(t, len(r.Output), 1000)
	stored, err := store.Get(ctx, r.Artifact)
	require.NoError(t, err)
	require.Equal(t, big, string(stored))
}

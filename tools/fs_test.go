package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/thread"
)

type fsSetup struct {
	store *blobstore.Memory
	reg   *Registry
	env   *Env
}

func setupFS(t *testing.T, cfg FSConfig) fsSetup {
	t.Helper()
	reg, err := NewRegistry(Builtins(cfg)...)
	require.NoError(t, err)
	store := blobstore.NewMemory()
	return fsSetup{store: store, reg: reg, env: &Env{ThreadID: "th-1", TreeID: "tree-1", Store: store}}
}

// run calls a tool by id with input built from kv pairs.
func (s fsSetup) run(t *testing.T, env *Env, id string, in map[string]any) Result {
	t.Helper()
	tool, ok := s.reg.Lookup(id)
	require.True(t, ok, id)
	raw, err := json.Marshal(in)
	require.NoError(t, err)
	res, err := tool.Run(context.Background(), env, raw)
	require.NoError(t, err)
	return res
}

func TestFSWriteModes(t *testing.T) {
	t.Parallel()
	s := setupFS(t, FSConfig{})
	write := func(path, content, mode string) Result {
		in := map[string]any{"path": path, "content": content}
		if mode != "" {
			in["mode"] = mode
		}
		return s.run(t, s.env, FSWriteID, in)
	}
	read := func(path string) string {
		r := s.run(t, s.env, FSReadID, map[string]any{"path": path})
		require.False(t, r.IsError, r.Output)
		return r.Output
	}

	require.False(t, write("a.txt", "one\n", "").IsError) // default overwrite
	require.Equal(t, "one\n", read("a.txt"))
	require.False(t, write("a.txt", "two\n", "overwrite").IsError)
	require.Equal(t, "two\n", read("a.txt"))
	r := write("a.txt", "three\n", "append")
	require.False(t, r.IsError, r.Output)
	require.Contains(t, r.Output, "now 10 bytes")
	require.Equal(t, "two\nthree\n", read("a.txt"))
	require.False(t, write("new/b.txt", "x", "append").IsError) // append creates
	require.Equal(t, "x", read("new/b.txt"))

	r = write("a.txt", "nope", "create")
	require.True(t, r.IsError)
	require.Contains(t, r.Output, "already exists")
	require.Equal(t, "two\nthree\n", read("a.txt"))
	require.False(t, write("c.txt", "", "create").IsError) // empty content is fine
	require.Equal(t, "", read("c.txt"))

	r = write("d.txt", "x", "truncate")
	require.True(t, r.IsError)
	require.Contains(t, r.Output, `mode "truncate"`)
	r = s.run(t, s.env, FSWriteID, map[string]any{"path": "e.txt"})
	require.True(t, r.IsError)
	require.Contains(t, r.Output, "content is required")

	// Stored where the layout says, and no lease objects left behind.
	data, err := s.store.Get(context.Background(), "workspaces/tree-1/files/a.txt")
	require.NoError(t, err)
	require.Equal(t, "two\nthree\n", string(data))
	locks, err := s.store.List(context.Background(), "workspaces/tree-1/locks/")
	require.NoError(t, err)
	require.Empty(t, locks)
}

func TestFSMaxFileBytes(t *testing.T) {
	t.Parallel()
	s := setupFS(t, FSConfig{MaxFileBytes: 10})
	require.False(t, s.run(t, s.env, FSWriteID, map[string]any{"path": "a", "content": "123456"}).IsError)
	r := s.run(t, s.env, FSWriteID, map[string]any{"path": "a", "content": "123456", "mode": "append"})
	require.True(t, r.IsError)
	require.Contains(t, r.Output, "12 bytes")
	r = s.run(t, s.env, FSWriteID, map[string]any{"path": "b", "content": strings.Repeat("x", 11)})
	require.True(t, r.IsError)
}

func TestFSEscapingPaths(t *testing.T) {
	t.Parallel()
	s := setupFS(t, FSConfig{})
	for _, p := range []string{"../x", "/etc/passwd", "a/../../b", `a\b`, "", "a\x00b", ".", "../../workspaces/other/files/x"} {
		for _, id := range []string{FSWriteID, FSReadID} {
			r := s.run(t, s.env, id, map[string]any{"path": p, "content": "x"})
			require.True(t, r.IsError, "%s %q: %s", id, p, r.Output)
			require.Contains(t, r.Output, "bad workspace path", "%s %q", id, p)
		}
	}
	r := s.run(t, s.env, FSListID, map[string]any{"path": "../"})
	require.True(t, r.IsError, r.Output)
	infos, err := s.store.List(context.Background(), "")
	require.NoError(t, err)
	require.Empty(t, infos, "a refused write must store nothing")
}

func TestFSWorkspaceIsolation(t *testing.T) {
	t.Parallel()
	s := setupFS(t, FSConfig{})
	sibling := &Env{ThreadID: "th-2", ParentID: "th-1", TreeID: "tree-1", Store: s.store}
	other := &Env{ThreadID: "th-9", TreeID: "tree-2", Store: s.store}

	require.False(t, s.run(t, s.env, FSWriteID, map[string]any{"path": "shared.txt", "content": "from th-1"}).IsError)
	// Another thread of the same tree sees it (any worker: it is in the store).
	r := s.run(t, sibling, FSReadID, map[string]any{"path": "shared.txt"})
	require.False(t, r.IsError, r.Output)
	require.Equal(t, "from th-1", r.Output)
	// Another tree does not.
	r = s.run(t, other, FSReadID, map[string]any{"path": "shared.txt"})
	require.True(t, r.IsError)
	require.Contains(t, r.Output, "does not exist")
	r = s.run(t, other, FSListID, map[string]any{})
	require.Equal(t, "(no files in the workspace)", r.Output)
}

func TestFSReadMissingAndLines(t *testing.T) {
	t.Parallel()
	s := setupFS(t, FSConfig{})
	r := s.run(t, s.env, FSReadID, map[string]any{"path": "missing.txt"})
	require.True(t, r.IsError)
	require.Equal(t, "fs_read: missing.txt does not exist", r.Output)

	require.False(t, s.run(t, s.env, FSWriteID, map[string]any{"path": "l.txt", "content": "1\n2\n3\n4\n5\n"}).IsError)
	tests := []struct {
		offset, limit int
		want          string
		isErr         bool
	}{
		{offset: 1, limit: 0, want: "1\n2\n3\n4\n5\n"},
		{offset: 1, limit: 5, want: "1\n2\n3\n4\n5\n"},
		{offset: 2, limit: 2, want: "2\n3\n[lines 2-3 of 5; continue with offset 4]"},
		{offset: 4, limit: 0, want: "4\n5\n[lines 4-5 of 5]"},
		{offset: 0, limit: 1, want: "1\n[lines 1-1 of 5; continue with offset 2]"},
		{offset: 6, limit: 1, want: "fs_read: offset 6 is past the end of l.txt (5 lines)", isErr: true},
		{offset: -1, limit: 1, want: "fs_read: offset and limit must be positive", isErr: true},
	}
	for _, tt := range tests {
		r := s.run(t, s.env, FSReadID, map[string]any{"path": "l.txt", "offset": tt.offset, "limit": tt.limit})
		require.Equal(t, tt.isErr, r.IsError, "offset %d limit %d", tt.offset, tt.limit)
		require.Equal(t, tt.want, r.Output, "offset %d limit %d", tt.offset, tt.limit)
	}

	require.NoError(t, s.store.Put(context.Background(), blobkey.WorkspaceFile("tree-1", "bin"), []byte{0xff, 0xfe}))
	r = s.run(t, s.env, FSReadID, map[string]any{"path": "bin"})
	require.True(t, r.IsError)
	require.Contains(t, r.Output, "not UTF-8")
}

func TestFSReadArtifact(t *testing.T) {
	t.Parallel()
	s := setupFS(t, FSConfig{})
	key := blobkey.ToolResult("th-1", "call_1")
	require.NoError(t, s.store.Put(context.Background(), key, []byte("a\nb\nc\n")))
	r := s.run(t, s.env, FSReadID, map[string]any{"artifact": key, "offset": 2, "limit": 1})
	require.False(t, r.IsError, r.Output)
	require.Equal(t, "b\n[lines 2-2 of 3; continue with offset 3]", r.Output)

	for _, bad := range []string{
		blobkey.ToolResult("th-2", "call_1"),      // another thread's
		"threads/th-1/artifacts/../../th-2/x.txt", // climbing
		"threads/th-1/artifacts/sub/x.txt",
		"workspaces/tree-1/files/a",
	} {
		r := s.run(t, s.env, FSReadID, map[string]any{"artifact": bad})
		require.True(t, r.IsError, bad)
		require.Contains(t, r.Output, "not an artifact of this thread", bad)
	}
	r = s.run(t, s.env, FSReadID, map[string]any{"artifact": key, "path": "x"})
	require.True(t, r.IsError)
}

// TestFSReadArtifactOfSlashedDirective: a thread of a directive whose name
// has a slash ("demo/hello-<epoch>-<random>") reads back its cut results,
// both from the key the worker writes (threads/<id>/artifacts/, the
// thread's prefix like its transcript) and from Registry.Call's.
func TestFSReadArtifactOfSlashedDirective(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setupFS(t, FSConfig{})
	env := &Env{ThreadID: "demo/hello-1739820456-k3j9qa", TreeID: "demo/hello-1739820456-k3j9qa", Store: s.store}
	worker := fmt.Sprintf("threads/%s/artifacts/%s.txt", env.ThreadID, "toolu_1")
	require.NoError(t, s.store.Put(ctx, worker, []byte("a\nb\n")))
	r := s.run(t, env, FSReadID, map[string]any{"artifact": worker, "offset": 2})
	require.False(t, r.IsError, r.Output)
	require.Equal(t, "b\n[lines 2-2 of 2]", r.Output)

	reg, err := NewRegistry(echoTool{"acme/echo"})
	require.NoError(t, err)
	in, _ := json.Marshal(map[string]string{"text": strings.Repeat("z\n", 1000)})
	cut, err := reg.Call(ctx, env, thread.ToolCall{ID: "c1", Name: "acme/echo", Input: in}, 1000)
	require.NoError(t, err)
	require.NotEmpty(t, cut.Artifact)
	r = s.run(t, env, FSReadID, map[string]any{"artifact": cut.Artifact, "offset": 1000})
	require.False(t, r.IsError, r.Output)
	require.Equal(t, "z\n[lines 1000-1000 of 1000]", r.Output)

	other := &Env{ThreadID: "demo/hello-1739820456-zzzzzz", TreeID: env.TreeID, Store: s.store}
	r = s.run(t, other, FSReadID, map[string]any{"artifact": worker})
	require.True(t, r.IsError)
	require.Contains(t, r.Output, "not an artifact of this thread")
}

func TestFSList(t *testing.T) {
	t.Parallel()
	s := setupFS(t, FSConfig{MaxListEntries: 3})
	for _, p := range []string{"a.txt", "d/x.txt", "d/y.txt", "d/e/z.txt"} {
		require.False(t, s.run(t, s.env, FSWriteID, map[string]any{"path": p, "content": "12"}).IsError)
	}
	tests := []struct {
		in   map[string]any
		want string
	}{
		{in: map[string]any{}, want: "a.txt\t2\nd/\n"},
		{in: map[string]any{"path": "d"}, want: "d/e/\nd/x.txt\t2\nd/y.txt\t2\n"},
		{in: map[string]any{"path": "d/", "recursive": true}, want: "d/e/z.txt\t2\nd/x.txt\t2\nd/y.txt\t2\n"},
		{in: map[string]any{"recursive": true}, want: "a.txt\t2\nd/e/z.txt\t2\nd/x.txt\t2\n[listing cut at 3 entries; list a subdirectory]\n"},
		{in: map[string]any{"path": "nope"}, want: "(no files in nope/)"},
	}
	for _, tt := range tests {
		r := s.run(t, s.env, FSListID, tt.in)
		require.False(t, r.IsError, r.Output)
		require.Equal(t, tt.want, r.Output, "%v", tt.in)
	}
}

// TestFSConcurrentAppends: sibling threads (here goroutines sharing a store,
// which is what workers sharing S3 amount to) appending to one file lose no
// line: the write lease serialises the read-modify-writes.
func TestFSConcurrentAppends(t *testing.T) {
	t.Parallel()
	s := setupFS(t, FSConfig{})
	// A store with latency, as S3 has, so that unserialised
	// read-modify-writes would interleave (without the lease this test
	// loses lines).
	store := latencyStore{s.store}
	const writers, each = 8, 15
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env := &Env{ThreadID: fmt.Sprintf("th-%d", w), TreeID: "tree-1", Store: store}
			tool, _ := s.reg.Lookup(FSWriteID)
			for i := range each {
				in, _ := json.Marshal(map[string]any{"path": "log.txt", "content": fmt.Sprintf("w%d-%d\n", w, i), "mode": "append"})
				r, err := tool.Run(context.Background(), env, in)
				if err != nil || r.IsError {
					t.Errorf("append: %v %s", err, r.Output)
				}
			}
		}()
	}
	wg.Wait()
	r := s.run(t, s.env, FSReadID, map[string]any{"path": "log.txt"})
	lines := strings.Split(strings.TrimSuffix(r.Output, "\n"), "\n")
	require.Len(t, lines, writers*each)
	seen := map[string]bool{}
	for _, l := range lines {
		seen[l] = true
	}
	for w := range writers {
		for i := range each {
			require.True(t, seen[fmt.Sprintf("w%d-%d", w, i)], "lost w%d-%d", w, i)
		}
	}
}

// latencyStore sleeps a little after each read.
type latencyStore struct{ *blobstore.Memory }

func (s latencyStore) Get(ctx context.Context, key string) ([]byte, error) {
	b, err := s.Memory.Get(ctx, key)
	time.Sleep(100 * time.Microsecond)
	return b, err
}

// TestFSLease covers the lease's edges: a held lease makes a writer wait and
// then report busy, and an expired one (its writer crashed) is broken.
func TestFSLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A clock that moves 100µs each time it is read: the writer's 1 ms
	// wait runs out after a few polls, far inside the 5 s lease.
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); now = now.Add(100 * time.Microsecond); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	s := setupFS(t, FSConfig{LockLease: 10 * time.Second, LockWait: time.Millisecond, Now: clock})
	lk := blobkey.WorkspaceLock("tree-1", "f.txt")
	held, _ := json.Marshal(lease{Owner: "crashed", Expires: clock().Add(5 * time.Second).UnixMilli()})
	require.NoError(t, s.store.Put(ctx, lk, held))

	r := s.run(t, s.env, FSWriteID, map[string]any{"path": "f.txt", "content": "x"})
	require.True(t, r.IsError)
	require.Contains(t, r.Output, "busy")
	got, err := s.store.Get(ctx, lk)
	require.NoError(t, err)
	require.Equal(t, string(held), string(got), "a live lease is not broken")
	_, err = s.store.Get(ctx, blobkey.WorkspaceFile("tree-1", "f.txt"))
	require.ErrorIs(t, err, blobstore.ErrNotFound)

	// Past its expiry the crashed writer's lease is broken and the write goes through.
	advance(10 * time.Second)
	r = s.run(t, s.env, FSWriteID, map[string]any{"path": "f.txt", "content": "x"})
	require.False(t, r.IsError, r.Output)
	_, err = s.store.Get(ctx, lk)
	require.ErrorIs(t, err, blobstore.ErrNotFound)
	data, err := s.store.Get(ctx, blobkey.WorkspaceFile("tree-1", "f.txt"))
	require.NoError(t, err)
	require.Equal(t, "x", string(data))
}

// slowStore advances the test clock on every Get, making each write outlive
// its lease a given number of times.
type slowStore struct {
	*blobstore.Memory
	advance func()
	mu      sync.Mutex
	slow    int
	puts    int
}

func (s *slowStore) Get(ctx context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	if s.slow > 0 && strings.Contains(key, "/files/") {
		s.slow--
		s.advance()
	}
	s.mu.Unlock()
	return s.Memory.Get(ctx, key)
}

func (s *slowStore) Put(ctx context.Context, key string, data []byte) error {
	if strings.Contains(key, "/files/") {
		s.mu.Lock()
		s.puts++
		s.mu.Unlock()
	}
	return s.Memory.Put(ctx, key, data)
}

func TestFSLeaseRunsOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	store := &slowStore{Memory: blobstore.NewMemory(), advance: func() { mu.Lock(); now = now.Add(9 * time.Second); mu.Unlock() }}
	tool := Builtins(FSConfig{LockLease: 10 * time.Second, Now: clock})[0]
	env := &Env{ThreadID: "th-1", TreeID: "tree-1", Store: store}
	in, _ := json.Marshal(map[string]any{"path": "f.txt", "content": "x", "mode": "append"})

	store.slow = 2 // the first two attempts run late; the third is on time
	r, err := tool.Run(ctx, env, in)
	require.NoError(t, err)
	require.False(t, r.IsError, r.Output)
	require.Equal(t, 1, store.puts, "late attempts must not write")
	data, _ := store.Memory.Get(ctx, blobkey.WorkspaceFile("tree-1", "f.txt"))
	require.Equal(t, "x", string(data))

	store.slow = 3 // always late: an infrastructure error, nothing written
	_, err = tool.Run(ctx, env, in)
	require.ErrorContains(t, err, "lease ran out")
	require.Equal(t, 1, store.puts)
}

func TestFSNeedsWorkspace(t *testing.T) {
	t.Parallel()
	for _, tool := range Builtins(FSConfig{}) {
		_, err := tool.Run(context.Background(), &Env{ThreadID: "x"}, json.RawMessage(`{"path":"a","content":"b"}`))
		require.Error(t, err, tool.Def().Name)
	}
}

func TestFSBadJSONInput(t *testing.T) {
	t.Parallel()
	s := setupFS(t, FSConfig{})
	for _, tool := range Builtins(FSConfig{}) {
		r, err := tool.Run(context.Background(), s.env, json.RawMessage(`{"path": 3}`))
		require.NoError(t, err)
		require.True(t, r.IsError, tool.Def().Name)
		require.Contains(t, r.Output, "bad input for "+tool.Def().Name)
	}
}

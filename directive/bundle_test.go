package directive

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/internal/testing/testenv"
)

type tree map[string]string // relative path → content ("#!" content is written executable)

func bundleSetup(t *testing.T) (proj, home string) {
	proj, home = t.TempDir(), t.TempDir()
	dc, err := os.ReadFile("testdata/depth_child.md")
	require.NoError(t, err)
	testenv.WriteFiles(t, proj, tree{
		".ai/directives/test/limits/depth_child.md": string(dc),
		".ai/directives/shared.md":                  string(fileOf("shared", "project").Data),
		".ai/knowledge/project/conventions.md":      "Use tabs.",
		".ai/knowledge/dup.md":                      "same bytes",
		".ai/config/agent/resilience.yaml":          "limits: {turns: 3}\n",
		".ai/config/agent/hooks.yaml":               "hooks: []\n",
		".ai/tools/scrape.sh":                       "#!/bin/sh\necho hi\n",
		".ai/agent/threads/old/thread.json":         "{}", // not bundled
		"README.md":                                 "not bundled",
	})
	testenv.WriteFiles(t, home, tree{
		".ai/directives/shared.md":       string(fileOf("shared", "user").Data),
		".ai/directives/mine.md":         string(fileOf("mine", "user").Data),
		".ai/config/agent/hooks.yaml":    "hooks: []\n",
		".ai/knowledge/private.md":       "not bundled",
		".ai/knowledge/dup-elsewhere.md": "same bytes",
	})
	return proj, home
}

func TestBundleRoundTrip(t *testing.T) {
	ctx := context.Background()
	store := blobstore.NewMemory()
	proj, home := bundleSetup(t)
	extra := map[string][]byte{"script": []byte("directives: {}\n")}

	d1, err := BuildBundle(ctx, store, proj, home, extra)
	require.NoError(t, err)
	d2, err := BuildBundle(ctx, store, proj, home, extra)
	require.NoError(t, err)
	require.Equal(t, d2, d1, "same content gave digests")
	require.Len(t, d1, 64, "same content gave digests %q and %q", d1, d2)
	// A fresh store with the same content gives the same digest.
	d3, err := BuildBundle(ctx, blobstore.NewMemory(), proj, home, extra)
	require.NoError(t, err, "fresh store digest %q, %v; want %q", d3, err, d1)
	require.Equal(t, d1, d3, "fresh store digest %q, %v; want %q", d3, err, d1)

	cache := NewBundleCache(4, 1<<20)
	b, err := cache.Load(ctx, store, d1)
	require.NoError(t, err)
	wantPaths := []string{
		".ai/config/agent/hooks.yaml",
		".ai/config/agent/resilience.yaml",
		".ai/directives/shared.md",
		".ai/directives/test/limits/depth_child.md",
		".ai/knowledge/dup.md",
		".ai/knowledge/project/conventions.md",
		".ai/tools/scrape.sh",
		"~user/.ai/config/agent/hooks.yaml",
		"~user/.ai/directives/mine.md",
		"~user/.ai/directives/shared.md",
	}
	if diff := cmp.Diff(wantPaths, b.Paths()); diff != "" {
		t.Errorf("Paths (-want +got):\n%s", diff)
	}
	got, _ := fs.ReadFile(b, ".ai/knowledge/project/conventions.md")
	require.Equal(t, "Use tabs.", string(got), "conventions = %q", got)
	if runtime.GOOS != "windows" {
		st, err := fs.Stat(b, ".ai/tools/scrape.sh")
		require.NoError(t, err, "tool mode = %v", st)
		require.EqualValues(t, 0o755, st.Mode().Perm(), "tool mode = %v, %v; want 0755", st, err)
		st, _ = fs.Stat(b, ".ai/knowledge/dup.md")
		require.EqualValues(t, 0o644, st.Mode().Perm(), "knowledge mode = %v", st.Mode())
	}
	s, ok := b.Extra("script")
	require.True(t, ok, "Extra = %q %v", s, ok)
	require.Equal(t, "directives: {}\n", string(s), "Extra = %q %v", s, ok)
	_, ok = b.Extra("nope")
	require.False(t, ok, "unknown extra found")
	// Resolution over the bundle: project, then user, then system.
	r := b.Resolver()
	requireResolves(t, r, []resolves{
		{"shared", SpaceProject, "project"},
		{"mine", SpaceUser, "user"},
		{"test/limits/depth_child", SpaceProject, ""},
		{DefaultContinuation, SpaceSystem, ""},
	})
	d, _, err := r.Resolve("test/limits/depth_child")
	require.NoError(t, err)
	require.Equal(t, "depth_child", d.Name)
	got, err = fs.ReadFile(b.UserFS(), ".ai/config/agent/hooks.yaml")
	require.NoError(t, err, "user hooks: %q", got)
	require.Equal(t, "hooks: []\n", string(got), "user hooks: %q %v", got, err)
	// The bundle is a well-behaved fs.FS.
	require.NoError(t, fstest.TestFS(b, wantPaths...), "fstest")
	// Identical content is stored once: 10 files + 1 extra, two pairs of
	// duplicates (hooks.yaml x2; "same bytes" is only bundled once).
	blobs, err := store.List(ctx, "bundles/blobs/")
	require.NoError(t, err)
	if len(blobs) != 10 {
		var keys []string
		for _, bl := range blobs {
			keys = append(keys, bl.Key)
		}
		t.Errorf("stored %d blobs, want 10: %v", len(blobs), keys)
	}
	// Cached: a second load returns the same bundle without the store.
	b2, err := cache.Load(ctx, failingStore{}, d1)
	if err != nil || b2 != b {
		t.Errorf("cached load: %p %v", b2, err)
	}

	// Changed content → different digest; the old bundle still loads unchanged.
	testenv.WriteFiles(t, proj, tree{".ai/knowledge/project/conventions.md": "Use spaces."})
	d4, err := BuildBundle(ctx, store, proj, home, extra)
	require.NoError(t, err)
	require.NotEqual(t, d1, d4, "changed content gave the same digest")
	old, err := NewBundleCache(4, 1<<20).Load(ctx, store, d1)
	require.NoError(t, err)
	got, _ = fs.ReadFile(old, ".ai/knowledge/project/conventions.md")
	require.Equal(t, "Use tabs.", string(got), "old bundle changed: %q", got)
	// Changed extra, mode, or user space → different digest.
	d5, _ := BuildBundle(ctx, store, proj, home, map[string][]byte{"script": []byte("x")})
	require.NotEqual(t, d4, d5, "changed extra gave the same digest")
	d6, _ := BuildBundle(ctx, store, proj, "", extra)
	require.NotEqual(t, d4, d6, "dropping the user space gave the same digest")
	require.NoError(t, os.Chmod(filepath.Join(proj, ".ai/tools/scrape.sh"), 0o644))
	d7, _ := BuildBundle(ctx, store, proj, home, extra)
	require.NotEqual(t, d4, d7, "changed mode gave the same digest")
}

func TestBundleEmptyProject(t *testing.T) {
	ctx := context.Background()
	store := blobstore.NewMemory()
	dg, err := BuildBundle(ctx, store, t.TempDir(), "", nil)
	require.NoError(t, err)
	b, err := NewBundleCache(1, 1<<20).Load(ctx, store, dg)
	require.NoError(t, err)
	require.Empty(t, b.Paths(), "paths")
	_, sp, err := b.Resolver().Resolve(DefaultContinuation)
	require.NoError(t, err, "system space through an empty bundle: %q", sp)
	require.Equal(t, SpaceSystem, sp, "system space through an empty bundle: %q %v", sp, err)
	require.NoError(t, fstest.TestFS(b))
}

func TestBundleTamperAndErrors(t *testing.T) {
	ctx := context.Background()
	store := blobstore.NewMemory()
	proj, _ := bundleSetup(t)
	dg, err := BuildBundle(ctx, store, proj, "", nil)
	require.NoError(t, err)
	_, err = LoadBundle(ctx, store, "nothex")
	require.ErrorIs(t, err, ErrBadBundle, "bad digest")
	_, err = LoadBundle(ctx, store, strings.Repeat("0", 64))
	require.ErrorIs(t, err, blobstore.ErrNotFound, "unknown digest")
	// Corrupt one blob: loading fails with ErrBadBundle.
	blobs, _ := store.List(ctx, "bundles/blobs/")
	sort.Slice(blobs, func(i, j int) bool { return blobs[i].Key < blobs[j].Key })
	require.NoError(t, store.Put(ctx, blobs[0].Key, []byte("tampered")))
	_, err = NewBundleCache(1, 1<<20).Load(ctx, store, dg)
	require.ErrorIs(t, err, ErrBadBundle, "tampered blob")
	// Corrupt the manifest.
	require.NoError(t, store.Put(ctx, "bundles/"+dg+".json", []byte(`{"version":1,"files":{}}`)))
	_, err = NewBundleCache(1, 1<<20).Load(ctx, store, dg)
	require.ErrorIs(t, err, ErrBadBundle, "tampered manifest")
}

func TestBundleCacheEvicts(t *testing.T) {
	ctx := context.Background()
	store := blobstore.NewMemory()
	var digests []string
	for i := 0; i < 3; i++ {
		dg, err := BuildBundle(ctx, store, "", "", map[string][]byte{"n": {byte(i)}})
		require.NoError(t, err)
		digests = append(digests, dg)
	}
	c := NewBundleCache(2, 1<<20)
	for _, dg := range digests {
		_, err := c.Load(ctx, store, dg)
		require.NoError(t, err)
	}
	require.Equal(t, 2, c.Len(), "Len")
	_, err := c.Load(ctx, failingStore{}, digests[0])
	require.Error(t, err, "least recently used bundle was not evicted")
	_, err = c.Load(ctx, failingStore{}, digests[2])
	require.NoError(t, err, "most recent bundle evicted")
	small := NewBundleCache(10, 0)
	_, err = small.Load(ctx, store, digests[0])
	require.NoError(t, err, "byte bound: len %d err", small.Len())
	require.Equal(t, 0, small.Len(), "byte bound: len %d err %v", small.Len(), err)
}

type failingStore struct{ blobstore.Store }

func (failingStore) Get(context.Context, string) ([]byte, error) {
	return nil, errors.New("store must not be called")
}

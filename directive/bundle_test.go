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

	"github.com/spool-run/spool/blobstore"
)

type tree map[string]string // relative path → content ("#!" content is written executable)

func writeTree(t *testing.T, root string, files tree) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := fs.FileMode(0o644)
		if strings.HasPrefix(content, "#!") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // umask
			t.Fatal(err)
		}
	}
}

func bundleSetup(t *testing.T) (proj, home string) {
	proj, home = t.TempDir(), t.TempDir()
	dc, err := os.ReadFile("testdata/depth_child.md")
	if err != nil {
		t.Fatal(err)
	}
	writeTree(t, proj, tree{
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
	writeTree(t, home, tree{
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
	if err != nil {
		t.Fatal(err)
	}
	d2, err := BuildBundle(ctx, store, proj, home, extra)
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 || len(d1) != 64 {
		t.Fatalf("same content gave digests %q and %q", d1, d2)
	}
	// A fresh store with the same content gives the same digest.
	if d3, err := BuildBundle(ctx, blobstore.NewMemory(), proj, home, extra); err != nil || d3 != d1 {
		t.Fatalf("fresh store digest %q, %v; want %q", d3, err, d1)
	}

	cache := NewBundleCache(4, 1<<20)
	b, err := cache.Load(ctx, store, d1)
	if err != nil {
		t.Fatal(err)
	}
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
	if got, _ := fs.ReadFile(b, ".ai/knowledge/project/conventions.md"); string(got) != "Use tabs." {
		t.Errorf("conventions = %q", got)
	}
	if runtime.GOOS != "windows" {
		st, err := fs.Stat(b, ".ai/tools/scrape.sh")
		if err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("tool mode = %v, %v; want 0755", st, err)
		}
		st, _ = fs.Stat(b, ".ai/knowledge/dup.md")
		if st.Mode().Perm() != 0o644 {
			t.Errorf("knowledge mode = %v", st.Mode())
		}
	}
	if s, ok := b.Extra("script"); !ok || string(s) != "directives: {}\n" {
		t.Errorf("Extra = %q %v", s, ok)
	}
	if _, ok := b.Extra("nope"); ok {
		t.Error("unknown extra found")
	}
	// Resolution over the bundle: project, then user, then system.
	r := b.Resolver()
	if d, sp, err := r.Resolve("shared"); err != nil || sp != SpaceProject || d.Description != "project" {
		t.Errorf("shared: %v %q %v", d, sp, err)
	}
	if d, sp, err := r.Resolve("mine"); err != nil || sp != SpaceUser || d.Description != "user" {
		t.Errorf("mine: %v %q %v", d, sp, err)
	}
	if d, sp, err := r.Resolve("test/limits/depth_child"); err != nil || sp != SpaceProject || d.Name != "depth_child" {
		t.Errorf("depth_child: %v %q %v", d, sp, err)
	}
	if _, sp, err := r.Resolve(DefaultContinuation); err != nil || sp != SpaceSystem {
		t.Errorf("continuation: %q %v", sp, err)
	}
	if got, err := fs.ReadFile(b.UserFS(), ".ai/config/agent/hooks.yaml"); err != nil || string(got) != "hooks: []\n" {
		t.Errorf("user hooks: %q %v", got, err)
	}
	// The bundle is a well-behaved fs.FS.
	if err := fstest.TestFS(b, wantPaths...); err != nil {
		t.Errorf("fstest: %v", err)
	}
	// Identical content is stored once: 10 files + 1 extra, two pairs of
	// duplicates (hooks.yaml x2; "same bytes" is only bundled once).
	blobs, err := store.List(ctx, "bundles/blobs/")
	if err != nil {
		t.Fatal(err)
	}
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
	writeTree(t, proj, tree{".ai/knowledge/project/conventions.md": "Use spaces."})
	d4, err := BuildBundle(ctx, store, proj, home, extra)
	if err != nil {
		t.Fatal(err)
	}
	if d4 == d1 {
		t.Fatal("changed content gave the same digest")
	}
	old, err := NewBundleCache(4, 1<<20).Load(ctx, store, d1)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := fs.ReadFile(old, ".ai/knowledge/project/conventions.md"); string(got) != "Use tabs." {
		t.Errorf("old bundle changed: %q", got)
	}
	// Changed extra, mode, or user space → different digest.
	if d5, _ := BuildBundle(ctx, store, proj, home, map[string][]byte{"script": []byte("x")}); d5 == d4 {
		t.Error("changed extra gave the same digest")
	}
	if d6, _ := BuildBundle(ctx, store, proj, "", extra); d6 == d4 {
		t.Error("dropping the user space gave the same digest")
	}
	if err := os.Chmod(filepath.Join(proj, ".ai/tools/scrape.sh"), 0o644); err != nil {
		t.Fatal(err)
	}
	if d7, _ := BuildBundle(ctx, store, proj, home, extra); d7 == d4 {
		t.Error("changed mode gave the same digest")
	}
}

func TestBundleEmptyProject(t *testing.T) {
	ctx := context.Background()
	store := blobstore.NewMemory()
	dg, err := BuildBundle(ctx, store, t.TempDir(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBundleCache(1, 1<<20).Load(ctx, store, dg)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Paths()) != 0 {
		t.Errorf("paths = %v", b.Paths())
	}
	if _, sp, err := b.Resolver().Resolve(DefaultContinuation); err != nil || sp != SpaceSystem {
		t.Errorf("system space through an empty bundle: %q %v", sp, err)
	}
	if err := fstest.TestFS(b); err != nil {
		t.Error(err)
	}
}

func TestBundleTamperAndErrors(t *testing.T) {
	ctx := context.Background()
	store := blobstore.NewMemory()
	proj, _ := bundleSetup(t)
	dg, err := BuildBundle(ctx, store, proj, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadBundle(ctx, store, "nothex"); !errors.Is(err, ErrBadBundle) {
		t.Errorf("bad digest: %v", err)
	}
	if _, err := LoadBundle(ctx, store, strings.Repeat("0", 64)); !errors.Is(err, blobstore.ErrNotFound) {
		t.Errorf("unknown digest: %v", err)
	}
	// Corrupt one blob: loading fails with ErrBadBundle.
	blobs, _ := store.List(ctx, "bundles/blobs/")
	sort.Slice(blobs, func(i, j int) bool { return blobs[i].Key < blobs[j].Key })
	if err := store.Put(ctx, blobs[0].Key, []byte("tampered")); err != nil {
		t.Fatal(err)
	}
	if _, err := NewBundleCache(1, 1<<20).Load(ctx, store, dg); !errors.Is(err, ErrBadBundle) {
		t.Errorf("tampered blob: %v", err)
	}
	// Corrupt the manifest.
	if err := store.Put(ctx, "bundles/"+dg+".json", []byte(`{"version":1,"files":{}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := NewBundleCache(1, 1<<20).Load(ctx, store, dg); !errors.Is(err, ErrBadBundle) {
		t.Errorf("tampered manifest: %v", err)
	}
}

func TestBundleCacheEvicts(t *testing.T) {
	ctx := context.Background()
	store := blobstore.NewMemory()
	var digests []string
	for i := 0; i < 3; i++ {
		dg, err := BuildBundle(ctx, store, "", "", map[string][]byte{"n": {byte(i)}})
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, dg)
	}
	c := NewBundleCache(2, 1<<20)
	for _, dg := range digests {
		if _, err := c.Load(ctx, store, dg); err != nil {
			t.Fatal(err)
		}
	}
	if c.Len() != 2 {
		t.Errorf("Len = %d, want 2", c.Len())
	}
	if _, err := c.Load(ctx, failingStore{}, digests[0]); err == nil {
		t.Error("least recently used bundle was not evicted")
	}
	if _, err := c.Load(ctx, failingStore{}, digests[2]); err != nil {
		t.Errorf("most recent bundle evicted: %v", err)
	}
	small := NewBundleCache(10, 0)
	if _, err := small.Load(ctx, store, digests[0]); err != nil || small.Len() != 0 {
		t.Errorf("byte bound: len %d err %v", small.Len(), err)
	}
}

type failingStore struct{ blobstore.Store }

func (failingStore) Get(context.Context, string) ([]byte, error) {
	return nil, errors.New("store must not be called")
}

package blobstore_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/internal/testing/testenv"
)

// localImpls are the two ways Local opens paths: openat2 (where the kernel
// has it) and the O_NOFOLLOW walk.
var localImpls = map[string]func(string) (*blobstore.Local, error){
	"openat2": blobstore.NewLocal,
	"walk":    blobstore.NewLocalWalking,
}

// symlinkCase plants one symlink in a fresh store and names a key whose
// path goes through it.
type symlinkCase struct {
	name string
	// link is the symlink's path under the root; target is under outside.
	link, target string
	// key goes through the link; final: the link is key's own file.
	key   string
	final bool
}

var symlinkCases = []symlinkCase{
	{name: "top-level dir", link: "threads", target: "dir", key: "threads/secret"},
	{name: "top-level dir, deeper key", link: "threads", target: ".", key: "threads/dir/secret"},
	{name: "intermediate dir", link: "workspaces/tree/files", target: "dir", key: "workspaces/tree/files/secret"},
	{name: "intermediate dir, new subdir", link: "workspaces/tree/files", target: "dir", key: "workspaces/tree/files/new/x"},
	{name: "last dir", link: "a/b/c", target: "dir", key: "a/b/c/secret"},
	{name: "final file", link: "a/b.txt", target: "dir/secret", key: "a/b.txt", final: true},
	{name: "final file at top", link: "top.txt", target: "dir/secret", key: "top.txt", final: true},
	{name: "final dir link", link: "a/d", target: "dir", key: "a/d", final: true},
	{name: "dangling", link: "w/files", target: "nowhere", key: "w/files/x"},
}

// TestLocalRefusesSymlinks plants a symlink at every level of the store,
// to a file or a directory outside it, and runs every operation through
// it: nothing outside is read, listed, written, created or deleted.
func TestLocalRefusesSymlinks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for impl, newLocal := range localImpls {
		for _, c := range symlinkCases {
			t.Run(impl+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				base := t.TempDir()
				outside := filepath.Join(base, "outside")
				testenv.WriteFile(t, filepath.Join(outside, "dir", "secret"), "SECRET")
				before := snapshot(t, outside)
				root := filepath.Join(base, "store")
				s, err := newLocal(root)
				if err != nil {
					t.Fatal(err)
				}
				plant := func() {
					link := filepath.Join(root, filepath.FromSlash(c.link))
					_ = os.Remove(link)
					if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.Symlink(filepath.Join(outside, c.target), link); err != nil {
						t.Fatal(err)
					}
				}
				plant()

				if _, err := s.Get(ctx, c.key); !errors.Is(err, blobstore.ErrSymlink) {
					t.Errorf("Get(%s) = %v, want ErrSymlink", c.key, err)
				}
				if _, err := s.Stat(ctx, c.key); !errors.Is(err, blobstore.ErrSymlink) {
					t.Errorf("Stat(%s) = %v, want ErrSymlink", c.key, err)
				}
				for _, prefix := range []string{"", c.key, c.link + "/", c.key + "/"} {
					got, err := s.List(ctx, prefix)
					if err != nil && !errors.Is(err, blobstore.ErrSymlink) {
						t.Errorf("List(%q): %v", prefix, err)
					}
					if len(got) > 0 {
						t.Errorf("List(%q) = %v, want nothing (only the link is there)", prefix, got)
					}
				}
				err = s.PutIfAbsent(ctx, c.key, []byte("PWNED"))
				switch {
				case c.final && !errors.Is(err, blobstore.ErrExists):
					t.Errorf("PutIfAbsent(%s) = %v, want ErrExists (the link is there)", c.key, err)
				case !c.final && !errors.Is(err, blobstore.ErrSymlink):
					t.Errorf("PutIfAbsent(%s) = %v, want ErrSymlink", c.key, err)
				}
				err = s.Put(ctx, c.key, []byte("PWNED"))
				switch {
				case c.final && c.target == "dir/secret":
					// The link is replaced by the object, its target untouched.
					if err != nil {
						t.Errorf("Put(%s) over a file link = %v, want it replaced", c.key, err)
					} else if fi, lerr := os.Lstat(filepath.Join(root, c.link)); lerr != nil || !fi.Mode().IsRegular() {
						t.Errorf("after Put(%s): %v %v, want a regular file", c.key, fi, lerr)
					}
				case !c.final && !errors.Is(err, blobstore.ErrSymlink):
					t.Errorf("Put(%s) = %v, want ErrSymlink", c.key, err)
				}
				plant()
				err = s.Delete(ctx, c.key)
				switch {
				case c.final && err != nil:
					t.Errorf("Delete(%s) of a link = %v, want the link removed", c.key, err)
				case !c.final && !errors.Is(err, blobstore.ErrSymlink):
					t.Errorf("Delete(%s) = %v, want ErrSymlink", c.key, err)
				}
				if after := snapshot(t, outside); after != before {
					t.Errorf("outside the store changed:\nbefore %s\nafter  %s", before, after)
				}
			})
		}
	}
}

// TestLocalStagingDirSymlink: a symlink in place of the staging directory
// fails writes instead of writing through it.
func TestLocalStagingDirSymlink(t *testing.T) {
	t.Parallel()
	for impl, newLocal := range localImpls {
		t.Run(impl, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			outside := filepath.Join(base, "outside")
			testenv.WriteFile(t, filepath.Join(outside, "keep"), "x")
			root := filepath.Join(base, "store")
			s, err := newLocal(root)
			if err != nil {
				t.Fatal(err)
			}
			tmp := filepath.Join(root, ".spool-tmp")
			if err := os.Remove(tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, tmp); err != nil {
				t.Fatal(err)
			}
			for _, err := range []error{s.Put(context.Background(), "k", []byte("v")), s.PutIfAbsent(context.Background(), "k2", []byte("v"))} {
				if !errors.Is(err, blobstore.ErrSymlink) {
					t.Errorf("write with a symlinked staging dir = %v, want ErrSymlink", err)
				}
			}
			if got := snapshot(t, outside); got != "keep=x;" {
				t.Errorf("outside = %s", got)
			}
		})
	}
}

// TestLocalRootThroughSymlink: the root's own path may go through a
// symlink (the operator's choice).
func TestLocalRootThroughSymlink(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	if err := os.MkdirAll(filepath.Join(base, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "real"), filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	for impl, newLocal := range localImpls {
		s, err := newLocal(filepath.Join(base, "link", impl))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := s.Put(ctx, "a/b", []byte("x")); err != nil {
			t.Fatalf("%s: %v", impl, err)
		}
		if got, err := s.Get(ctx, "a/b"); err != nil || string(got) != "x" {
			t.Fatalf("%s: Get = %q, %v", impl, got, err)
		}
	}
}

// snapshot renders every entry under dir with its content.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b.WriteString(rel + "=" + string(data) + ";")
		case d.IsDir() && rel != ".":
			b.WriteString(rel + "/;")
		case !d.IsDir():
			b.WriteString(rel + "@;")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

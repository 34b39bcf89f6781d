package tools

import (
	"strings"
	"testing"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/stretchr/testify/require"
)

func TestCleanPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    string
		wantErr string // substring; "" means accepted
	}{
		{in: "a.txt", want: "a.txt"},
		{in: "dir/sub/file.md", want: "dir/sub/file.md"},
		{in: "./a.txt", want: "a.txt"},
		{in: "a/./b//c", want: "a/b/c"},
		{in: "a/../b", want: "b"},
		{in: "a/", want: "a"},
		{in: "notes/résumé ünïcode.txt", want: "notes/résumé ünïcode.txt"},
		{in: "..a/b", want: "..a/b"},
		{in: "", wantErr: "empty"},
		{in: "   ", wantErr: "empty"},
		{in: " /", wantErr: "spaces"},
		{in: "a/ /b", wantErr: "spaces"},
		{in: ".", wantErr: "workspace itself"},
		{in: "a/..", wantErr: "workspace itself"},
		{in: "..", wantErr: "escapes"},
		{in: "../x", wantErr: "escapes"},
		{in: "a/../../b", wantErr: "escapes"},
		{in: "a/b/../../../c", wantErr: "escapes"},
		{in: "/etc/passwd", wantErr: "absolute"},
		{in: "//x", wantErr: "absolute"},
		{in: `a\b`, wantErr: "backslash"},
		{in: `..\x`, wantErr: "backslash"},
		{in: `C:\x`, wantErr: "backslash"},
		{in: "a\x00b", wantErr: "control"},
		{in: "a\nb", wantErr: "control"},
		{in: "a\xffb", wantErr: "UTF-8"},
		{in: strings.Repeat("x", MaxPathBytes+1), wantErr: "longer"},
	}
	for _, tt := range tests {
		got, err := CleanPath(tt.in)
		if tt.wantErr != "" {
			require.ErrorIs(t, err, ErrBadPath, "CleanPath(%q) = %q", tt.in, got)
			require.ErrorContains(t, err, tt.wantErr, "CleanPath(%q)", tt.in)
			continue
		}
		require.NoError(t, err, "CleanPath(%q)", tt.in)
		require.Equal(t, tt.want, got, "CleanPath(%q)", tt.in)
	}
}

// FuzzCleanPath: an accepted path always makes a valid key inside the tree's
// workspace prefix, and cleaning is idempotent.
func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"a", "../x", "/etc/passwd", "a/../../b", `a\b`, "a/./b", "..a", "a/..", "x\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		c, err := CleanPath(p)
		if err != nil {
			return
		}
		key := blobkey.WorkspaceFile("tree-1", c)
		if err := blobstore.ValidateKey(key); err != nil {
			t.Fatalf("CleanPath(%q) = %q gives invalid key: %v", p, c, err)
		}
		if !strings.HasPrefix(key, blobkey.WorkspaceFiles("tree-1")) {
			t.Fatalf("key %q outside the workspace", key)
		}
		for _, seg := range strings.Split(c, "/") {
			if seg == ".." || seg == "." || seg == "" {
				t.Fatalf("CleanPath(%q) = %q has segment %q", p, c, seg)
			}
		}
		if c2, err := CleanPath(c); err != nil || c2 != c {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", p, c, c2, err)
		}
	})
}

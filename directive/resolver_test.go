package directive

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/stretchr/testify/require"
)

const simple = "```xml\n<directive name=\"%s\" version=\"1.0.0\"><metadata><description>%s</description></metadata></directive>\n```\n"

func fileOf(name, desc string) *fstest.MapFile {
	return &fstest.MapFile{Data: []byte(strings.ReplaceAll(strings.Replace(simple, "%s", name, 1), "%s", desc))}
}

// resolves is a name a resolver finds, the space it finds it in and the
// directive's description ("": any).
type resolves struct {
	name, space, desc string
}

func requireResolves(t *testing.T, r *Resolver, tests []resolves) {
	t.Helper()
	for _, tt := range tests {
		d, space, err := r.Resolve(tt.name)
		require.NoError(t, err, "Resolve(%q)", tt.name)
		if space != tt.space || (tt.desc != "" && d.Description != tt.desc) {
			t.Errorf("Resolve(%q) = space %q desc %q, want %q %q", tt.name, space, d.Description, tt.space, tt.desc)
		}
	}
}

func TestResolverFirstMatchWins(t *testing.T) {
	project := fstest.MapFS{"a/x.md": fileOf("x", "project"), "broken.md": {Data: []byte("no fence")}}
	user := fstest.MapFS{"a/x.md": fileOf("x", "user"), "a/y.md": fileOf("y", "user")}
	r := &Resolver{Spaces: []Space{{Name: SpaceProject, FS: project}, {Name: SpaceUser, FS: user}, SystemSpace()}}

	requireResolves(t, r, []resolves{
		{"a/x", SpaceProject, "project"},
		{"a/x.md", SpaceProject, "project"},
		{"a/y", SpaceUser, "user"},
		{DefaultContinuation, SpaceSystem, ""},
	})
	_, _, err := r.Resolve("a/none")
	require.ErrorIs(t, err, ErrNotFound, "missing directive: err")
	_, _, err = r.Resolve("broken")
	require.Error(t, err, "broken directive: err")
	require.Contains(t, err.Error(), "project:.ai/directives/broken.md", "broken directive: err = %v", err)
	for _, bad := range []string{"", "../x", "/etc/passwd", "a//b", `a\b`, "a/./b"} {
		if _, _, err := r.Resolve(bad); err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("Resolve(%q): err = %v, want a name error", bad, err)
		}
	}
}

func TestNewResolverOverDirectories(t *testing.T) {
	proj, home := t.TempDir(), t.TempDir()
	write := func(root, rel, name, desc string) {
		testenv.WriteFile(t, filepath.Join(root, ".ai", "directives", filepath.FromSlash(rel)), string(fileOf(name, desc).Data))
	}
	write(home, "u/only.md", "only", "home")
	write(home, "both.md", "both", "home")
	write(proj, "both.md", "both", "proj")
	r := NewResolver(proj, home)
	requireResolves(t, r, []resolves{{"both", SpaceProject, "proj"}, {"u/only", SpaceUser, "home"}})
	_, sp, err := NewResolver(proj, "").Resolve("u/only")
	require.ErrorIs(t, err, ErrNotFound, "without home: %q", sp)
}

func TestContinuationSeed(t *testing.T) {
	cont, space, err := (&Resolver{Spaces: []Space{SystemSpace()}}).Resolve(DefaultContinuation)
	require.NoError(t, err, "%v", space)
	require.Equal(t, SpaceSystem, space, "%v", err)
	require.NoError(t, Check(cont))
	orig, err := Parse("discover.md", []byte("Find {input:who} leads in {input:x}.\n\n```xml\n<directive name=\"discover\" version=\"1.0.0\">\n"+
		"  <metadata><description>d</description><permissions/></metadata>\n"+
		"  <inputs><input name=\"who\" type=\"string\" required=\"true\">w</input></inputs>\n</directive>\n```\n"))
	require.NoError(t, err)
	// The original body is rendered with the thread's inputs, once: an
	// undeclared placeholder stays as written, and a value that looks
	// like a placeholder is not rendered again.
	seed, err := ContinuationSeed(cont, "agency/discover", orig, map[string]any{"who": "{input:previous_thread_id}"}, "agency/discover-17", "")
	require.NoError(t, err)
	for _, want := range []string{"agency/discover-17", "`agency/discover`", "Find {input:previous_thread_id} leads in {input:x}.", "Continue executing the directive. Pick up where the previous thread left off."} {
		if !strings.Contains(seed, want) {
			t.Errorf("seed lacks %q:\n%s", want, seed)
		}
	}
	require.NotContains(t, seed, "```xml", "seed holds the fence or unrendered inputs")
	require.NotContains(t, seed, "`{input:previous_thread_id}`", "seed holds the fence or unrendered inputs")
	seed, err = ContinuationSeed(cont, "agency/discover", orig, map[string]any{"who": "Ada"}, "agency/discover-17", "")
	require.NoError(t, err)
	require.Contains(t, seed, "Find Ada leads in {input:x}.", "the original body is rendered with the inputs")
	seed, err = ContinuationSeed(cont, "d", orig, nil, "p-1", "The API key is fixed; retry.")
	require.NoError(t, err, "custom message: %v\n%s", err, seed)
	require.Contains(t, seed, "The API key is fixed; retry.", "custom message: %v", err)
	require.NotContains(t, seed, "Continue executing", "custom message: %v", err)
	_, err = ContinuationSeed(cont, "d", orig, nil, "", "")
	require.NoError(t, err, "empty previous id is a value, not missing")
}

func TestValidateFiles(t *testing.T) {
	if errs := ValidateFiles([]string{"testdata/depth_child.md", "testdata/implement_dashboard.md"}); len(errs) != 0 {
		t.Errorf("valid files: %v", errs)
	}
	errs := ValidateFiles([]string{"testdata/bad", "testdata/nope.md"})
	require.Len(t, errs, 2, "errs")
	want := `testdata/bad/depth_child.md:14: <limits spend="abc">: not a number`
	require.Equal(t, want, errs[0].Error(), "errs[0] = %q", errs[0])
	require.ErrorIs(t, errs[1], os.ErrNotExist, "errs[1]")
	// Check: missing version and bad default
	dir := t.TempDir()
	p := filepath.Join(dir, "v.md")
	testenv.WriteFiles(t, dir, tree{"v.md": "```xml\n<directive name=\"v\"><inputs><input name=\"n\" type=\"integer\" default=\"x\"/></inputs></directive>\n```\n"})
	errs = ValidateFiles([]string{p})
	require.Len(t, errs, 1, "missing version")
	require.Contains(t, errs[0].Error(), "missing version", "missing version: %v", errs)
	testenv.WriteFiles(t, dir, tree{"v.md": "```xml\n<directive name=\"v\" version=\"1\"><inputs><input name=\"n\" type=\"integer\" default=\"x\"/></inputs></directive>\n```\n"})
	errs = ValidateFiles([]string{p})
	require.Len(t, errs, 1, "bad default")
	require.Contains(t, errs[0].Error(), `<input name="n" default="x">: want an integer`, "bad default: %v", errs)
	errs = ValidateFiles([]string{t.TempDir()})
	require.Len(t, errs, 1, "empty dir")
	require.Contains(t, errs[0].Error(), "no .md directive files", "empty dir: %v", errs)
}

// A directive whose name attribute names neither its file nor its path
// below .ai/directives (a copy left with the name of what it was copied
// from) is refused by validate and where it is resolved by name.
func TestNameMatchesFile(t *testing.T) {
	dir := t.TempDir()
	testenv.WriteFiles(t, dir, tree{
		".ai/directives/a/short.md": fmt.Sprintf(simple, "short", "d"),
		".ai/directives/a/full.md":  fmt.Sprintf(simple, "a/full", "d"),
		".ai/directives/a/copy.md":  fmt.Sprintf(simple, "short", "d"),
		"loose.md":                  fmt.Sprintf(simple, "loose", "d"),
		"other.md":                  fmt.Sprintf(simple, "loose", "d"),
	})
	for p, bad := range map[string]bool{".ai/directives/a/short.md": false, ".ai/directives/a/full.md": false, "loose.md": false,
		".ai/directives/a/copy.md": true, "other.md": true} {
		errs := ValidateFiles([]string{filepath.Join(dir, p)})
		if !bad {
			require.Empty(t, errs, p)
			continue
		}
		require.Len(t, errs, 1, p)
		require.Contains(t, errs[0].Error(), `: the name does not match the file: want name=`, p)
	}
	errs := ValidateFiles([]string{filepath.Join(dir, ".ai/directives/a/copy.md")})
	require.Equal(t, filepath.Join(dir, ".ai/directives/a/copy.md")+`: <directive name="short">: the name does not match the file: want name="copy" (the file is a/copy.md)`, errs[0].Error())

	r := NewResolver(dir, "")
	requireResolves(t, r, []resolves{{"a/short", SpaceProject, ""}, {"a/full", SpaceProject, ""}})
	_, _, err := r.Resolve("a/copy")
	require.Error(t, err)
	require.Equal(t, `project:.ai/directives/a/copy.md: <directive name="short">: the name does not match the file: want name="copy" (the file is a/copy.md)`, err.Error())
}
